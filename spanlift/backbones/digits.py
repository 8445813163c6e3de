"""The embedded digits backbone: a small EDM-preconditioned U-Net trained on scikit-learn's digits.

The 1 797 bundled 8×8 digit images are scaled to [-1, 1] and resized to 16×16. The committed
checkpoint `weights/digits_unet.pt` was produced by `spanlift train-digits` (see train_digits.py).
"""

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.backbones.base import Backbone
from spanlift.backbones.registry import BACKBONES
from spanlift.backbones.unet import UNetConfig
from spanlift.backbones.weights import edm_unet, read_weights, weights_digest

DEFAULT_WEIGHTS = Path(__file__).parent / "weights" / "digits_unet.pt"
IMAGE_SIZE = 16
UNET = UNetConfig(
    in_channels=1, channels=24, channel_mult=(1, 2, 2), blocks_per_level=1, attention_levels=(2,)
)


def digits_dataset(size: int = IMAGE_SIZE) -> Tensor:
    """All scikit-learn digits as a float tensor (N, 1, size, size) in [-1, 1]."""
    from sklearn.datasets import load_digits

    images = torch.from_numpy(load_digits().images).float()[:, None] / 16.0 * 2 - 1
    if size != images.shape[-1]:
        images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    return images.clamp(-1, 1)


def load_weights(path: Path) -> dict:
    """Read a digits checkpoint with `weights_only=True`; a missing or bad file is a clear error."""
    remedy = f"create them with `spanlift train-digits --out {path}` or pass weights=<file>"
    return read_weights(path, "digits backbone", remedy)


@BACKBONES.register("digits")
class DigitsUNet(Backbone):
    """EDM-preconditioned U-Net on scikit-learn's digits, 1×16×16 (CPU, committed weights)."""

    sigma_min = 0.002
    sigma_max = 80.0
    shape = (1, IMAGE_SIZE, IMAGE_SIZE)
    # Inception is ~4.5 images/s on a CPU; a digits classifier is fast. Not `digits`, whose
    # features the digits feature loss fits in, but the independent `digits_eval`.
    fid_detector = "digits_eval"

    def __init__(self, weights: str | Path | None = None) -> None:
        super().__init__()
        path = Path(weights) if weights else DEFAULT_WEIGHTS
        state = load_weights(path)
        self.model = edm_unet(state, path, "digits")
        self._digest = weights_digest(state["ema"])
        self.freeze()

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        return self.model(x, sigma)

    def blocks(self) -> list[torch.nn.Module]:
        return self.model.net.blocks()

    def reference_images(self) -> Tensor:
        return digits_dataset(self.shape[-1])

    def identity(self) -> str:
        return f"digits-{self._digest}"
