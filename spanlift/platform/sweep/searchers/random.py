"""random: Optuna's random sampler over the sweep's space by entry, `num_samples` distinct
configurations: the baseline a model-based searcher such as TPE has to beat."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spanlift.platform.sweep.searchers.base import Sampled, register

if TYPE_CHECKING:
    import optuna


@register("random")
@dataclass(frozen=True)
class Random(Sampled):
    """Optuna's RandomSampler: a solver entry, then its NFE and search keys, each drawn uniformly
    and independently of the values measured."""

    def sampler(self, seed: int) -> "optuna.samplers.BaseSampler":
        import optuna

        return optuna.samplers.RandomSampler(seed=seed)
