"""Noise-level schedules: pure functions from a number of steps to N + 1 decreasing σ values.

Each returns σ_0 = σ_max > σ_1 > … > σ_N = σ_min as a float64 tensor; solvers never build grids.
`edm_to_zero` alone ends at σ_N = 0, as EDM's own sampler does.
"""

import math
from collections.abc import Callable

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.registry import Registry

EDM_SIGMA_MIN, EDM_SIGMA_MAX = 0.002, 80.0
"""EDM's σ range (Karras et al. 2022, Table 1): the default range of a backbone and of a grid."""

Schedule = Callable[[int, float, float], Tensor]
SCHEDULES: Registry[Schedule] = Registry("schedule")


@SCHEDULES.register("edm")
def edm_polynomial(steps: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> Tensor:
    """EDM (Karras et al. 2022, eq. 5): σ_i = (σ_max^(1/ρ) + i/N (σ_min^(1/ρ) − σ_max^(1/ρ)))^ρ."""
    ramp = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (hi + ramp * (lo - hi)) ** rho


@SCHEDULES.register("edm_to_zero")
def edm_to_zero(steps: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> Tensor:
    """EDM's `generate.py` protocol: the EDM grid of N points from σ_max to σ_min, then σ_N = 0.

    The last step goes from σ_min to 0, where an Euler step lands on the denoised estimate:
    x_N = x + (0 − σ) (x − D(x, σ)) / σ = D(x, σ). EDM's 18-point Heun is N = 18 steps, 35 NFE.
    """
    if steps < 2:
        raise SettingsError(f"schedule edm_to_zero needs at least 2 steps, got {steps}")
    return torch.cat([edm_polynomial(steps - 1, sigma_min, sigma_max, rho), torch.zeros(1)])


@SCHEDULES.register("logsnr")
def logsnr_uniform(steps: int, sigma_min: float, sigma_max: float) -> Tensor:
    """Uniform in logSNR λ = −2 ln σ (DPM-Solver's default): σ_i = exp(linspace(ln σ_max, ln σ_min))."""
    return torch.linspace(
        math.log(sigma_max), math.log(sigma_min), steps + 1, dtype=torch.float64
    ).exp()


@SCHEDULES.register("flow")
def flow_time_uniform(steps: int, sigma_min: float, sigma_max: float) -> Tensor:
    """Uniform in flow-matching time s = σ / (1 + σ) (x_s = (1 − s) x0 + s ε, the flow models'
    own Euler grid without shift): s_i = linspace(s(σ_max), s(σ_min)), σ_i = s_i / (1 − s_i)."""
    s = torch.linspace(
        sigma_max / (1 + sigma_max), sigma_min / (1 + sigma_min), steps + 1, dtype=torch.float64
    )
    return s / (1 - s)


@SCHEDULES.register("time")
def time_uniform(steps: int, sigma_min: float, sigma_max: float) -> Tensor:
    """Uniform in EDM time t = σ: σ_i = σ_max + i/N (σ_min − σ_max)."""
    return torch.linspace(sigma_max, sigma_min, steps + 1, dtype=torch.float64)
