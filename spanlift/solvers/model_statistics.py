"""Empirical model statistics (EMS) of DPM-Solver-v3 (Zheng et al., NeurIPS 2023, App. C.1.1).

On a grid λ_0 < … < λ_M uniform in λ = −ln σ from σ_max to σ_min, with samples x0 of the model
itself, x = x0 + σ z (z ~ N(0, I)), ε = (x − D(x, σ)) / σ, per data dimension:

    l(λ) = E[(σ ∂ε/∂x v) ⊙ v] = 1 − E[(J_D v) ⊙ v],   v Rademacher (Hutchinson's diagonal)
    f    = σ ε − l x = (1 − l) x − D
    f'   = df/dλ along the ODE = σ((l − 1) ε + ε') − l' x,   ε' = dε/dλ with dx/dλ = −σ ε,
           dσ/dλ = −σ (a forward-mode JVP), and l' = dl/dλ by central differences, averaged over
           a window of ±5 nodes (one-sided at the ends, the window cut there)
    s(λ) = Cov(f, f') / Var(f),   b(λ) = E[f'] − s E[f]      (least squares of f' on f)

A dimension whose f does not vary over the samples (a blank border pixel: D and x move together,
l = 1, f = −x0 constant) has Var(f) = 0 and s = 0/0. There the regression has no slope to find;
s = 0 is the minimum-norm least-squares solution and b = E[f'] then fits f' exactly on average.
"Does not vary" is std(f) ≤ 1e-6 · rms(f) (a float32 model's rounding of a constant is ~1e-7).

These are computed in the σ-form of every backbone; they are the same functions of λ as in the
VP form of the paper (f and l are invariant under x ↦ x/α), so statistics and solver agree for
any parameterisation. The samples are not model evaluations of a rollout: their cost is that of
the statistics, paid once per backbone, never counted in a solver's NFE.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.autograd import forward_ad

from spanlift.errors import SettingsError

Denoiser = Callable[[Tensor, Tensor], Tensor]
SMOOTHING = 5
"""The half-width of the window that smooths dl/dλ (the authors' choice)."""
FLAT = 1e-6
"""A dimension is constant where std(f) ≤ FLAT · rms(f)."""


@dataclass(frozen=True)
class ModelStatistics:
    """λ_0 … λ_M (increasing, float64) and l, s, b at each: (M+1, *shape), float64."""

    lam: Tensor
    l: Tensor  # noqa: E741 (the paper's name)
    s: Tensor
    b: Tensor

    def __post_init__(self) -> None:
        size = len(self.lam)
        if size < 3 or any(len(t) != size for t in (self.l, self.s, self.b)):
            raise SettingsError(
                f"model statistics need at least 3 λ nodes and l, s, b at each; got {size} nodes "
                f"and {len(self.l)}, {len(self.s)}, {len(self.b)} rows"
            )

    @classmethod
    def degenerate(
        cls, sigma_min: float, sigma_max: float, shape: tuple[int, ...], timesteps: int = 1200
    ) -> "ModelStatistics":
        """l = 1, s = b = 0 on `timesteps` + 1 nodes of [σ_min, σ_max]: DPM-Solver-v3 is then
        DPM-Solver++ up to the trapezoid rule (no model needed)."""
        lam = statistics_grid(sigma_min, sigma_max, timesteps)
        ones = torch.ones(len(lam), *shape, dtype=torch.float64)
        return cls(lam, ones, ones * 0, ones * 0)


def statistics_grid(sigma_min: float, sigma_max: float, timesteps: int) -> Tensor:
    """λ_0 … λ_M, M = `timesteps`: uniform from −ln σ_max to −ln σ_min (float64)."""
    if timesteps < 2:
        raise SettingsError(f"model statistics need timesteps >= 2, got {timesteps}")
    return torch.linspace(
        -math.log(sigma_max), -math.log(sigma_min), timesteps + 1, dtype=torch.float64
    )


def estimate_statistics(
    denoiser: Denoiser,
    samples: Tensor,
    sigma_min: float,
    sigma_max: float,
    timesteps: int = 1200,
    seed: int = 0,
    batch: int = 256,
) -> ModelStatistics:
    """The EMS (module docstring) from `samples` x0 (K, *shape) of the model `denoiser`, with the
    noise z and probes v drawn from `seed`. 2 (M+1) K forward-mode JVPs of the denoiser."""
    if len(samples) < 2:
        raise SettingsError(f"model statistics need at least 2 samples, got {len(samples)}")
    lam = statistics_grid(sigma_min, sigma_max, timesteps)
    generator = torch.Generator().manual_seed(seed)
    ell = torch.stack([diagonal(denoiser, samples, float(k), generator, batch) for k in lam])
    l_d = smoothed_derivative(ell, lam)
    s, b = [], []
    for j, k in enumerate(lam):
        f, f_d = f_and_derivative(denoiser, samples, float(k), ell[j], l_d[j], generator, batch)
        slope, intercept = regression(f, f_d)
        s.append(slope)
        b.append(intercept)
    return ModelStatistics(lam, ell, torch.stack(s), torch.stack(b))


def noised(samples: Tensor, sigma: float, generator: Tensor) -> Tensor:
    z = torch.randn(samples.shape, generator=generator, dtype=samples.dtype)
    return samples + sigma * z.to(samples.device)


def diagonal(
    denoiser: Denoiser, samples: Tensor, lam: float, generator: torch.Generator, batch: int
) -> Tensor:
    """l at λ: 1 − mean over the samples of (J_D v) ⊙ v at x = x0 + σ z (float64)."""
    sigma, total = math.exp(-lam), 0.0
    for start in range(0, len(samples), batch):
        x0 = samples[start : start + batch]
        x = noised(x0, sigma, generator)
        v = torch.randint(0, 2, x0.shape, generator=generator).to(x0) * 2 - 1
        sig = torch.full((len(x0),), sigma, dtype=x0.dtype, device=x0.device)
        with forward_ad.dual_level():
            out = denoiser(forward_ad.make_dual(x, v), sig)
            jvp = forward_ad.unpack_dual(out).tangent
        total = total + (jvp.double() * v.double()).sum(0)
    return 1 - total / len(samples)


def smoothed_derivative(values: Tensor, lam: Tensor) -> Tensor:
    """dl/dλ on a uniform λ grid: central differences (one-sided at the ends), then the mean
    over nodes i−5 … i+5 that exist."""
    gap = (lam[-1] - lam[0]) / (len(lam) - 1)
    d = torch.empty_like(values)
    d[0], d[-1] = (values[1] - values[0]) / gap, (values[-1] - values[-2]) / gap
    d[1:-1] = (values[2:] - values[:-2]) / (2 * gap)
    sums = torch.cat([torch.zeros_like(d[:1]), d.cumsum(0)])
    index = torch.arange(len(d))
    low, high = (index - SMOOTHING).clamp(min=0), (index + SMOOTHING + 1).clamp(max=len(d))
    width = (high - low).to(d.dtype).reshape(-1, *([1] * (d.ndim - 1)))
    return (sums[high] - sums[low]) / width


def f_and_derivative(
    denoiser: Denoiser,
    samples: Tensor,
    lam: float,
    ell: Tensor,
    l_d: Tensor,
    generator: torch.Generator,
    batch: int,
) -> tuple[Tensor, Tensor]:
    """f and f' (module docstring) at each sample, float64 (K, *shape)."""
    sigma, fs, f_ds = math.exp(-lam), [], []
    ell, l_d = ell.to(samples.device), l_d.to(samples.device)
    for start in range(0, len(samples), batch):
        x0 = samples[start : start + batch]
        x = noised(x0, sigma, generator)
        sig = torch.full((len(x0),), sigma, dtype=x0.dtype, device=x0.device)
        with forward_ad.dual_level():
            denoised = denoiser(x, sig).detach()
            eps = (x - denoised) / sigma
            dual_x = forward_ad.make_dual(x, -sigma * eps)
            dual_sigma = forward_ad.make_dual(sig, -sig)
            eps_dual = (dual_x - denoiser(dual_x, dual_sigma)) / dual_sigma.reshape(
                -1, *([1] * (x.ndim - 1))
            )
            eps_d = forward_ad.unpack_dual(eps_dual).tangent
        x, eps, eps_d = x.double(), eps.double(), eps_d.double()
        fs.append(sigma * eps - ell * x)
        f_ds.append(sigma * ((ell - 1) * eps + eps_d) - l_d * x)
    return torch.cat(fs), torch.cat(f_ds)


def regression(f: Tensor, f_d: Tensor) -> tuple[Tensor, Tensor]:
    """(s, b) of f' ≈ s f + b per dimension over the samples (dim 0), centred moments; s = 0
    where f is constant (module docstring)."""
    mean_f, mean_d = f.mean(0), f_d.mean(0)
    centred = f - mean_f
    variance = centred.pow(2).mean(0)
    covariance = (centred * (f_d - mean_d)).mean(0)
    flat = variance.sqrt() <= FLAT * f.pow(2).mean(0).sqrt()
    slope = torch.where(flat, torch.zeros_like(variance), covariance / variance.where(~flat, 1.0))
    return slope, mean_d - slope * mean_f
