"""An analytic Gaussian-mixture backbone: data whose exact denoiser is known in closed form.

Data p(x) = Σ_k π_k N(μ_k, s_k² I). Noised by σ, each component becomes N(μ_k, (s_k² + σ²) I), so

    D(x, σ) = E[x0 | x] = Σ_k w_k(x, σ) · (μ_k + s_k² / (s_k² + σ²) · (x − μ_k)),
    w_k ∝ π_k N(x; μ_k, (s_k² + σ²) I).

The means are smooth random images so that spatial structure matters, as it does for real data.
"""

import hashlib
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.backbones.base import Backbone, sigma_as_batch
from spanlift.backbones.registry import BACKBONES


@BACKBONES.register("gmm")
class GaussianMixture(Backbone):
    """Gaussian mixture with an exact denoiser (CPU, no weights)."""

    needs: ClassVar[str] = "nothing: analytic, no weights"

    sigma_min = 0.002
    sigma_max = 80.0

    def __init__(
        self, components: int = 8, channels: int = 1, size: int = 8, std: float = 0.1, seed: int = 0
    ) -> None:
        super().__init__()
        self.shape = (channels, size, size)
        self.config = dict(components=components, channels=channels, size=size, std=std, seed=seed)
        generator = torch.Generator().manual_seed(seed)
        coarse = torch.randn(components, channels, 3, 3, generator=generator)
        means = F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=True)
        means = means / means.abs().amax(dim=(1, 2, 3), keepdim=True) * 0.8
        stds = std * (0.5 + torch.rand(components, generator=generator))
        weights = 0.5 + torch.rand(components, generator=generator)
        self.register_buffer("means", means)
        self.register_buffer("variances", stds**2)
        self.register_buffer("log_weights", (weights / weights.sum()).log())
        self.freeze()

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        dim = x[0].numel()
        s2 = sigma_as_batch(sigma, x).reshape(-1, 1) ** 2  # (N, 1)
        total_var = self.variances[None, :] + s2  # (N, K)
        flat, means = x.reshape(len(x), 1, dim), self.means.reshape(1, -1, dim)
        sq_dist = (flat - means).pow(2).sum(-1)  # (N, K)
        log_post = self.log_weights - 0.5 * (sq_dist / total_var + dim * total_var.log())
        post = torch.softmax(log_post, dim=1)  # (N, K)
        shrink = self.variances[None, :] / total_var  # s_k² / (s_k² + σ²)
        per_comp = means + shrink[..., None] * (flat - means)  # (N, K, dim)
        return (post[..., None] * per_comp).sum(1).reshape_as(x)

    def sample_data(self, n: int, generator: torch.Generator) -> Tensor:
        """Exact samples from the mixture (used by tests and FID references)."""
        k = torch.multinomial(self.log_weights.exp(), n, replacement=True, generator=generator)
        eps = torch.randn(n, *self.shape, generator=generator)
        std = self.variances[k].sqrt().reshape(-1, 1, 1, 1)
        return self.means[k] + std * eps

    def identity(self) -> str:
        digest = hashlib.sha256(repr(sorted(self.config.items())).encode()).hexdigest()[:16]
        return f"gmm-{digest}"
