"""The one loop every solver runs, in EDM σ-form (Karras et al. 2022).

The probability-flow ODE is dx/dσ = d(x, σ) with d(x, σ) = (x − D(x, σ)) / σ. A solver walks
a grid σ_0 = σ_max > … > σ_N = σ_min and at each step takes

    x_{i+1} = x_i + h_i Δ_i,      h_i = σ_{i+1} − σ_i,

where the direction Δ_i is what distinguishes solvers. Each step first evaluates the model once at
(x_i, σ_i) and pushes the result onto a history (newest first); Δ_i reads that history.
With the analytical first step (AFS) the first derivative is d_0 = x_0 / sqrt(1 + σ_0²) and
costs no evaluation. NFE is counted by `count_nfe`, never assumed.
"""

import inspect
from abc import abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from spanlift.solvers.capabilities import initial_state
from spanlift.solvers.grid import FixedGrid, Grid, as_grid

Denoiser = Callable[[Tensor, Tensor], Tensor]


class Point:
    """One model evaluation: state x_j at σ_j, its denoised D_j and derivative d_j = (x_j − D_j)/σ_j.

    d_j is computed when first read (or given, as AFS does): the solvers over logSNR read only
    D_j, and a rollout's loop should spend no tensor operation its solver does not need.
    """

    def __init__(
        self, sigma: Tensor, x: Tensor, denoised: Tensor, derivative: Tensor | None = None
    ) -> None:
        self.sigma, self.x, self.denoised = sigma, x, denoised
        self._derivative = derivative

    @property
    def derivative(self) -> Tensor:
        if self._derivative is None:
            self._derivative = (self.x - self.denoised) / self.sigma
        return self._derivative

    @classmethod
    def at(cls, denoiser: Denoiser, x: Tensor, sigma: Tensor) -> "Point":
        """The point of one model call at (x, σ)."""
        return cls(sigma, x, denoiser(x, sigma))


History = list[Point]  # newest first: history[0] is the current step


@dataclass
class Step:
    """One step of a rollout: x_{i+1} = x_i + h_i Δ_i, with the history Δ_i read."""

    i: int
    x: Tensor
    history: "History"
    direction: Tensor
    x_next: Tensor


SUPERVISIONS = ("endpoint", "trajectory")
"""What a learned solver is fitted against: the teacher's endpoint only (the paper's eq. 4), or the
teacher's states at each of the solver's own grid σ_1 … σ_N (AMED, EPD)."""


