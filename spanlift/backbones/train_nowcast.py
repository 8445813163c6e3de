"""Train the embedded nowcasting denoiser with the EDM loss on training-split SEVIR-LR windows.

    loss = λ(σ) ‖D(y + σ n, σ, past) − y‖²      (edm_training.py)

y: the 6 future frames, past: the 7 frames before them. Each window is flipped and rotated by a
random element of the square's symmetry group (the same for all 13 frames): storms move the same
way under it, so this multiplies the data eightfold without inventing physics.

Usage: spanlift train-nowcast --data data/sevir_train --steps 3000
"""

from pathlib import Path

import torch
from torch import Tensor

from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.edm_training import save_checkpoint, train_edm
from spanlift.backbones.nowcast import GRID, UNET, open_windows
from spanlift.backbones.nowcast_windows import INPUTS, vil_to_sample
from spanlift.backbones.unet import UNet

SIGMA_DATA = 0.5


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

    def batch() -> tuple[Tensor, Tensor]:
        """Future frames y and the past frames before them, of windows turned at random."""
        index = torch.randint(len(windows), (batch_size,), generator=generator)
        frames = vil_to_sample(symmetry(windows[index], generator))
        return frames[:, INPUTS:], frames[:, :INPUTS]

    desc = "train nowcast denoiser"
    ema, seconds = train_edm(model, batch, steps, lr, ema_decay, desc, generator)
    train = {
        "data": str(data),
        "windows": len(windows),
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "seconds": round(seconds, 1),
    }
    return save_checkpoint(out, ema, UNET.to_dict(), train, grid=grid)
