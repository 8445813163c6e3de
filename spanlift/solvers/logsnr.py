"""Shared pieces of the solvers that work in data prediction over logSNR (DPM-Solver++, UniPC).

In σ-form (α = 1) the half-logSNR is λ = −ln σ, and the exact solution from s to t is

    x_t = (σ_t / σ_s) x_s + σ_t ∫_{λ_s}^{λ_t} e^{λ} D(λ) dλ.

Their updates produce x_{i+1} directly; `as_direction` turns that into the Δ_i of the loop.
"""

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


def as_direction(x_next: Tensor, x: Tensor, h: Tensor) -> Tensor:
    """Δ_i = (x_{i+1} − x_i) / h_i."""
    return (x_next - x) / h
