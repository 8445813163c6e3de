"""EDM preconditioning (Karras et al. 2022, Table 1): a raw network F becomes a denoiser D.

D(x, σ) = c_skip(σ) x + c_out(σ) F(c_in(σ) x, c_noise(σ)),
c_skip = σ_d² / (σ² + σ_d²),  c_out = σ σ_d / sqrt(σ² + σ_d²),
c_in = 1 / sqrt(σ² + σ_d²),   c_noise = ln(σ) / 4.

A conditional denoiser D(x, σ, y) reads its conditioning y as extra input channels of F:
F(concat(c_in(σ) x, y), c_noise(σ)); y is not scaled, it carries no noise.
"""

import torch
from torch import Tensor, nn

from spanlift.backbones.base import sigma_as_batch


class EDMPrecond(nn.Module):
    def __init__(self, net: nn.Module, sigma_data: float = 0.5) -> None:
        super().__init__()
        self.net = net
        self.sigma_data = sigma_data

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor | None = None) -> Tensor:
        sigma = sigma_as_batch(sigma, x)
        sd2 = self.sigma_data**2
        c_skip = sd2 / (sigma**2 + sd2)
        c_out = sigma * self.sigma_data / (sigma**2 + sd2).sqrt()
        c_in = 1 / (sigma**2 + sd2).sqrt()
        c_noise = sigma.log().flatten() / 4
        inputs = c_in * x if cond is None else torch.cat([c_in * x, cond.to(x.dtype)], dim=1)
        return c_skip * x + c_out * self.net(inputs, c_noise)
