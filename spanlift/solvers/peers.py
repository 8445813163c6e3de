"""Solvers whose loop is another library's: diffusers' schedulers and k-diffusion's samplers.

A peer solver runs the loop its users already run (a diffusers scheduler's `set_timesteps`,
`scale_model_input`, `step`; a k-diffusion `sample_*` function) on the backbone's denoiser, so a
leaderboard row can stand next to the library that defines it. Each library has one adapter
(`diffusers_schedulers.py`, `kdiffusion_samplers.py`) with a table of the peers it registers, one
row each (`Peer`), each registered as `<library>:<peer name>`. This module holds what they share:

- the library is imported when such a solver is first built or its settings are read, never when
  `spanlift.solvers` is; a missing library is one error naming the extra that installs it;
- the settings are the peer's own arguments (a scheduler's config keys, a sampler's keywords) and
  their defaults, less those the adapter sets: the ones that choose the peer's own σ grid
  (spanlift hands every solver its schedule's grid), those the solver's name fixes (η = 0, τ = 0)
  and those that only act on the noise of stochastic sampling;
- a solver is built with a dry run of its loop on one zero sample, so a setting the library
  refuses fails when the solver is built, as one line;
- NFE is the row's `calls(steps, to_zero)` (tested against the counted evaluations);
- the loop runs inside `torch.random.fork_rng`: a peer that draws noise it then multiplies by
  zero (SA-Solver at τ = 0, k-diffusion's DPM-2 at s_churn = 0) leaves the caller's random stream
  as it found it;
- `steps` yields one `Step` per grid interval, from the states at σ_i the loop passes through (the
  teacher's states at σ_i, the diagnostics); `forward` runs the loop alone.

Peer solvers are analytic and not differentiable (`capabilities.NotDifferentiable`, and they
take substeps, `TakesSubsteps`): no solver is built around one (SpanLift, LD3 and the plugins
refuse it as their base), and their loops run without autograd.
"""

import importlib
import inspect
import re
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Point, Solver, Step
from spanlift.solvers.capabilities import NotDifferentiable, TakesSubsteps
from spanlift.solvers.grid import Grid
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.spec import check_settings

Observer = Callable[[Tensor, Tensor], None]
"""Called with (x_i, D(x_i, σ_i)) when the loop evaluates the model at grid point σ_i with the
state it holds there (not at a predictor's trial point)."""


def one_per_step(steps: int, to_zero: bool) -> int:
    """NFE of a peer that evaluates the model once per step."""
    return steps


