"""Train the embedded digits denoiser with the EDM loss (Karras et al. 2022, Sec. 5).

    loss = λ(σ) ‖D(y + σ n, σ) − y‖²      (edm_training.py)

Usage: spanlift train-digits --steps 4000 --out spanlift/backbones/weights/digits_unet.pt
"""

from pathlib import Path

import torch

from spanlift.backbones.digits import UNET, digits_dataset
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.edm_training import save_checkpoint, train_edm
from spanlift.backbones.unet import UNet

SIGMA_DATA = 0.5


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

    def batch() -> tuple[torch.Tensor, None]:
        return data[torch.randint(len(data), (batch_size,))], None

    ema, seconds = train_edm(model, batch, steps, lr, ema_decay, "train digits denoiser")
    train = {
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "seconds": round(seconds, 1),
    }
    return save_checkpoint(out, ema, UNET.to_dict(), train)