class Solver(nn.Module):
    """Base class: holds the σ grid and runs the rollout; subclasses define `direction`.

    `buffer_size` is how many points of history the direction reads (K). `supervision` is what a
    fit matches it against (see SUPERVISIONS). What only some solvers can do (a search, model
    statistics, free steps, parts, …) is a protocol of `capabilities.py` that they implement.

    `grid` is always a `Grid` module: the solver is built on σ (a tensor, kept as a `FixedGrid`)
    or handed a grid module (a `LearnedGrid`, a plugin's interleaved grid), and steps on it. Every
    σ is read through `sigmas`, the grid's current σ_0 … σ_N (differentiable when learned), or
    `sigma(i, like)`; the grid's length and ends never change.
    """

    name: ClassVar[str]
    """The name it is registered under (`SOLVERS.register`), which sets it: never restated."""
    citation: ClassVar[str] = ""
    """The paper that defines the solver, e.g. "Lu et al., 2022 (DPM-Solver++)"."""
    title: ClassVar[str] = ""
    """How its authors write its name, for a paper's table ("DPM-Solver++"); "": the name."""
    order_mark: ClassVar[str] = ""
    """Written after its order in a title, as its authors do: "M" for DPM-Solver++ (3M)."""
    reference: ClassVar[str] = ""
    """Its authors' code that spanlift is checked against: repository and file or function."""
    buffer_size: int = 1
    supervision: ClassVar[str] = "endpoint"

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False) -> None:
        super().__init__()
        self.grid = as_grid(sigmas)
        self.afs = afs
        self.ends_at_zero = bool(self.grid()[-1] == 0)
        """Whether the last step lands on σ = 0: fixed when built (every grid keeps its ends), and
        kept on the host, so a rollout branches on it without reading the device."""

    @classmethod
    def build(cls, sigmas: Tensor | Grid, channels: int, **settings: Any) -> "Solver":
        """Construct on a σ grid (or a grid module); `channels`, the data's channel count, reaches
        the constructors that take it (operators, and solvers that build a base)."""
        if "channels" in inspect.signature(cls).parameters:
            settings = {**settings, "channels": channels}
        return cls(sigmas, **settings)

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        """The settings the solver accepts and their defaults: its constructor's keywords."""
        params = list(inspect.signature(cls.__init__).parameters.values())
        return {p.name: p.default for p in params if p.name not in ("self", "sigmas", "channels")}

    @property
    def sigmas(self) -> Tensor:
        """σ_0 … σ_N the solver steps on: its grid's current values (read-only). Within a
        rollout, the values read when it began (the grid cannot change during one)."""
        read = self.__dict__.get("_rollout_grid")
        return self.grid() if read is None else read[None]

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        """Model evaluations spent by `steps` steps: one per step, minus one with AFS.
        `to_zero`: the grid's last step ends at σ = 0 (solvers whose last step is then cheaper
        say so)."""
        return steps - int(bool(settings.get("afs", False)))

    @property
    def num_steps(self) -> int:
        return len(self.sigmas) - 1

    @property
    def nfe(self) -> int:
        return self.nfe_for_steps(self.num_steps, {"afs": self.afs}, self.ends_at_zero)

    def sigma(self, i: int, like: Tensor) -> Tensor:
        """σ_i in `like`'s dtype (within a rollout, from the grid cast once per dtype)."""
        read = self.__dict__.get("_rollout_grid")
        if read is None:
            return self.sigmas[i].to(like.dtype)
        if like.dtype not in read:
            read[like.dtype] = read[None].to(like.dtype)
        return read[like.dtype][i]

    def step_size(self, i: int, like: Tensor) -> Tensor:
        return self.sigma(i + 1, like) - self.sigma(i, like)

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        """The history point of step i: one model call, or none for AFS at step 0."""
        sigma = self.sigma(i, x)
        if i == 0 and self.afs:
            d = x / (1 + sigma**2).sqrt()
            return Point(sigma, x, x - sigma * d, d)
        return Point(sigma, x, denoiser(x, sigma))

    @abstractmethod
    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        """Δ_i, so that x_{i+1} = x_i + h_i Δ_i."""

    def _load_from_state_dict(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
        """Reads checkpoints written when the grid was the buffer `sigmas`: it becomes the fixed
        grid's `grid.sigmas`; a learned or borrowed grid keeps its own state instead."""
        legacy = state.pop(prefix + "sigmas", None)
        owned = self._modules.get("grid")
        if legacy is not None and isinstance(owned, FixedGrid):
            state.setdefault(prefix + "grid.sigmas", legacy)
        super()._load_from_state_dict(state, prefix, *args)

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """The rollout from x at σ_max, one step at a time. The grid is read once, at the start
        (a solver's per-step arithmetic on σ is otherwise mostly reading it again)."""
        history: History = []
        self.__dict__["_rollout_grid"] = {None: self.grid()}
        x = initial_state(self, x)  # x, unless the solver moves its start (capabilities)
        try:
            for i in range(self.num_steps):
                history = [self.evaluate(denoiser, x, i), *history][: self.buffer_size]
                delta = self.direction(i, x, history, denoiser)
                x_next = torch.addcmul(x, self.step_size(i, x), delta)  # x + h_i Δ_i, fused
                yield Step(i, x, history, delta, x_next)
                x = x_next
        finally:
            self.__dict__.pop("_rollout_grid", None)

    def trajectory(self, denoiser: Denoiser, x: Tensor) -> list[Tensor]:
        """The states x_1, …, x_N at σ_1, …, σ_N (the last is the endpoint)."""
        return [step.x_next for step in self.steps(denoiser, x)]

    def forward(self, denoiser: Denoiser, x: Tensor, trajectory: bool = False) -> Tensor:
        """Integrate from x at σ_max to σ_min: the endpoint, or with `trajectory` the states at
        σ_1 … σ_N stacked on dim 1 (through `forward`, so DDP sees the call)."""
        if trajectory:
            return torch.stack(self.trajectory(denoiser, x), dim=1)
        for step in self.steps(denoiser, x):
            x = step.x_next
        return x


def derivative_sum(weights: Tensor, history: History) -> Tensor:
    """Σ_j w_j d_{i−j}: the weighted sum of the history's derivatives (newest first), weights
    cast to their dtype; weights past the history's length (the first steps) are not read."""
    dtype = history[0].derivative.dtype
    return sum(w * p.derivative for w, p in zip(weights.to(dtype), history, strict=False))


class NFECounter:
    """Wraps a denoiser and counts its calls: the NFE a rollout actually spent."""

    def __init__(self, denoiser: Denoiser) -> None:
        self.denoiser = denoiser
        self.calls = 0

    def __call__(self, x: Tensor, sigma: Tensor) -> Tensor:
        self.calls += 1
        return self.denoiser(x, sigma)
