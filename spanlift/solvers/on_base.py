"""Solvers built around a registered base solver (SpanLift, LD3): they keep the base's accounting.

Such a solver takes the settings `base` and `base_settings` (checked like any solver's settings,
`spec.check_settings`), holds the base as `self.base`, spends the base's NFE, evaluates the model
as the base does (AFS included) and steps on the base's grid: its `grid` is the base's, so a grid
handed to it, or learned, is the one both read.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, Point, Solver
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
    if not SOLVERS.get(base).differentiable:
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
    """Delegates grid, NFE and evaluation to `self.base`, the registered solver `base` built on
    `sigmas` with `base_settings` (`build_base`; the subclass's constructor default names it when
    unset)."""

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
        return cls.base_class(settings).free_steps(settings.get("base_settings") or {})

    @property
    def grid(self) -> Grid:
        """The base's grid (learned or handed to the base, the one it steps on)."""
        return self.base.grid

    @property
    def nfe(self) -> int:
        return self.base.nfe

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        return self.base.evaluate(denoiser, x, i)

    @property
    def searches(self) -> bool:
        return self.base.searches

    def initial_state(self, x: Tensor) -> Tensor:
        """The base's start (an OSS base begins below σ_max)."""
        return self.base.initial_state(x)

    def prepare(self, batches: Iterable[tuple[Denoiser, Tensor]]) -> None:
        """The base's preparation (a GITS base searches its grid)."""
        self.base.prepare(batches)
