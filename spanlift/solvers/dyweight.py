"""DyWeight: a learned lower-triangular weight table over the derivative buffer, plus time scaling.

    Δ_i = Σ_{j ≤ min(i, K−1)} W_{i,j} d_{i−j},     d_i = (x_i − D(x_i, σ_i e^{τ_i})) / σ_i

W starts at the iPNDM table (rows sum to 1) and is learned freely, so the row sum Σ_j W_{i,j}
rescales the step: the effective step is h_i Σ_j W_{i,j}. τ_i (init 0) rescales the noise level
the model is told at step i. One NFE per step, like the iPNDM it starts from.
"""

import torch
from torch import Tensor, nn

from spanlift.solvers.base import Denoiser, History, Point, Solver, derivative_sum
from spanlift.solvers.grid import Grid
from spanlift.solvers.ipndm import ADAMS_BASHFORTH, check_order, ipndm_weights
from spanlift.solvers.registry import SOLVERS


@SOLVERS.register("dyweight")
class DyWeight(Solver):
    """DyWeight: learned weights over the last `order` derivatives (init iPNDM) and time scaling."""

    citation = "Zhao et al., CVPR 2026 (DyWeight)"
    title = "DyWeight"

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False, order: int = 3) -> None:
        super().__init__(sigmas, afs)
        self.buffer_size = check_order(order, len(ADAMS_BASHFORTH), self.name)
        self.weights = nn.Parameter(ipndm_weights(self.num_steps, order).float())
        self.log_time_scale = nn.Parameter(torch.zeros(self.num_steps))
        mask = torch.ones(self.num_steps, order).tril()
        self.register_buffer("mask", mask)

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        """The model is told σ_i e^{s_i}, its time scaling (AFS's first point calls none)."""
        if i == 0 and self.afs:
            return super().evaluate(denoiser, x, i)
        sigma = self.sigma(i, x)
        return Point(sigma, x, denoiser(x, sigma * self.log_time_scale[i].to(x.dtype).exp()))

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return derivative_sum(self.weights[i] * self.mask[i], history)
