"""A sweep's configurations as Tune configs, written and read here only. Two encodings:

    by index   {"trial": 7}                                         the grid's 8th configuration
    by entry   {"entry": 1, "1.nfe": 4, "1.kernel_size": 3, "1.hidden_dim": 16}
               a solver entry, then its NFE and its search keys (Optuna's define-by-run form)

A searcher plug-in (`searchers/`) is handed a `SearchSpace` and picks an encoding; every Tune
config comes back through `decode`. Saved Tune states hold these parameter names: `--resume`
reads them as they were written.
"""

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.solver_entry import Probe, SolverEntry
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import needs_fitted_base

if TYPE_CHECKING:  # optuna is imported by the driver, not by a trial's process
    import optuna

INDEX = "trial"
"""The Tune config key of a configuration's index in the grid (`SweepConfig.grid`)."""
ENTRY = "entry"
"""The Tune config key of a solver entry's index in the sweep file."""


def entry_key(index: int, key: str) -> str:
    """The Tune config key of entry `index`'s NFE (`nfe`) or search key: `1.kernel_size`."""
    return f"{index}.{key}"


def decode(params: dict[str, Any], config: SweepConfig) -> tuple[SolverEntry, SolverSpec]:
    """The solver entry and spec a Tune config stands for, in either encoding."""
    if INDEX in params:
        return config.grid()[int(params[INDEX])]
    index = int(params[ENTRY])
    entry = config.solvers[index]
    searched = {k: params[entry_key(index, k)] for k in entry.search}
    nfe = int(params[entry_key(index, "nfe")])
    return entry, SolverSpec(entry.name, nfe, entry.schedule, {**entry.settings, **searched})


@dataclass(frozen=True)
class SolverSpace:
    """Optuna's define-by-run space of a sweep: a solver entry, then its NFE and search keys.

    A class, not a closure, so Tune can save it with the searcher and restore it on --resume."""

    config: SweepConfig

    def __call__(self, trial: "optuna.Trial") -> None:
        index = trial.suggest_categorical(ENTRY, list(range(len(self.config.solvers))))
        entry = self.config.solvers[index]
        trial.suggest_categorical(entry_key(index, "nfe"), list(entry.nfe))
        for key, values in entry.search.items():
            trial.suggest_categorical(entry_key(index, key), list(values))


def space_points(config: SweepConfig) -> list[dict[str, Any]]:
    """Every point of the space by entry, entries in file order, NFE then search keys."""
    points = []
    for index, entry in enumerate(config.solvers):
        keys = list(entry.search)
        for nfe in entry.nfe:
            for values in itertools.product(*(entry.search[k] for k in keys)):
                chosen = {entry_key(index, k): v for k, v in zip(keys, values, strict=True)}
                points.append({ENTRY: index, entry_key(index, "nfe"): nfe, **chosen})
    return points


def longest_first(config: SweepConfig) -> list[int]:
    """The grid's configurations in the order that ends a sweep soonest: the longest first, so the
    last to start are short ones that fill the gaps (the longest-processing-time rule). A trial's
    length is guessed from what it does: a solver on a fitted base (a two-stage SpanLift, which
    fits its base first) before a fitted solver before an analytic one, then by the fit's
    iterations × NFE × replicates; a base so runs inside the trial that needs it, before its own
    trial takes it from the fit cache. Ties keep file order."""

    grid = config.grid()

    def length(index: int) -> tuple[int, float]:
        entry, spec = grid[index]
        if not entry.learns(spec):
            return 0, spec.nfe
        fit = config.fit_of(entry)
        stages = 2 if needs_fitted_base(spec, Probe()) else 1
        return stages, fit.iterations * spec.nfe * len(config.replicate_seeds(entry))

    return sorted(range(len(grid)), key=length, reverse=True)


@dataclass(frozen=True)
class SearchSpace:
    """What a searcher plug-in is handed of a sweep (`searchers.base.Space`): its number of
    configurations, the search metric and mode, the sweep's fit seed, and its configurations in
    either encoding."""

    config: SweepConfig

    @property
    def size(self) -> int:
        return len(self.config.trials())

    @property
    def metric(self) -> str:
        return self.config.search_metric

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def seed(self) -> int:
        return self.config.fit.seed

    def indices(self) -> dict[str, list[int]]:
        """Every configuration by index, as a space of one categorical parameter."""
        return {INDEX: list(range(self.size))}

    def longest_first(self) -> list[dict[str, int]]:
        """Every configuration by index, in the order that ends a sweep soonest."""
        return [{INDEX: index} for index in longest_first(self.config)]

    def by_entry(self) -> SolverSpace:
        """The define-by-run space by entry (picklable, as Tune saves its searcher)."""
        return SolverSpace(self.config)
