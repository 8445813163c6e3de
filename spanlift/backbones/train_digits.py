"""Train the embedded digits denoiser with the EDM loss (Karras et al. 2022, Sec. 5).

    σ ~ exp(N(P_mean, P_std²)),  loss = λ(σ) ‖D(y + σ n, σ) − y‖²,  λ(σ) = (σ² + σ_d²) / (σ σ_d)².

Usage: spanlift train-digits --steps 4000 --out spanlift/backbones/weights/digits_unet.pt
"""

import copy
import time
from pathlib import Path

import torch
from tqdm import tqdm

from spanlift.backbones.digits import UNET, digits_dataset
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.unet import UNet

SIGMA_DATA = 0.5
P_MEAN, P_STD = -1.2, 1.2


def train_digits(
    out: Path,
    steps: int = 4000,
    batch_size: int = 128,
    lr: float = 2e-3,
    ema_decay: float = 0.999,
    seed: int = 0,
) -> Path:
    torch.manual_seed(seed)
    data = digits_dataset()
    model = EDMPrecond(UNet(UNET), sigma_data=SIGMA_DATA)
    ema = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    start = time.perf_counter()
    for _step in (bar := tqdm(range(steps), desc="train digits denoiser")):
        y = data[torch.randint(len(data), (batch_size,))]
        sigma = (torch.randn(batch_size) * P_STD + P_MEAN).exp()
        weight = (sigma**2 + SIGMA_DATA**2) / (sigma * SIGMA_DATA) ** 2
        denoised = model(y + sigma[:, None, None, None] * torch.randn_like(y), sigma)
        loss = (weight[:, None, None, None] * (denoised - y) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            for p_ema, p in zip(ema.parameters(), model.parameters(), strict=True):
                p_ema.lerp_(p, 1 - ema_decay)
        bar.set_postfix(loss=f"{loss.item():.4f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "config": UNET.to_dict(),
        "sigma_data": SIGMA_DATA,
        "ema": {k: v.clone() for k, v in ema.state_dict().items()},
        "train": {
            "steps": steps,
            "batch_size": batch_size,
            "lr": lr,
            "seed": seed,
            "seconds": round(time.perf_counter() - start, 1),
        },
    }
    torch.save(state, out)
    return out
