"""The σ grid a solver steps on: a module whose call returns σ_0 > σ_1 > … > σ_N ≥ 0 (float64).

Every solver holds one as `Solver.grid` and reads every σ through it (`Solver.sigmas`). A grid is
either fixed (`FixedGrid`, the schedule's σ as a buffer) or learned (`LearnedGrid`, LD3's
parameterisation, differentiable in its logits). A solver built on a grid module it is handed
steps on that grid: LD3 hands its base a learned grid, a plugin hands its base an interleaved one.

LearnedGrid: the N + 1 noise levels with the endpoints fixed, in the ρ-warped coordinate
s = σ^{1/ρ} (ρ = 7, where the EDM grid is uniform):

    π = π_min + (1 − N π_min) softmax(ℓ),     s_i = s_0 − (s_0 − s_N) Σ_{k<i} π_k,     σ_i = s_i^ρ,
    σ_0 = σ_max,  σ_N = σ_min     (fixed; σ_N = 0 is allowed, as in `edm_to_zero`).

π is a point of the simplex with every π_k ≥ π_min = 10⁻³ min_k π_k^init > 0, so for any logits ℓ
the grid decreases strictly, by steps no float rounding merges (softmax alone underflows once the
logits spread by ~36; the floor keeps DPM-Solver's step ratios finite). At init
ℓ_k = ln((π_k^init − π_min) / (1 − N π_min)) with π_k^init = (s_k − s_{k+1}) / (s_0 − s_N): the
learned grid is the schedule's grid to float64 rounding.
"""

from abc import abstractmethod

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError

RHO = 7.0
FLOOR = 1e-3  # π_min as a share of the smallest initial step


class Grid(nn.Module):
    """σ_0 … σ_N, float64, as the call's result (differentiable where the grid is learned)."""

    @abstractmethod
    def forward(self) -> Tensor: ...

    def assign(self, sigmas: Tensor) -> None:
        """Make the grid `sigmas` (same length and ends): a searched grid (GITS) written into the
        grid a solver steps on. A grid computed from another module's state cannot be set."""
        raise SettingsError(f"{type(self).__name__} is computed from its owner; it cannot be set")


class FixedGrid(Grid):
    """The schedule's grid, kept as the buffer `sigmas`."""

    def __init__(self, sigmas: Tensor) -> None:
        super().__init__()
        self.register_buffer("sigmas", torch.as_tensor(sigmas, dtype=torch.float64))

    def forward(self) -> Tensor:
        return self.sigmas

    @torch.no_grad()
    def assign(self, sigmas: Tensor) -> None:
        self.sigmas.copy_(same_ends(self.sigmas, sigmas))


def same_ends(grid: Tensor, sigmas: Tensor) -> Tensor:
    """`sigmas` (float64, on the grid's device) if it is as long as `grid` and has its ends."""
    new = torch.as_tensor(sigmas, dtype=grid.dtype, device=grid.device)
    if new.shape != grid.shape or not torch.equal(new[[0, -1]], grid[[0, -1]]):
        raise SettingsError(
            f"a grid can only be set to σ of its length with its ends, got {new.tolist()} for "
            f"{grid.tolist()}"
        )
    return new


def as_grid(sigmas: Tensor | Grid) -> Grid:
    """A grid module handed over as it is; a tensor of σ as a `FixedGrid`."""
    return sigmas if isinstance(sigmas, Grid) else FixedGrid(sigmas)


def check_grid(sigmas: Tensor, solver: str) -> Tensor:
    """`sigmas` as float64 if σ_0 > σ_1 > … > σ_N ≥ 0 (all finite), else a SettingsError."""
    grid = torch.as_tensor(sigmas, dtype=torch.float64)
    decreasing = grid.ndim == 1 and len(grid) >= 2 and bool((grid[1:] < grid[:-1]).all())
    if not decreasing or not bool(grid.isfinite().all()) or grid[-1] < 0:
        raise SettingsError(
            f"{solver} schedule must decrease strictly from σ_max to σ_min ≥ 0, got {grid.tolist()}"
        )
    return grid


class LearnedGrid(Grid):
    """σ_0 > … > σ_N with fixed ends: s_i = s_0 − (s_0 − s_N) Σ_{k<i} π_k(ℓ), σ_i = s_i^ρ.

    π = π_min + (1 − N π_min) softmax(ℓ), π_min = FLOOR · min π^init (module docstring).
    """

    def __init__(self, sigmas: Tensor, solver: str = "ld3") -> None:
        super().__init__()
        grid = check_grid(sigmas, solver)
        self.register_buffer("ends", grid[[0, -1]])
        self.register_buffer("floor", FLOOR * warped_fractions(grid).min())
        self.logits = nn.Parameter(self.logits_for(grid))

    def logits_for(self, grid: Tensor) -> Tensor:
        """ℓ_k = ln((π_k − π_min) / (1 − N π_min)): the logits whose grid is `grid`."""
        fractions = warped_fractions(grid)
        return ((fractions - self.floor) / (1 - len(fractions) * self.floor)).log()

    @torch.no_grad()
    def assign(self, sigmas: Tensor) -> None:
        """The logits of `sigmas` (ends unchanged); a step below the floor π_min is refused."""
        grid = same_ends(self(), check_grid(sigmas, "a learned grid"))
        logits = self.logits_for(grid)
        if not bool(logits.isfinite().all()):
            raise SettingsError(f"σ = {grid.tolist()} has a step below this learned grid's floor")
        self.logits.copy_(logits)

    def fractions(self) -> Tensor:
        """π: the share of s_0 − s_N each step covers (positive, summing to one)."""
        return self.floor + (1 - len(self.logits) * self.floor) * self.logits.softmax(0)

    def forward(self) -> Tensor:
        """The grid σ_0 … σ_N (float64), differentiable in the logits."""
        start, end = self.ends ** (1 / RHO)
        passed = self.fractions().cumsum(0)[:-1]
        interior = (start - (start - end) * passed) ** RHO
        return torch.cat([self.ends[:1], interior, self.ends[1:]])


def warped_fractions(grid: Tensor) -> Tensor:
    """π_k = (s_k − s_{k+1}) / (s_0 − s_N), s = σ^{1/ρ}: the share of the warped range per step."""
    warped = grid ** (1 / RHO)
    return (warped[:-1] - warped[1:]) / (warped[0] - warped[-1])


def learned_grid(sigmas: Tensor | Grid, solver: str) -> LearnedGrid:
    """The grid a grid-learning solver learns: the learned grid it is handed (LD3 over S4S-Alt
    learns one grid, not two), or a new one started at the σ it is built on. Another solver's
    grid module (a plugin's) is refused: the two would step on different grids."""
    if isinstance(sigmas, LearnedGrid):
        return sigmas
    if isinstance(sigmas, Grid):
        raise SettingsError(f"{solver} learns its own grid; it cannot step on another solver's")
    return LearnedGrid(sigmas, solver)
