"""Solvers built around a registered base solver (SpanLift, LD3): they keep the base's accounting.

Such a solver takes the settings `base` and `base_settings` (checked like any solver's settings,
`spec.check_settings`), holds the base as `self.base`, spends the base's NFE, evaluates the model
as the base does (AFS included) and steps on the base's grid: its `grid` is the base's, so a grid
handed to it, or learned, is the one both read. It starts where its base starts and has its base's
free steps; a search of its base is a fit's to run (`searched`).

What a solver takes from the bases it is built on (`bases`: a plugin's too) is asked here: its
search (`searches`, `searched`) and its model statistics (`statistics_request`, `use_statistics`).
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, Point, Solver
from spanlift.solvers.capabilities import (
    NeedsStatistics,
    NotDifferentiable,
    Searched,
    free_steps,
    initial_state,
)
from spanlift.solvers.checkpoint import load_solver_state
from spanlift.solvers.grid import Grid
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.spec import check_settings, solver_settings


def build_base(
    solver: str,
    base: str,
    sigmas: Tensor | Grid,
    channels: int,
    base_settings: dict[str, Any] | None = None,
    base_checkpoint: str | None = None,
    trainable: bool = False,
) -> Solver:
    """The registered solver `base` on `sigmas` (a grid module handed on as it is), with its
    settings checked, its state loaded from `base_checkpoint` when given, and its parameters
    frozen unless `trainable`."""
    if base == solver:
        raise SettingsError(f"{solver} cannot be its own base; choose another registered solver")
    if issubclass(SOLVERS.get(base), NotDifferentiable):
        raise SettingsError(
            f"{solver} cannot take {base!r} as its base: {base} runs another library's loop, "
            f"which no gradient passes through, so {solver} could not be fitted on it"
        )
    settings = dict(base_settings or {})
    check_settings(base, settings)
    built = SOLVERS.get(base).build(sigmas, channels, **settings)
    if base_checkpoint:
        built.load_state_dict(load_solver_state(Path(base_checkpoint), expected=base))
    return built.requires_grad_(trainable)


class OnBase(Solver):
    """Delegates grid, NFE, evaluation, start and free steps to `self.base`, the registered solver
    `base` built on `sigmas` with `base_settings` (`build_base`; the subclass's constructor default
    names it when unset)."""

    base: Solver

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int,
        base: str,
        base_settings: dict[str, Any] | None = None,
        base_checkpoint: str | None = None,
        trainable: bool = False,
    ) -> None:
        built = build_base(
            self.name, base, sigmas, channels, base_settings, base_checkpoint, trainable
        )
        nn.Module.__init__(self)  # no grid of its own: `grid` is the base's
        self.base = built
        self.afs = built.afs
        self.buffer_size = built.buffer_size
        self.ends_at_zero = built.ends_at_zero

    @classmethod
    def base_class(cls, settings: dict[str, Any]) -> type[Solver]:
        """The registered class of the base `settings` name (the constructor's default unset)."""
        return SOLVERS.get(settings.get("base", solver_settings(cls)["base"]))

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        base_settings = settings.get("base_settings") or {}
        return cls.base_class(settings).nfe_for_steps(steps, base_settings, to_zero)

    @classmethod
    def free_steps(cls, settings: dict[str, Any]) -> int:
        """The base's (`capabilities.HasFreeSteps`)."""
        return free_steps(cls.base_class(settings), settings.get("base_settings") or {})

    @property
    def grid(self) -> Grid:
        """The base's grid (learned or handed to the base, the one it steps on)."""
        return self.base.grid

    @property
    def nfe(self) -> int:
        return self.base.nfe

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        return self.base.evaluate(denoiser, x, i)

    def initial_state(self, x: Tensor) -> Tensor:
        """The base's start (an OSS base begins below σ_max; `capabilities.MovesItsStart`)."""
        return initial_state(self.base, x)


def along_bases(solver: Solver) -> Iterator[Solver]:
    """`solver`, then while it is built on one (`OnBase`), its base, the base's base, …"""
    yield solver
    while isinstance(solver, OnBase):
        solver = solver.base
        yield solver


def searched(solver: Solver) -> Searched | None:
    """The solver whose search a fit of `solver` runs (`Searched.prepare`): itself, or the base it
    is built on (a GITS under SpanLift or LD3); None when none searches."""
    return next((s for s in along_bases(solver) if isinstance(s, Searched)), None)


def searches(solver: Solver) -> bool:
    """Whether a fit sets part of the state without gradients: a search (`Searched`: GITS's grid)
    or model statistics it steps on (`NeedsStatistics`: DPM-Solver-v3), its own or of the base it
    is built on. Such a solver is fitted even without trainable parameters."""
    return any(
        isinstance(s, Searched) or (isinstance(s, NeedsStatistics) and s.steps_on_statistics)
        for s in along_bases(solver)
    )


def bases(solver: Solver) -> list[Solver]:
    """The solvers `solver` is built on: its direct sub-modules that are solvers (a plugin's base
    too)."""
    return [child for child in solver.children() if isinstance(child, Solver)]


def statistics_request(solver: Solver) -> dict[str, Any] | None:
    """The model statistics `solver` steps with, as the settings of their estimate, while it has
    none (`NeedsStatistics`); None: it needs none. A solver built on DPM-Solver-v3 asks for what
    its base needs."""
    if isinstance(solver, NeedsStatistics):
        return solver.statistics_request()
    return next(filter(None, (statistics_request(base) for base in bases(solver))), None)


def use_statistics(solver: Solver, statistics: Any) -> None:
    """Hand the model statistics a fit computed for `statistics_request` to the solver, or to the
    bases that asked."""
    if isinstance(solver, NeedsStatistics):
        solver.use_statistics(statistics)
        return
    for base in bases(solver):
        if statistics_request(base) is not None:
            use_statistics(base, statistics)
