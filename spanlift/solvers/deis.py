"""DEIS tAB (Zhang & Chen, ICLR 2023, "Fast Sampling of Diffusion Models with Exponential
Integrator"): Adams–Bashforth whose derivative polynomial lives in VP time t, integrated exactly.

In σ-form the ODE is dx/dσ = d(x, σ) (d is the ε-prediction), so over one step

    x_{i+1} = x_i + Σ_{j<p} C_{i,j} d_{i−j},     C_{i,j} = ∫_{σ_i}^{σ_{i+1}} ℓ_j(t(σ)) dσ,
    ℓ_j(t) = Π_{k<p, k≠j} (t − t_{i−k}) / (t_{i−j} − t_{i−k}),     p = min(i + 1, K),

with t_m = t(σ_m): d is interpolated through the last p points as a polynomial in t, and that
polynomial is integrated against dσ. The loop's direction is Δ_i = Σ_j w_{i,j} d_{i−j} with
w_{i,j} = C_{i,j} / h_i (each row sums to 1; p = 1 is Euler). `order` is K (1–4, tAB1–tAB4).

VP time, as in diff-sampler's DEIS in EDM form: σ(t)² = exp(½ β_d t² + β_min t) − 1 with β_d,
β_min fixed by σ(ε_s) = 0.002 at ε_s = 10⁻³ and σ(1) = 80 (EDM's range, whatever the grid), so

    t(σ) = (sqrt(β_min² + 2 β_d ln(1 + σ²)) − β_min) / β_d.

C is computed here by Gauss–Legendre quadrature in ln σ (dσ = σ d ln σ; 24 nodes, exact to
~10⁻¹³ against 400 nodes on EDM grids of 3–10 steps), from the grid at each step, so it follows a
learned (LD3) or searched (GITS) grid and is differentiable in it. diff-sampler sums 10 000 points
in t in float32, whose coefficients differ from these by up to 1.3·10⁻³ in w (1.3·10⁻⁵ with 400 000
points in float64; tests/test_deis.py). A last step to σ = 0 (`edm_to_zero`) is Euler (x_N = D).
One NFE per step (minus one with AFS).
"""

import math

import numpy as np
import torch
from torch import Tensor

from spanlift.solvers.base import Denoiser, History, Solver, derivative_sum
from spanlift.solvers.grid import Grid
from spanlift.solvers.ipndm import check_order
from spanlift.solvers.registry import SOLVERS

VP_EPSILON, VP_SIGMA_MIN, VP_SIGMA_MAX = 1e-3, 0.002, 80.0
_LOG_MIN, _LOG_MAX = math.log1p(VP_SIGMA_MIN**2), math.log1p(VP_SIGMA_MAX**2)
BETA_D = 2 * (_LOG_MIN / VP_EPSILON - _LOG_MAX) / (VP_EPSILON - 1)
BETA_MIN = _LOG_MAX - BETA_D / 2
"""σ(t)² = exp(½ β_d t² + β_min t) − 1 through σ(10⁻³) = 0.002 and σ(1) = 80."""

QUADRATURE_NODES = 24


def vp_time(sigma: Tensor) -> Tensor:
    """t(σ) = (sqrt(β_min² + 2 β_d ln(1 + σ²)) − β_min) / β_d."""
    return ((BETA_MIN**2 + 2 * BETA_D * torch.log1p(sigma**2)).sqrt() - BETA_MIN) / BETA_D


def lagrange_basis(t: Tensor, nodes: Tensor) -> Tensor:
    """ℓ_j(t) for every node j (rows) at every point of t (columns)."""
    rows = []
    for j in range(len(nodes)):
        row = torch.ones_like(t)
        for k in range(len(nodes)):
            if k != j:
                row = row * (t - nodes[k]) / (nodes[j] - nodes[k])
        rows.append(row)
    return torch.stack(rows)


def tab_weights(sigmas: Tensor, points: Tensor, point_weights: Tensor) -> Tensor:
    """w_j = (1/h) ∫_{σ_i}^{σ_{i+1}} ℓ_j(t(σ)) dσ for `sigmas` = (σ_{i+1}, σ_i, σ_{i−1}, …): the
    Lagrange nodes are t(σ_i), t(σ_{i−1}), …; `points`, `point_weights` are Gauss–Legendre's on
    [−1, 1], mapped onto [ln σ_i, ln σ_{i+1}]."""
    sigma_next, nodes = sigmas[0], sigmas[1:]
    low, high = nodes[0].log(), sigma_next.log()
    log_sigma = (low + high) / 2 + (high - low) / 2 * points
    measure = (high - low) / 2 * point_weights * log_sigma.exp()  # dσ = σ d ln σ
    integrals = lagrange_basis(vp_time(log_sigma.exp()), vp_time(nodes)) @ measure
    return integrals / (sigma_next - nodes[0])


@SOLVERS.register("deis")
class DEIS(Solver):
    """DEIS tAB: Adams–Bashforth over the last `order` derivatives, polynomial in VP time."""

    citation = "Zhang & Chen, ICLR 2023 (DEIS)"
    title = "DEIS"
    reference = (
        "zju-pi/diff-sampler gits-main/solver_utils.py get_deis_coeff_list, solvers.py deis_sampler"
    )

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False, order: int = 3) -> None:
        super().__init__(sigmas, afs)
        self.buffer_size = check_order(order, 4, self.name)
        points, point_weights = np.polynomial.legendre.leggauss(QUADRATURE_NODES)
        self.register_buffer("points", torch.from_numpy(points), persistent=False)
        self.register_buffer("point_weights", torch.from_numpy(point_weights), persistent=False)

    def order_at(self, i: int) -> int:
        """p = min(i + 1, K); 1 on a last step to σ = 0 (decided on the host)."""
        if self.ends_at_zero and i + 1 == self.num_steps:
            return 1
        return min(i + 1, self.buffer_size)

    def weights(self, i: int) -> Tensor:
        """w_{i,0} … w_{i,p−1} (float64, from the grid the rollout reads)."""
        p = self.order_at(i)
        if p == 1:
            return self.point_weights.new_ones(1)
        sigmas = self.sigmas[i + 1 - p : i + 2].flip(0)  # σ_{i+1}, σ_i, …, σ_{i−p+1}
        return tab_weights(sigmas, self.points, self.point_weights)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return derivative_sum(self.weights(i), history)
