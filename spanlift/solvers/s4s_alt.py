"""S4S-Alt (Frankel et al., ICML 2025, "S4S: Solving for a Diffusion Model Solver").

Learned linear multistep coefficients over the derivative buffer, on a learned grid:

    x_{i+1} = x_i + h_i Δ_i,     Δ_i = Σ_{j ≤ min(i, K−1)} c_{i,j} d_{i−j},     h_i = σ_{i+1} − σ_i,

with the table c (N × K, lower-triangular: c_{i,j} with j > i is never read) initialised to the
iPNDM Adams–Bashforth table of order K, and σ_i the LD3 grid (`grid.LearnedGrid`, ends fixed)

    σ_i = (s_0 − (s_0 − s_N) Σ_{k<i} π_k)^ρ,     π = π_min + (1 − N π_min) softmax(ℓ),

initialised to the schedule's grid, as the solver's `grid` (or the learned grid it is handed: LD3
over S4S-Alt learns one grid). An untrained S4S-Alt is iPNDM of order K on that schedule.
Unlike DyWeight there is no separate time scaling: the model is told σ_i. One NFE per step (minus
one with AFS).

The two groups are fitted in alternation, switching every `alternate_every` iterations:

    phase(t) = ⌊t / alternate_every⌋ mod 2:   0 → fit c (ℓ frozen),   1 → fit ℓ (c frozen),

so the coefficients come first. `LearnedMultistep` alone (the coefficients on a fixed grid) is
the coefficient half, shared with DLMS.
"""

from torch import Tensor, nn

from spanlift.solvers.base import Denoiser, History, Solver, derivative_sum
from spanlift.solvers.grid import Grid, learned_grid
from spanlift.solvers.ipndm import ADAMS_BASHFORTH, check_order, ipndm_weights
from spanlift.solvers.operators import check_positive
from spanlift.solvers.registry import SOLVERS


class LearnedMultistep(Solver):
    """Learned multistep coefficients: Δ_i = Σ_{j ≤ min(i, K−1)} c_{i,j} d_{i−j}, c init iPNDM(K).

    c is kept in float64 so that the untrained solver equals iPNDM exactly in float64 too. Not
    registered itself: its `name` is that of the registered subclass (DLMS, S4S-Alt).
    """

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False, order: int = 3) -> None:
        super().__init__(sigmas, afs)
        self.buffer_size = check_order(order, len(ADAMS_BASHFORTH), self.name)
        self.coefficients = nn.Parameter(ipndm_weights(self.num_steps, order))

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return derivative_sum(self.coefficients[i], history)


@SOLVERS.register("s4s_alt")
class S4SAlt(LearnedMultistep):
    """S4S-Alt: Δ_i = Σ_j c_{i,j} d_{i−j} (init iPNDM) on a learned LD3 grid, fitted alternately."""

    citation = "Frankel et al., ICML 2025 (S4S)"
    title = "S4S-Alt"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        afs: bool = False,
        order: int = 3,
        alternate_every: int = 50,
    ) -> None:
        super().__init__(learned_grid(sigmas, self.name), afs, order)
        self.alternate_every = check_positive(f"{self.name} alternate_every", alternate_every)

    def fits_grid(self, iteration: int) -> bool:
        """Whether `iteration` is in a grid phase (phase 1); phase 0 fits the coefficients."""
        return (iteration // self.alternate_every) % 2 == 1

    def inactive_parameters(self, iteration: int) -> list[nn.Parameter]:
        if self.fits_grid(iteration):
            return [self.coefficients]
        return list(self.grid.parameters())
