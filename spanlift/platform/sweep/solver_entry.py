"""One entry of a sweep file's `solvers:`: a solver, its NFE budgets, its fixed settings and the
settings searched over, read and checked before Ray starts."""

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.sweep import relative_paths
from spanlift.platform.sweep.schema import Section
from spanlift.solvers import SOLVERS, SolverSpec, build_solver
from spanlift.solvers.loading import is_learnable
from spanlift.solvers.schedules import EDM_SIGMA_MAX, EDM_SIGMA_MIN, SCHEDULES
from spanlift.solvers.spec import check_settings, steps_for_nfe


@dataclass(frozen=True)
class SolverEntry:
    """One solver to compare: fixed settings, NFE budgets and the settings to search over."""

    name: str
    nfe: tuple[int, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    search: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)
    """Fit settings of this entry that differ from the sweep's `fit` (loss, target, …, and
    `seeds`, its replicates)."""
    label: str = ""
    """The name its runs carry on the leaderboard (default: the solver's name), so one solver
    fitted two ways is ranked as two rows, e.g. `spanlift (pooled, teacher)`."""
    schedule: str = "edm"
    """The σ grid (see `spanlift.solvers.schedules`); `edm_to_zero` is EDM's own protocol."""
    learned: frozenset[str] | None = None
    """The grid's configurations a fit changes (`configuration_name`), asked once of each when
    the entry is read and its configurations are built to check them; None: not asked yet."""

    def learns(self, spec: SolverSpec) -> bool:
        """Whether a fit changes this configuration of the entry (it has parameters or a search):
        its learned solvers are fitted from every replicate seed, its analytic ones run once."""
        if self.learned is None:
            return learns(spec)
        return configuration_name(spec) in self.learned

    @property
    def fit_settings(self) -> dict[str, Any]:
        """The entry's own fit settings (its `fit:` without the replicates' `seeds`)."""
        return {k: v for k, v in self.fit.items() if k != "seeds"}

    def grid(self) -> list[SolverSpec]:
        keys = list(self.search)
        specs = []
        for nfe in self.nfe:
            for values in itertools.product(*(self.search[k] for k in keys)):
                specs.append(
                    SolverSpec(
                        self.name,
                        nfe,
                        self.schedule,
                        {**self.settings, **dict(zip(keys, values, strict=True))},
                    )
                )
        return specs


PROBE_SIGMAS = (EDM_SIGMA_MIN, EDM_SIGMA_MAX)
"""EDM's σ range, over which every configuration is built once to check its settings before Ray
starts (the backbone's own range may differ; what the settings allow does not)."""


@dataclass(frozen=True)
class Probe:
    """A stand-in backbone with EDM's σ range and one channel: what building a solver to look at
    it (its settings, whether it learns) needs of a backbone."""

    sigma_min: float = EDM_SIGMA_MIN
    sigma_max: float = EDM_SIGMA_MAX
    shape: tuple[int, ...] = (1,)


def configuration_name(spec: SolverSpec) -> str:
    return f"{spec.label()} nfe={spec.nfe}"


def learns(spec: SolverSpec) -> bool:
    """Whether a fit changes the configuration, asked of it built over EDM's σ range."""
    return is_learnable(build_solver(spec, *PROBE_SIGMAS, channels=1))


FIT_KEYS = (*FitSettings.names(), "seeds")
"""What a `fit:` section takes: the fit settings, and `seeds`, the replicates' fit seeds."""


def read_solver_entry(r: Section, folder: Path) -> SolverEntry:
    """One entry of `solvers:`, every configuration of its grid built once to check it."""
    r.only("name", "nfe", "schedule", "settings", "search", "fit", "label")
    name = r.get("name", str, expected="a solver name")
    r.checked("name", lambda: SOLVERS.get(name))
    schedule = r.get("schedule", str, SolverEntry.schedule)
    r.checked("schedule", lambda: SCHEDULES.get(schedule))
    nfe = r.get("nfe", (int, list), expected="an NFE or a list of NFEs")
    settings = r.get("settings", dict, {}, "a mapping of solver settings")
    search = r.child("search", {})
    for key, values in search.data.items():
        if not isinstance(values, list) or not values:
            search.fail(key, values, "a non-empty list of values")
    fit = relative_paths.fit_paths(r.get("fit", dict, {}, "a mapping of fit settings"), folder)
    if fit:
        r.child("fit").only(*FIT_KEYS)
    if "seeds" in fit:
        fit = {**fit, "seeds": read_seeds(r.child("fit"))}
    grid = {key: tuple(values) for key, values in search.data.items()}
    nfe = tuple(nfe if isinstance(nfe, list) else [nfe])
    entry = SolverEntry(name, nfe, settings, grid, fit, r.get("label", str, ""), schedule)
    learned = set()
    for spec in entry.grid():
        check_spec(r, spec)
        if r.checked("settings", lambda spec=spec: learns(spec)):
            learned.add(configuration_name(spec))
    return replace(entry, learned=frozenset(learned))


def check_spec(r: Section, spec: SolverSpec) -> None:
    """A solver spec's schedule, settings and steps for its NFE, checked before anything runs:
    a user error names the key of `r` it comes from."""
    r.checked("schedule", lambda: SCHEDULES.get(spec.schedule))
    r.checked("settings", lambda: check_settings(spec.name, spec.settings))
    r.checked("nfe", lambda: steps_for_nfe(spec.name, spec.nfe, spec.settings, spec.schedule))


def read_seeds(fit: Section) -> tuple[int, ...]:
    """`fit.seeds`: a non-empty list of distinct non-negative integers."""
    value = fit.data["seeds"]
    ok = isinstance(value, list) and value and len(set(value)) == len(value)
    if not ok or not all(type(s) is int and s >= 0 for s in value):
        fit.fail("seeds", value, "a non-empty list of distinct non-negative integer fit seeds")
    return tuple(value)
