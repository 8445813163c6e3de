"""grid: every configuration of the sweep once."""

from dataclasses import dataclass

from spanlift.platform.sweep.searchers.base import (
    OptunaPlan,
    SearchAlgorithm,
    Space,
    every_configuration,
    register,
)


@register("grid")
@dataclass(frozen=True)
class Grid(SearchAlgorithm):
    """Every configuration once, the longest first (Optuna's GridSampler over their indices)."""

    default = True

    def optuna(self, space: Space) -> OptunaPlan:
        return every_configuration(space)
