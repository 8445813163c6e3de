"""Train the embedded nowcasting denoiser with the EDM loss on training-split SEVIR-LR windows.

    σ ~ exp(N(P_mean, P_std²)),  loss = λ(σ) ‖D(y + σ n, σ, past) − y‖²,  λ(σ) = (σ² + σ_d²) / (σ σ_d)²

y: the 6 future frames, past: the 7 frames before them. Each window is flipped and rotated by a
random element of the square's symmetry group (the same for all 13 frames): storms move the same
way under it, so this multiplies the data eightfold without inventing physics.

Usage: spanlift train-nowcast --data data/sevir_train --steps 3000
"""

import copy
import time
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.nowcast import GRID, UNET, open_windows
from spanlift.backbones.nowcast_windows import INPUTS, vil_to_sample
from spanlift.backbones.unet import UNet

SIGMA_DATA = 0.5
P_MEAN, P_STD = -1.2, 1.2


def symmetry(windows: Tensor, generator: torch.Generator) -> Tensor:
    """Each window (N, T, H, W) turned by k·90° and, at random, mirrored."""
    k = torch.randint(4, (len(windows),), generator=generator)
    flip = torch.rand(len(windows), generator=generator) < 0.5
    turned = [w.rot90(int(r), dims=(-2, -1)) for w, r in zip(windows, k, strict=True)]
    return torch.stack([w.flip(-1) if f else w for w, f in zip(turned, flip, strict=True)])


def train_nowcast(
    data: Path,
    out: Path,
    steps: int = 3000,
    batch_size: int = 32,
    lr: float = 2e-3,
    ema_decay: float = 0.999,
    grid: int = GRID,
    seed: int = 0,
) -> Path:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    windows = open_windows(data, grid).train
    model = EDMPrecond(UNet(UNET), sigma_data=SIGMA_DATA)
    ema = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    start = time.perf_counter()
    for _step in (bar := tqdm(range(steps), desc="train nowcast denoiser")):
        index = torch.randint(len(windows), (batch_size,), generator=generator)
        frames = vil_to_sample(symmetry(windows[index], generator))
        past, y = frames[:, :INPUTS], frames[:, INPUTS:]
        sigma = (torch.randn(batch_size, generator=generator) * P_STD + P_MEAN).exp()
        weight = (sigma**2 + SIGMA_DATA**2) / (sigma * SIGMA_DATA) ** 2
        noise = torch.randn(y.shape, generator=generator)
        denoised = model(y + sigma[:, None, None, None] * noise, sigma, past)
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
        "grid": grid,
        "ema": {k: v.clone() for k, v in ema.state_dict().items()},
        "train": {
            "data": str(data),
            "windows": len(windows),
            "steps": steps,
            "batch_size": batch_size,
            "lr": lr,
            "seed": seed,
            "seconds": round(time.perf_counter() - start, 1),
        },
    }
    torch.save(state, out)
    return out
