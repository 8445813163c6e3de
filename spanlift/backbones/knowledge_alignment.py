"""PreDiff's knowledge alignment (Gao et al., NeurIPS 2023, §3.2) as a shift of the predicted noise.

PreDiff guides each ancestral DDPM step by moving the posterior mean against the gradient of an
energy that measures how far the forecast's anticipated average intensity is from a target:

    U(z_t, t)  = ‖ mean_frames(A(z_t, t)) − avg_x ‖₂                    (A: the alignment network)
    μ̃_t        = μ_t − s · σ̃_t · ∇_{z_t} U                            (s: guide_scale)

with σ̃_t² = max(β_t (1 − ᾱ_{t−1})/(1 − ᾱ_t), 1e-20) the posterior variance: in PreDiff's code,
`SEVIRAvgIntensityAlignment.alignment_fn` is U (no weighting in t), `get_mean_shift` returns
s · ∇U, and `LatentDiffusion.aligned_mean` subtracts σ̃_t times it from the mean that `p_sample`
then draws around. Since μ_t = (z_t − β_t/√(1 − ᾱ_t) · ε)/√α_t, that step is the unguided step of
the noise

    ε̃ = ε + k_t · s · ∇_{z_t} U,    k_t = √(α_t (1 − ᾱ_t)) · σ̃_t / β_t,

which is what the σ-form denoiser uses, so every solver sees the guided model; 1 000 ancestral
steps of ε̃ are PreDiff's aligned sampler, window by window (tested against PreDiff's own
`p_sample` in tests/test_prediff_reference.py). Between integer timesteps k_t is interpolated
linearly in t. Two deliberate differences: PreDiff takes one norm over the whole batch (so a
window's guidance depends on the other windows of its batch), here the norm is per window (equal
at batch size 1); and the shift is a constant for gradients taken through D (no second order).

The target avg_x is PreDiff's evaluation knowledge: `multiplier` × the mean of the window's
observed future frames on PreDiff's [0, 1] scale (its script's multiplier is 2.0).
"""

import torch
from torch import Tensor, nn


def guidance_factors(timesteps: int, linear_start: float, linear_end: float) -> Tensor:
    """k_t for t = 0 … T−1 (float64) of the linear-in-√β schedule."""
    betas = torch.linspace(linear_start**0.5, linear_end**0.5, timesteps, dtype=torch.float64) ** 2
    alphas = 1 - betas
    alphas_cumprod = torch.cumprod(alphas, dim=0)
    previous = torch.cat([alphas_cumprod.new_ones(1), alphas_cumprod[:-1]])
    posterior_variance = (betas * (1 - previous) / (1 - alphas_cumprod)).clamp_min(1e-20)
    return (alphas * (1 - alphas_cumprod)).sqrt() * posterior_variance.sqrt() / betas


class KnowledgeAlignment(nn.Module):
    """ε̃ − ε for a batch: k_t · s · ∇U (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        guide_scale: float,
        timesteps: int,
        linear_start: float,
        linear_end: float,
    ) -> None:
        super().__init__()
        self.model, self.guide_scale, self.timesteps = model, float(guide_scale), timesteps
        factors = guidance_factors(timesteps, linear_start, linear_end)
        self.register_buffer("factors", factors, persistent=False)

    def factor(self, t: Tensor) -> Tensor:
        """k_t, linear in t between integer timesteps (float64, shape of t)."""
        t = t.double().clamp(0, self.timesteps - 1)
        lower = t.floor().long().clamp(max=self.timesteps - 2)
        fraction = t - lower
        factors = self.factors.to(t.device)
        return factors[lower] * (1 - fraction) + factors[lower + 1] * fraction

    def energy(self, z_t: Tensor, t: Tensor, cond: Tensor, target: Tensor) -> Tensor:
        """U per window: ‖mean over frames of A(z_t, t) − target‖₂, shape (N,)."""
        predicted = self.model(z_t, t, zc=cond, y=None, avg_x_gt=target[:, None])
        return torch.linalg.vector_norm(predicted.mean(dim=1) - target[:, None], dim=-1)

    def forward(self, z_t: Tensor, t: Tensor, cond: Tensor, target: Tensor) -> Tensor:
        """k_t · s · ∇_{z_t} U for NTHWC latents z_t, timesteps t (N,), targets (N,)."""
        with torch.enable_grad():
            z = z_t.detach().requires_grad_(True)
            (gradient,) = torch.autograd.grad(self.energy(z, t, cond, target).sum(), z)
        scale = (self.guide_scale * self.factor(t)).to(z_t.dtype)
        return scale.reshape(-1, *[1] * (z_t.ndim - 1)) * gradient