@dataclass(frozen=True)
class Peer:
    """One row of an adapter's table: a scheduler class or sampler function, by its own name."""

    name: str
    summary: str
    """What it is, in a few words (the first line `spanlift solvers` prints)."""
    citation: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Arguments the solver's name fixes (η = 0, τ = 0, …); a user cannot set them."""
    allowed: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Settings restricted to some of the values the peer takes (its deterministic ones)."""
    calls: Callable[[int, bool], int] = one_per_step
    """NFE of N steps, given whether the grid ends at σ = 0."""
    ends: tuple[bool, ...] = (False, True)
    """The grid ends the peer can follow: above σ = 0 (False), at σ = 0 (True)."""
    own_grid: Callable[[int, float, float], Tensor] | None = None
    """The only grid the peer steps on, as (steps, σ_min, σ_max) → σ_0 … σ_N; None: any."""
    schedule: str = ""
    """The schedule that makes `own_grid`."""


class PeerSolver(Solver, TakesSubsteps, NotDifferentiable):
    """Another library's loop on the platform's grid (module docstring); one subclass per row."""

    peer: ClassVar[Peer]
    library: ClassVar[str]
    """The module the peers are attributes of, imported when first needed."""
    package: ClassVar[str]
    """The library's name as installed (`pip install …`)."""
    extra: ClassVar[str]
    """spanlift's optional dependency group that installs the library."""
    repository: ClassVar[str]
    """The library's repository; `reference` is it and the peer's name."""
    not_settings: ClassVar[Mapping[str, str]]
    """The library's arguments that are not settings, each with the reason."""
    common_allowed: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    """Like a row's `allowed`, for every peer of the library."""

    def __init__(self, sigmas: Tensor | Grid, **settings: Any) -> None:
        super().__init__(sigmas)
        check_settings(self.name, settings)
        self.settings = {**self.default_settings(), **settings}
        for key, values in {**self.common_allowed, **self.peer.allowed}.items():
            if key in self.settings and self.settings[key] not in values:
                raise SettingsError(
                    f"solver {self.name!r}: {key} must be one of {', '.join(map(repr, values))} "
                    f"here, got {self.settings[key]!r}"
                )
        if not self.on_own_grid():
            raise SettingsError(
                f"solver {self.name!r} steps on its own grid, which schedule "
                f"{self.peer.schedule!r} makes: use that schedule"
            )
        if self.ends_at_zero not in self.peer.ends:
            raise SettingsError(f"solver {self.name!r} {ENDS[self.peer.ends]}")
        self.dry_run()

    @classmethod
    def module(cls) -> ModuleType:
        """The library, imported now; one line naming the extra when it is not installed."""
        try:
            return importlib.import_module(cls.library)
        except ImportError:
            raise SettingsError(
                f"solver {cls.name!r} needs {cls.package}: install spanlift's {cls.extra!r} "
                f"extra (pip install 'spanlift[{cls.extra}]')"
            ) from None

    @classmethod
    def target(cls) -> Callable[..., Any]:
        """The scheduler class or sampler function this solver runs."""
        return getattr(cls.module(), cls.peer.name)

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        """The peer's own arguments with defaults, less `not_settings` and the fixed ones."""
        return {
            name: param.default
            for name, param in signature_of(cls.target()).items()
            if param.default is not param.empty
            and name not in cls.not_settings
            and name not in cls.peer.fixed
        }

    @classmethod
    def setting_hint(cls, key: str) -> str:
        if key in cls.peer.fixed:
            return f"fixed to {cls.peer.fixed[key]!r} by the solver's name"
        return cls.not_settings.get(key, "")

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        return cls.peer.calls(steps, to_zero)

    def on_own_grid(self) -> bool:
        """Whether the grid is the one a peer with its own grid steps on (any grid otherwise)."""
        grid, own = self.host_grid(), self.peer.own_grid
        if own is None:
            return True
        if grid[-1] == 0:
            return False
        expected = own(self.num_steps, float(grid[-1]), float(grid[0]))
        return bool((expected - grid).abs().max() <= 1e-9 * grid[0])

    def host_grid(self) -> Tensor:
        """σ_0 … σ_N on the host in float64, as the peer reads them (its loops read values)."""
        return self.grid().detach().to("cpu", torch.float64)

    @abstractmethod
    def run(self, denoiser: Denoiser, x: Tensor, observe: Observer | None) -> Tensor:
        """The peer's loop from x at σ_0: the endpoint at σ_N (in x's dtype)."""

    def rollout(self, denoiser: Denoiser, x: Tensor, observe: Observer | None = None) -> Tensor:
        """`run` without autograd, leaving the caller's random stream as it was."""
        devices = [x.device] if x.device.type != "cpu" else []
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices, device_type=x.device.type),
            self.quiet(),
        ):
            return self.run(denoiser, x, observe).to(x.dtype)

    def quiet(self) -> AbstractContextManager[Any]:
        """Keeps the library's notices that would repeat on every rollout out of the log."""
        return nullcontext()

    def dry_run(self) -> None:
        """The loop once on a zero sample with a zero denoiser (whose every step is 0): what
        the library refuses in these settings on this grid, and a loop that cannot finish it
        (diffusers' UniPC-bh1 multiplies −∞ by 0 on a step to σ = 0), refused now."""
        try:
            endpoint = self.rollout(lambda x, sigma: torch.zeros_like(x), torch.zeros(1, 1, 2, 2))
        except (ValueError, NotImplementedError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SettingsError(f"{self.on_this_grid()}: {self.package} says: {reason}") from None
        if not bool(torch.isfinite(endpoint).all()):
            raise SettingsError(f"{self.on_this_grid()}: its loop ends in NaN or ±∞ there")

    def on_this_grid(self) -> str:
        return (
            f"solver {self.name!r} with {self.settings} on a grid of {self.num_steps} steps "
            f"to σ = {float(self.host_grid()[-1]):g}"
        )

    def forward(self, denoiser: Denoiser, x: Tensor, trajectory: bool = False) -> Tensor:
        if trajectory:
            return super().forward(denoiser, x, trajectory=True)
        return self.rollout(denoiser, x)

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """One step per grid interval, from the states at σ_i the loop held (collected while it
        runs, so the whole path is in memory: N states of the batch)."""
        points: list[tuple[Tensor, Tensor]] = []
        endpoint = self.rollout(
            denoiser, x, lambda state, denoised: points.append((state, denoised))
        )
        landings = [state for state, _ in points[1:]] + [endpoint]
        for i, ((state, denoised), x_next) in enumerate(zip(points, landings, strict=True)):
            history: History = [Point(self.sigma(i, state), state, denoised)]
            direction = (x_next - state) / self.step_size(i, state)
            yield Step(i, state, history, direction, x_next)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        raise NotImplementedError(
            f"{self.name} runs {self.peer.name}'s own loop; a Step's direction is (x_(i+1) − x_i) / h_i"
        )


ENDS = {
    (True,): "ends every rollout at σ = 0: use a schedule whose grid ends there (edm_to_zero)",
    (False,): "cannot step to σ = 0: use a schedule that ends above it (edm, logsnr, time, flow)",
}


def signature_of(target: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """The parameters of a function, or of a class's constructor."""
    return inspect.signature(target).parameters


def register(adapter: type[PeerSolver], prefix: str, rows: Iterable[Peer]) -> dict[str, type]:
    """One registered subclass of `adapter` per row, named `<prefix>:<row name>`; returned by
    their class names, for the adapter's module to hold (so pickle finds them by name)."""
    classes = {}
    for row in rows:
        name = f"{prefix}:{row.name}"
        class_name = "".join(part[:1].upper() + part[1:] for part in re.split("[:_]", name))
        cls = type(
            class_name,
            (adapter,),
            {
                "__doc__": f"{row.summary} ({adapter.package} {row.name}).",
                "__module__": adapter.__module__,
                "__qualname__": class_name,
                "peer": row,
                "citation": row.citation,
                "reference": f"{adapter.repository} {row.name}",
            },
        )
        classes[class_name] = SOLVERS.register(name)(cls)
    return classes
