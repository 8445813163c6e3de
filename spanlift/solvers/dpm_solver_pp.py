"""DPM-Solver++ multistep (Lu et al. 2022, Algorithm 2 and its third-order extension), in σ-form.

With λ = −ln σ, h = λ_{i+1} − λ_i, r_k = h_{i−k} / h and D_i the denoised estimate at step i:

    order 1:  x_{i+1} = (σ_{i+1}/σ_i) x_i − φ₁ D_i,                  φ₁ = e^{−h} − 1
    order 2:  … − φ₁ D_i − ½ φ₁ (D_i − D_{i−1}) / r_0
    order 3:  … − φ₁ D_i + φ₂ D1 − φ₃ D2,   φ₂ = φ₁/h + 1,  φ₃ = φ₂/h − ½,
              D1_0 = (D_i − D_{i−1})/r_0,  D1_1 = (D_{i−1} − D_{i−2})/r_1,
              D1 = D1_0 + r_0/(r_0 + r_1) (D1_0 − D1_1),  D2 = (D1_0 − D1_1)/(r_0 + r_1).

`order` 2 is DPM-Solver++(2M), 3 is (3M). One NFE per step.

The third-order update is the one of the reference implementation (and k-diffusion), which the
published 3M numbers use. Note that there D2 = h² D''/2 while φ₃ weights h² D'', so the
second-derivative term carries half its exact weight: with exact history its local error is
O(h³), like 2M (tests/test_convergence.py measures this), not O(h⁴).
"""

import torch
from torch import Tensor

from spanlift.solvers.base import Denoiser, History, Solver
from spanlift.solvers.grid import Grid
from spanlift.solvers.ipndm import check_order
from spanlift.solvers.logsnr import data_direction, half_logsnr, order_at, weighted_sum
from spanlift.solvers.registry import SOLVERS


@SOLVERS.register("dpm_solver_pp")
class DPMSolverPP(Solver):
    """DPM-Solver++ multistep (2M/3M) in data prediction over logSNR, one NFE per step."""

    citation = "Lu et al., 2022 (DPM-Solver++)"
    title = "DPM-Solver++"
    order_mark = "M"  # multistep: DPM-Solver++ (2M), (3M)
    reference = "LuChengTHU/dpm-solver dpm_solver_pytorch.py"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        afs: bool = False,
        order: int = 3,
        lower_order_final: bool = True,
    ) -> None:
        super().__init__(sigmas, afs)
        self.buffer_size = check_order(order, 3, self.name)
        self.lower_order_final = lower_order_final

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        order = order_at(
            i, self.num_steps, self.ends_at_zero, self.buffer_size, self.lower_order_final
        )
        lam = [half_logsnr(self.sigma(i + 1 - k, x)) for k in range(order + 1)]  # λ_{i+1}, λ_i, …
        h = lam[0] - lam[1]
        phi_1 = torch.expm1(-h)
        weights = denoised_weights(order, lam, phi_1)
        combined = weighted_sum(weights, [p.denoised for p in history[:order]])
        return data_direction(x, combined, self.sigma(i, x), phi_1, self.step_size(i, x))


def denoised_weights(order: int, lam: list[Tensor], phi_1: Tensor) -> list[Tensor]:
    """w_0 … w_{p−1} with D̃ = Σ_j w_j D_{i−j}, the update being x_{i+1} = (σ_{i+1}/σ_i) x_i − φ₁ D̃.

    Order 1: D̃ = D_i. Order 2: D̃ = D_i + ½ D1_0. Order 3: D̃ = D_i − (φ₂ D1 − φ₃ D2)/φ₁
    (module docstring), i.e. the basis (D_i, D1, D2) weighted by (1, −φ₂/φ₁, φ₃/φ₁).
    """
    one = torch.ones_like(phi_1)
    if order == 1:
        return [one]
    if order == 2:
        return basis_weights(lam, [one, 0.5 * one])
    h = lam[0] - lam[1]
    phi_2 = phi_1 / h + 1
    phi_3 = phi_2 / h - 0.5
    return basis_weights(lam, [one, -phi_2 / phi_1, phi_3 / phi_1])


def basis_weights(lam: list[Tensor], coefficients: list[Tensor]) -> list[Tensor]:
    """The weights on D_i, D_{i−1}, … of w D_i + a D1 (+ b D2), for `coefficients` [w, a(, b)].

    Two coefficients: D1 = D1_0 = (D_i − D_{i−1})/r_0, so the weights are [w + a/r_0, −a/r_0].
    Three: D1 = D1_0 + r_0/(r_0 + r_1) (D1_0 − D1_1) and D2 = (D1_0 − D1_1)/(r_0 + r_1) weight
    D1_0 by c_0 = a (1 + r_0/(r_0 + r_1)) + b/(r_0 + r_1) and D1_1 by
    c_1 = −a r_0/(r_0 + r_1) − b/(r_0 + r_1) (module docstring for r_k, D1_k).
    """
    h = lam[0] - lam[1]
    r0 = (lam[1] - lam[2]) / h
    if len(coefficients) == 2:
        w, a = coefficients
        return [w + a / r0, -a / r0]
    w, a, b = coefficients
    r1 = (lam[2] - lam[3]) / h
    span = r0 + r1
    c0 = a * (1 + r0 / span) + b / span
    c1 = -a * r0 / span - b / span
    return [w + c0 / r0, -c0 / r0 + c1 / r1, -c1 / r1]
