"""The training loop of the embedded denoisers: the EDM loss (Karras et al. 2022, Sec. 5).

    σ ~ exp(N(P_mean, P_std²)),  loss = λ(σ) ‖D(y + σ n, σ, c) − y‖²,  λ(σ) = (σ² + σ_d²) / (σ σ_d)²

with y a training sample and c its conditioning (none for unconditional models). Adam with a
one-cycle learning rate; the exponential moving average of the weights is the model kept.
"""

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones.edm_precond import EDMPrecond

P_MEAN, P_STD = -1.2, 1.2
Batch = Callable[[], tuple[Tensor, Tensor | None]]
"""Draws the next (y, c) of a step."""


def edm_loss(
    model: EDMPrecond, y: Tensor, cond: Tensor | None, generator: torch.Generator | None
) -> Tensor:
    """The EDM loss of one batch; σ and n are drawn from `generator` (torch's own when None)."""
    sigma = (torch.randn(len(y), generator=generator) * P_STD + P_MEAN).exp()
    sd2 = model.sigma_data**2
    weight = (sigma**2 + sd2) / (sigma * model.sigma_data) ** 2
    noise = torch.randn(y.shape, generator=generator)
    denoised = model(y + sigma[:, None, None, None] * noise, sigma, cond)
    return (weight[:, None, None, None] * (denoised - y) ** 2).mean()


def train_edm(
    model: EDMPrecond,
    batch: Batch,
    steps: int,
    lr: float,
    ema_decay: float,
    desc: str,
    generator: torch.Generator | None = None,
) -> tuple[EDMPrecond, float]:
    """Train `model` for `steps` batches; returns the EMA model and the seconds it took."""
    ema = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    start = time.perf_counter()
    for _step in (bar := tqdm(range(steps), desc=desc)):
        loss = edm_loss(model, *batch(), generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            for p_ema, p in zip(ema.parameters(), model.parameters(), strict=True):
                p_ema.lerp_(p, 1 - ema_decay)
        bar.set_postfix(loss=f"{loss.item():.4f}")
    return ema, time.perf_counter() - start


def save_checkpoint(out: Path, model: EDMPrecond, config: dict, train: dict, **extra: Any) -> Path:
    """Write what `weights.edm_unet` reads back: the U-Net `config`, σ_data, the (EMA) weights,
    how it was trained, and `extra` entries (a nowcasting model's grid)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "config": config,
        "sigma_data": model.sigma_data,
        **extra,
        "ema": {k: v.clone() for k, v in model.state_dict().items()},
        "train": train,
    }
    torch.save(state, out)
    return out
