"""tpe: Optuna's TPE over the sweep's space by entry, `num_samples` distinct configurations."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spanlift.platform.sweep.searchers.base import Sampled, register

if TYPE_CHECKING:
    import optuna


@register("tpe")
@dataclass(frozen=True)
class TPE(Sampled):
    """Optuna's TPE (tree-structured Parzen estimator): a solver entry, then its NFE and search
    keys, each proposal drawn towards the configurations measured best so far."""

    def sampler(self, seed: int) -> "optuna.samplers.BaseSampler":
        import optuna

        return optuna.samplers.TPESampler(seed=seed)
