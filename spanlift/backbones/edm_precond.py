"""EDM preconditioning (Karras et al. 2022, Table 1): a raw network F becomes a denoiser D.

D(x, σ) = c_skip(σ) x + c_out(σ) F(c_in(σ) x, c_noise(σ)),
c_skip = σ_d² / (σ² + σ_d²),  c_out = σ σ_d / sqrt(σ² + σ_d²),
c_in = 1 / sqrt(σ² + σ_d²),   c_noise = ln(σ) / 4.
"""

from torch import Tensor, nn

from spanlift.backbones.base import sigma_as_batch


class EDMPrecond(nn.Module):
    def __init__(self, net: nn.Module, sigma_data: float = 0.5) -> None:
        super().__init__()
        self.net = net
        self.sigma_data = sigma_data

    def forward(self, x: Tensor, sigma: Tensor) -> Tensor:
        sigma = sigma_as_batch(sigma, x)
        sd2 = self.sigma_data**2
        c_skip = sd2 / (sigma**2 + sd2)
        c_out = sigma * self.sigma_data / (sigma**2 + sd2).sqrt()
        c_in = 1 / (sigma**2 + sd2).sqrt()
        c_noise = sigma.log().flatten() / 4
        return c_skip * x + c_out * self.net(c_in * x, c_noise)
