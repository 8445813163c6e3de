"""What some solvers can do beyond stepping, one small protocol (or marker) per capability.

`Solver` (base.py) holds what every solver has: its grid, its NFE accounting, its evaluation and
its rollout. A capability that only some solvers have is declared here and implemented by those
solvers alone; generic code asks `isinstance(solver, Searched)` (or `issubclass` on a registered
class, before a solver is built) instead of reading a flag every solver carries:

    Searched           `prepare`: a fit's search sets part of its state (GITS's, OSS's grid)
    NeedsStatistics    `statistics_request`: model statistics a fit estimates (DPM-Solver-v3)
    MovesItsStart      `initial_state`: the rollout begins below σ_max (OSS)
    HasFreeSteps       `free_steps`: steps that spend no model evaluation (FlowTurbo's refiner)
    HasParts           `parts`: a base's step plus a learned part (SpanLift)
    Alternating        `inactive_parameters`: parameter groups fitted in turn (S4S-Alt)
    HasInputSlack      `input_slack`: a fit moves the training noise within a ball (LD3)
    ExplainsSettings   `setting_hint`: why a setting is not one of its own (STORK, peers)
    TakesSubsteps      (marker) its steps are not x + h·Δ from `direction` (AMED-Plugin, …)
    NotDifferentiable  (marker) no gradient passes through its rollout (another library's loop)

A solver over a base (`on_base.OnBase`) passes on its base's start and free steps; whether it
searches or needs statistics is asked through its bases (`on_base.searches`, `on_base.searched`,
`on_base.statistics_request`).
"""

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn

# base.py's `Denoiser` and `History`, spelled out: base.py reads `initial_state` from here
Model = Callable[[Tensor, Tensor], Tensor]


@runtime_checkable
class Searched(Protocol):
    """A fit runs its search once before the first update (`prepare`), with the training noise in
    batches: (the model for that batch, its states x = σ_max · noise at σ_max). The search chooses
    part of the state, kept as buffers so it checkpoints like parameters (GITS's, OSS's grid);
    such a solver is fitted even without trainable parameters."""

    def prepare(self, batches: Iterable[tuple[Model, Tensor]]) -> None: ...


@runtime_checkable
class NeedsStatistics(Protocol):
    """It steps with model statistics (DPM-Solver-v3's EMS) that a fit computes from the
    backbone's own samples (cached per backbone) and hands over before its first update.

    `statistics_request()`: the settings of their estimate (timesteps, samples, seed) while it has
    none, None once it has them or where it needs none; `use_statistics` keeps them;
    `steps_on_statistics`: False where it steps without any (DPM-Solver-v3 `degenerated`)."""

    @property
    def steps_on_statistics(self) -> bool: ...

    def statistics_request(self) -> dict[str, Any] | None: ...

    def use_statistics(self, statistics: Any) -> None: ...


@runtime_checkable
class MovesItsStart(Protocol):
    """Its rollout begins from `initial_state(x)`, for x at the σ_0 the solver was built on, not
    from x itself: a searched OSS begins lower on its grid, from x rescaled (oss.py)."""

    def initial_state(self, x: Tensor) -> Tensor: ...


def initial_state(solver: object, x: Tensor) -> Tensor:
    """The state `solver`'s rollout begins from: x, unless it moves its start."""
    return solver.initial_state(x) if isinstance(solver, MovesItsStart) else x


@runtime_checkable
class HasFreeSteps(Protocol):
    """Steps that spend no model evaluation whatever the NFE (FlowTurbo's refiner steps): the
    search for the step count of an NFE looks that many steps further (`spec.steps_for_nfe`)."""

    @classmethod
    def free_steps(cls, settings: dict[str, Any]) -> int: ...


def free_steps(cls: type, settings: dict[str, Any]) -> int:
    """The free steps of solver class `cls` with `settings`: none unless it has some."""
    return cls.free_steps(settings) if issubclass(cls, HasFreeSteps) else 0


@runtime_checkable
class HasParts(Protocol):
    """Its direction is α_i Δ_i^base + β_i Δ_i^op, a base's step plus a learned correction
    (SpanLift): `parts(i, x, history, denoiser)` gives (Δ_i^base, Δ_i^op) and `part_weights(i)`
    (α_i, β_i), which the span diagnostics read."""

    def parts(
        self, i: int, x: Tensor, history: list[Any], denoiser: Model
    ) -> tuple[Tensor, Tensor]: ...

    def part_weights(self, i: int) -> tuple[Tensor, Tensor]: ...


@runtime_checkable
class Alternating(Protocol):
    """A fit leaves `inactive_parameters(iteration)` unchanged at that iteration (S4S-Alt's
    alternating phases)."""

    def inactive_parameters(self, iteration: int) -> list[nn.Parameter]: ...


@runtime_checkable
class HasInputSlack(Protocol):
    """`input_slack` > 0 lets a fit move each training noise within a ball of that relative
    radius (LD3's soft teacher loss)."""

    input_slack: float


@runtime_checkable
class ExplainsSettings(Protocol):
    """`setting_hint(key)`: why `key` is not one of its settings, when there is more to say than
    that (a variant STORK refuses, an argument a peer fixes); "" where there is not."""

    @classmethod
    def setting_hint(cls, key: str) -> str: ...


class TakesSubsteps:
    """Marker: its steps are not x_{i+1} = x_i + h_i Δ_i with Δ_i from `direction` (AMED-Plugin's
    interleaved grid, FlowTurbo's flow coordinates, another library's loop), so no solver built
    around it (SpanLift, PAS) can add to or correct its Δ_i."""


class NotDifferentiable:
    """Marker: no gradient reaches its grid or parameters through a rollout (another library's
    loop, `peers.PeerSolver`), so no solver built around it (SpanLift, LD3, a plugin) can be
    fitted on it."""
