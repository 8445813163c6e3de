"""Shared pieces of the solvers that work in data prediction over logSNR (DPM-Solver++, UniPC).

In σ-form (α = 1) the half-logSNR is λ = −ln σ, and the exact solution from s to t is

    x_t = (σ_t / σ_s) x_s + σ_t ∫_{λ_s}^{λ_t} e^{λ} D(λ) dλ.

Their updates take the form x_{i+1} = (σ_{i+1}/σ_i) x_i − φ₁ D̃ with φ₁ = e^{−h} − 1 and D̃ a
weighted sum of the history's denoised outputs. Since (σ_{i+1}/σ_i − 1)/h_i = 1/σ_i with
h_i = σ_{i+1} − σ_i, the loop's direction is Δ_i = x_i/σ_i − (φ₁/h_i) D̃ (`data_direction`):
two tensor operations on top of D̃, which `weighted_sum` forms in one per term.
"""

from collections.abc import Sequence

import torch
from torch import Tensor


def order_at(i: int, steps: int, ends_at_zero: bool, order: int, lower_order_final: bool) -> int:
    """Warm start with lower orders; with `lower_order_final` also end with lower orders
    (DPM-Solver's stabiliser for fewer than ~15 steps): p_i = min(order, i + 1, N − i).

    A step to σ_{i+1} = 0 (λ = ∞) is first order: there the exact update is x_{i+1} = D_i, and the
    higher-order terms, weighted by h/h_prev, have no limit. Only the last step can (σ falls).
    Decided on the host from the grid's shape, never by reading σ off the device."""
    if ends_at_zero and i + 1 == steps:
        return 1
    p = min(order, i + 1)
    return min(p, steps - i) if lower_order_final else p


def half_logsnr(sigma: Tensor) -> Tensor:
    return -sigma.log()


def weighted_sum(weights: Sequence[Tensor], tensors: Sequence[Tensor]) -> Tensor:
    """Σ_j w_j T_j for 0-d weights, one fused multiply-add per term after the first."""
    total = weights[0] * tensors[0]
    for w, t in zip(weights[1:], tensors[1:], strict=True):
        total = torch.addcmul(total, w, t)
    return total


def data_direction(x: Tensor, combined: Tensor, sigma: Tensor, phi_1: Tensor, h: Tensor) -> Tensor:
    """Δ_i = x_i/σ_i − (φ₁/h_i) D̃: the direction of x_{i+1} = (σ_{i+1}/σ_i) x_i − φ₁ D̃."""
    return torch.addcmul(x / sigma, -phi_1 / h, combined)
