"""DMN, StepOptim (Xue et al., CVPR 2024, "Accelerating Diffusion Sampling with Optimized Time
Steps"): the schedule whose half-logSNR points minimise an error bound of DPM-Solver++ multistep.

With λ = −ln σ, λ_0 = −ln σ_max < λ_1 < … < λ_N = −ln σ_min, h_i = λ_{i+1} − λ_i, E_i = e^{λ_i},
the data-prediction step i of order k (1 at the first and last step, 2 at the second and the
second to last, 3 elsewhere) writes x_{i+1} as a combination Σ_j J_{ij} D_j of the k newest
denoised estimates j = i−k+1 … i, with

    order 1:  J_{i,i} = E_{i+1} − E_i
    order 2:  J_{i,i−1} = −E_i φ₁(h_i)/h_{i−1},      J_{i,i} = E_i (φ₁(h_i) + h_{i−1} φ₀(h_i))/h_{i−1}
    order 3 (a = h_{i−2}, b = h_{i−1}, h = h_i):
              J_{i,i−2} = E_i (φ₂ + b φ₁) / (a (a + b)),      J_{i,i−1} = −E_i (φ₂ + (a + b) φ₁) / (a b),
              J_{i,i}   = E_i (φ₂ + (2b + a) φ₁ + b (a + b) φ₀) / (b (a + b)),
    φ₀(h) = e^h − 1,   φ₁(h) = h e^h − φ₀(h),   φ₂(h) = h² e^h − 2 φ₁(h)    (φ_k at h = h_i).

Each estimate D_j is taken to err by ε_j = σ_j²/α_j (σ_j, α_j the VP noise and signal scales of
λ_j: α = (1 + e^{−2λ})^{−1/2}, σ = (1 + e^{2λ})^{−1/2}). The bound is

    B(λ) = Σ_{i order 1} |J_{i,i} ε_i| + Σ_{i < 3, order > 1} ‖(J_{ij} ε_j)_j‖₂ + Σ_j |c_j|,
    c_j = Σ_{i ≥ 3, order > 1} J_{ij} ε_j,

and the schedule is argmin B over λ_1 ≤ … ≤ λ_{N−1} between the fixed ends, found by SciPy's
`trust-constr` from the logSNR-uniform grid (the authors' `unif` start, recommended for pixel
models), σ_i = e^{−λ_i}. The bound depends on nothing but λ: the schedule is a pure function of
the number of steps and the σ range, registered as `dmn` beside the other schedules, and fits any
solver; the bound it minimises is DPM-Solver++(3M)'s (and UniPC's, the authors' other target).
B is not smooth (|·| of sums); from N = 7 steps on, `trust-constr` stops at points that move with
the last bit of B's rounding (docs/math.md, "DMN").
"""

import functools
import math
import warnings

import numpy as np
import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.schedules import SCHEDULES

JOINT_STEPS = 3
"""Steps i < 3 of order > 1 enter B by the norm of their terms, later ones through c_j (the
authors' `truncNum`, fixed at 3)."""


