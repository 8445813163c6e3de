"""UniPC with the B(h) = e^h − 1 variant (bh2) in data prediction (Zhao et al. 2023, Alg. 2–3).

Predictor UniP-p from step i, with λ = −ln σ, h = λ_{i+1} − λ_i, hh = −h, B(h) = e^{hh} − 1:

    r_k = (λ_{i−k} − λ_i)/h,   D1_k = (D_{i−k} − D_i)/r_k          (k = 1 … p−1), r_p = 1
    R[n, k] = r_k^n,   b_n = n! φ_{n+1}(hh) hh / B(h)                (n = 0 … p−1)
    x_{i+1} = (σ_{i+1}/σ_i) x_i − (e^{hh} − 1) D_i − B(h) Σ_k ρᴾ_k D1_k,   ρᴾ = R⁻¹b (first p−1),
    with ρᴾ = [½] for p = 2.

Corrector UniC, applied once D_{i+1} is known (at the next step, so it costs no evaluation):

    x_{i+1} ← x_{i+1} − B(h) (Σ_k (ρᶜ_k − ρᴾ_k) D1_k + ρᶜ_p (D_{i+1} − D_i)),  ρᶜ = R⁻¹b,  [½] for p = 1.

The model output kept for step i+1 is the one at the predicted state, as in the reference
implementation, and the last step is not corrected. One NFE per step.
"""

import math

import torch
from torch import Tensor, nn

from spanlift.solvers.base import Denoiser, History, Solver
from spanlift.solvers.grid import Grid
from spanlift.solvers.ipndm import check_order
from spanlift.solvers.logsnr import data_direction, half_logsnr, order_at, weighted_sum
from spanlift.solvers.registry import SOLVERS


def unipc_coefficients(rks: Tensor, hh: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(ρᴾ, ρᶜ, B(h)) of UniPC-bh2 for ratios r_1 … r_{p−1}, 1 (len p) and hh = −h."""
    p = len(rks)
    b_h = torch.expm1(hh)
    h_phi_k = torch.expm1(hh) / hh - 1  # φ_2(hh)·hh after the first division
    rows, rhs = [], []
    for n in range(1, p + 1):
        rows.append(rks ** (n - 1))
        rhs.append(h_phi_k * math.factorial(n) / b_h)
        h_phi_k = h_phi_k / hh - 1 / math.factorial(n + 1)
    big_r, b = torch.stack(rows), torch.stack(rhs)
    if p == 1:
        rho_p, rho_c = rks.new_zeros(0), rks.new_tensor([0.5])
    else:
        rho_p = rks.new_tensor([0.5]) if p == 2 else torch.linalg.solve(big_r[:-1, :-1], b[:-1])
        rho_c = torch.linalg.solve(big_r, b)
    return rho_p, rho_c, b_h


@SOLVERS.register("unipc")
class UniPC(Solver):
    """UniPC-bh2 predictor–corrector (orders 1–3) in data prediction, one NFE per step."""

    citation = "Zhao et al., NeurIPS 2023 (UniPC)"
    title = "UniPC"
    reference = "wl-zhao/UniPC uni_pc.py"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        afs: bool = False,
        order: int = 3,
        lower_order_final: bool = True,
    ) -> None:
        super().__init__(sigmas, afs)
        self.order = check_order(order, 3, self.name)
        self.lower_order_final = lower_order_final
        self.buffer_size = order + 1  # the corrector also reads the newest point

    def _coefficients(self, i: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(ρᴾ, ρᶜ, B(h), r_1 … r_{p−1}) of the step i → i+1 (float64, from the grid)."""
        order = order_at(i, self.num_steps, self.ends_at_zero, self.order, self.lower_order_final)
        lam = half_logsnr(self.sigmas[i + 1 - order : i + 2].flip(0))  # λ_{i+1}, λ_i, …, λ_{i−p+1}
        h = lam[0] - lam[1]
        rks = torch.cat([(lam[2:] - lam[1]) / h, lam.new_ones(1)])
        rho_p, rho_c, b_h = unipc_coefficients(rks, -h)
        return rho_p, rho_c, b_h, rks[:-1]

    def denoised_weights(self, i: int) -> tuple[Tensor, Tensor]:
        """(w, B(h)) with x_{i+1} = (σ_{i+1}/σ_i) x_i − B(h) Σ_j w_j D_{i−j}, x_i as corrected.

        The predictor's D_i + Σ_k ρᴾ_k D1_k puts ρᴾ_k/r_k on D_{i−k} and their negated sum on
        D_i. The corrector's x_i ← x_i − B'(h) C enters scaled by s = (σ_{i+1}/σ_i) B'(h)/B(h):
        C = Σ_k (ρᶜ_k − ρᴾ_k) D1'_k + ρᶜ_p (D_i − D_{i−1}), D1'_k = (D_{i−1−k} − D_{i−1})/r'_k.
        """
        rho_p, _, b_h, rks = self._coefficients(i)
        c = rho_p / rks
        weights = [torch.cat([(1 - c.sum()).reshape(1), c])]
        if i > 0:
            rho_p_last, rho_c, b_h_last, rks_last = self._coefficients(i - 1)
            scale = self.sigmas[i + 1] / self.sigmas[i] * b_h_last / b_h
            gap = rho_c[:-1] - nn.functional.pad(rho_p_last, (0, len(rho_c) - 1 - len(rho_p_last)))
            c = scale * gap / rks_last
            end = scale * rho_c[-1:]
            weights.append(torch.cat([end, -end - c.sum().reshape(1), c]))
        size = max(len(w) for w in weights)
        return sum(nn.functional.pad(w, (0, size - len(w))) for w in weights), b_h

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        weights, b_h = self.denoised_weights(i)
        denoised = [p.denoised for p in history[: len(weights)]]
        combined = weighted_sum(weights.to(x.dtype), denoised)
        return data_direction(x, combined, self.sigma(i, x), b_h.to(x.dtype), self.step_size(i, x))
