"""TPE's search space: a solver entry, then its NFE and its search keys, as Tune configs.

    {"entry": 1, "1.nfe": 4, "1.kernel_size": 3, "1.hidden_dim": 16}

`SolverSpace` is Optuna's define-by-run form of it; `space_points` lists every point, in the
sweep file's order.
"""

import itertools
from dataclasses import dataclass
from typing import Any

import optuna

from spanlift.platform.sweep.config import SweepConfig


@dataclass(frozen=True)
class SolverSpace:
    """Optuna's define-by-run space of a sweep: a solver entry, then its NFE and search keys.

    A class, not a closure, so Tune can save it with the searcher and restore it on --resume."""

    config: SweepConfig

    def __call__(self, trial: optuna.Trial) -> None:
        index = trial.suggest_categorical("entry", list(range(len(self.config.solvers))))
        entry = self.config.solvers[index]
        trial.suggest_categorical(f"{index}.nfe", list(entry.nfe))
        for key, values in entry.search.items():
            trial.suggest_categorical(f"{index}.{key}", list(values))


def space_points(config: SweepConfig) -> list[dict[str, Any]]:
    """Every point of the space as a Tune config, entries in file order, NFE then search keys."""
    points = []
    for index, entry in enumerate(config.solvers):
        keys = list(entry.search)
        for nfe in entry.nfe:
            for values in itertools.product(*(entry.search[k] for k in keys)):
                chosen = {f"{index}.{k}": v for k, v in zip(keys, values, strict=True)}
                points.append({"entry": index, f"{index}.nfe": nfe, **chosen})
    return points