def phis(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """φ₀, φ₁, φ₂ of the module docstring at h."""
    grow = np.exp(h)
    phi0 = grow - 1
    phi1 = grow * h - phi0
    return phi0, phi1, grow * h * h - 2 * phi1


def orders(steps: int) -> list[int]:
    """The order of each step: 1 first and last, 2 second and second to last, 3 elsewhere."""
    return [1 if i in (0, steps - 1) else 2 if i in (1, steps - 2) else 3 for i in range(steps)]


def step_weights(lam: np.ndarray) -> list[np.ndarray]:
    """J_{i,j} of each step i over j = i−k+1 … i (oldest first), from the λ grid λ_0 … λ_N."""
    h, e = np.diff(lam), np.exp(lam)
    phi0, phi1, phi2 = phis(h)
    weights = []
    for i, order in enumerate(orders(len(h))):
        if order == 1:
            weights.append(np.array([e[i + 1] - e[i]]))
        elif order == 2:
            b = h[i - 1]
            weights.append(e[i] / b * np.array([-phi1[i], phi1[i] + b * phi0[i]]))
        else:
            a, b = h[i - 2], h[i - 1]
            weights.append(
                e[i]
                * np.array(
                    [
                        (phi2[i] + b * phi1[i]) / (a * (a + b)),
                        -(phi2[i] + (a + b) * phi1[i]) / (a * b),
                        (phi2[i] + (2 * b + a) * phi1[i] + b * (a + b) * phi0[i]) / (b * (a + b)),
                    ]
                )
            )
    return weights


def data_error(lam: np.ndarray) -> np.ndarray:
    """ε = σ²/α with α = (1 + e^{−2λ})^{−1/2}, σ = (1 + e^{2λ})^{−1/2}."""
    alpha = 1 / np.sqrt(1 + np.exp(-2 * lam))
    sigma = 1 / np.sqrt(1 + np.exp(2 * lam))
    return sigma**2 / alpha


def error_bound(inner: np.ndarray, ends: tuple[float, float]) -> float:
    """B(λ) of the module docstring for the interior points λ_1 … λ_{N−1} and ends (λ_0, λ_N)."""
    lam = np.concatenate([[ends[0]], inner, [ends[1]]])
    err = data_error(lam)
    total, shared = 0.0, np.zeros(len(lam) - 1)
    for i, (order, weight) in enumerate(zip(orders(len(lam) - 1), step_weights(lam), strict=True)):
        terms = weight * err[i - order + 1 : i + 1]
        if order == 1:
            total += abs(terms[0])
        elif i < JOINT_STEPS:
            total += math.sqrt(float((terms**2).sum()))
        else:
            shared[i - order + 1 : i + 1] += terms
    return total + float(np.abs(shared).sum())


@functools.lru_cache(maxsize=64)
def optimised_lambdas(steps: int, sigma_min: float, sigma_max: float) -> tuple[float, ...]:
    """λ_0 … λ_N minimising B from the logSNR-uniform start (cached: a pure function)."""
    from scipy.optimize import LinearConstraint, minimize  # here: 0.2 s of every process else

    ends = (-math.log(sigma_max), -math.log(sigma_min))
    start = np.linspace(ends[0], ends[1], steps + 1)
    if steps < 2:
        return tuple(start)
    # λ_1 ≥ λ_0, λ_{k+1} ≥ λ_k, λ_{N−1} ≤ λ_N: a bidiagonal N × (N − 1) system
    rows = np.eye(steps, steps - 1) - np.eye(steps, steps - 1, k=-1)
    lower = np.zeros(steps)
    lower[0], lower[-1] = ends[0], -ends[1]
    ordered = LinearConstraint(rows, lower, np.full(steps, np.inf))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trust-constr's quasi-Newton notes on flat stretches
        found = minimize(
            error_bound, start[1:-1], args=(ends,), method="trust-constr", constraints=[ordered]
        )
    return (ends[0], *found.x, ends[1])


@SCHEDULES.register("dmn")
def dmn(steps: int, sigma_min: float, sigma_max: float) -> Tensor:
    """StepOptim's optimised steps (module docstring): σ_i = e^{−λ_i}, λ = argmin B(λ) with
    λ_0 = −ln σ_max, λ_N = −ln σ_min fixed."""
    if not 0 < sigma_min < sigma_max < math.inf:
        raise SettingsError(
            f"schedule dmn needs 0 < sigma_min < sigma_max, got {sigma_min}, {sigma_max}"
        )
    lam = torch.tensor(optimised_lambdas(steps, float(sigma_min), float(sigma_max)))
    sigmas = (-lam.double()).exp()
    sigmas[0], sigmas[-1] = sigma_max, sigma_min
    return sigmas
