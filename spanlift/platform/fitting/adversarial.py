"""GAS's adversarial fit loss (Oganov et al., ICLR 2026), for image backbones: `loss: adversarial`.

    ℓ(x̂, x*) = ℓ_distill(x̂, x*) + w · mean softplus(−(f(D(x̂)) − f(D(x*))))

with D the backbone's decoder, x̂ the student's endpoints, x* the teacher's, and f a
discriminator trained during the fit: before each training batch's generator term, one Adam step
on R3GAN's relativistic loss with zero-centred gradient penalties on both sides (R1, R2), as GAS
trains its discriminator:

    L_f = mean softplus(−(f(D(x*)) − f(D(x̂)))) + γ/2 (‖∇_{D(x*)} f‖² + ‖∇_{D(x̂)} f‖²).

f is used in training only; the solver it trains is unchanged by it.

Where it differs from GAS: f is a small network started at random (`Critic`, three strided 3×3
convolutions; GAS loads a pretrained R3GAN discriminator for CIFAR-10 and FFHQ and starts a large
one at random for latent models); f's step reads the batch's own student endpoints, detached,
rather than a second rollout from fresh noise (on the digits backbone at NFE 4 and batch 32 that
rollout would add 89 ms to a 193 ms iteration, f's step and term with width 32 add 12.5 ms);
a loss evaluated without gradients (the fit's validation) is the distillation term alone, since
the adversarial term moves with f and would not compare states across iterations; f is not part
of a fit's saved state (a resumed fit starts a new f), and under DDP each process trains its own.
"""

from collections.abc import Callable
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LossFn = Callable[[Tensor, Tensor], Tensor]


class Critic(nn.Module):
    """f: three strided 3×3 convolutions (width, 2·width, 4·width) with leaky ReLUs, a global
    mean and a linear read-out; one logit per sample, for images of any size."""

    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        widths = [channels, width, 2 * width, 4 * width]
        layers: list[nn.Module] = []
        for inputs, outputs in pairwise(widths):
            layers += [nn.Conv2d(inputs, outputs, 3, stride=2, padding=1), nn.LeakyReLU(0.2)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(widths[-1], 1)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.body(images).mean(dim=(2, 3))).squeeze(1)


def gradient_penalty(logits: Tensor, inputs: Tensor) -> Tensor:
    """‖∇_x f(x)‖² per sample (zero-centred), kept differentiable for f's step."""
    (gradient,) = torch.autograd.grad(logits.sum(), inputs, create_graph=True)
    return gradient.square().flatten(1).sum(1)


class AdversarialLoss:
    """ℓ_distill + w · the relativistic generator term, training f once per call with gradients
    (module docstring). f is built at the first such call, from the images' channels."""

    stateful = True
    """It trains f on every call with gradients: a fit neither recomputes it in backward nor
    splits its batch into passes (`memory.py`)."""

    def __init__(
        self,
        decode: Callable[[Tensor], Tensor],
        distill: LossFn,
        weight: float,
        lr: float,
        gamma: float,
        width: int,
    ) -> None:
        self.decode, self.distill = decode, distill
        self.weight, self.lr, self.gamma, self.width = weight, lr, gamma, width
        self.critic: Critic | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    @property
    def networks(self) -> list[nn.Module]:
        """The distillation loss's networks and f, once built."""
        own = [self.critic] if self.critic is not None else []
        return [*getattr(self.distill, "networks", []), *own]

    def __call__(self, student: Tensor, teacher: Tensor) -> Tensor:
        value = self.distill(student, teacher)
        if not torch.is_grad_enabled():
            return value
        fake = self.decode(student).float()
        with torch.no_grad():
            real = self.decode(teacher).float()
        critic = self.critic_for(fake)
        self.train_critic(critic, fake.detach(), real)
        relativistic = critic(fake) - critic(real)
        return value + self.weight * F.softplus(-relativistic).mean()

    def critic_for(self, images: Tensor) -> Critic:
        if self.critic is None:
            self.critic = Critic(images.shape[1], self.width).to(images.device)
            self.critic.requires_grad_(False)
            self.optimizer = torch.optim.Adam(self.critic.parameters(), lr=self.lr)
        return self.critic

    def train_critic(self, critic: Critic, fake: Tensor, real: Tensor) -> None:
        """One Adam step on L_f (module docstring)."""
        critic.requires_grad_(True)
        real, fake = real.detach().requires_grad_(True), fake.detach().requires_grad_(True)
        real_logits, fake_logits = critic(real), critic(fake)
        penalties = gradient_penalty(real_logits, real) + gradient_penalty(fake_logits, fake)
        loss = F.softplus(-(real_logits - fake_logits)) + self.gamma / 2 * penalties
        self.optimizer.zero_grad()
        loss.mean().backward()
        self.optimizer.step()
        critic.requires_grad_(False)
