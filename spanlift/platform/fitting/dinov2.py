"""A frozen DINOv2 as a differentiable feature extractor, for the latent models' loss.

    f(x) = the CLS token of DINOv2's last layer after its final layer norm (`pooler_output`)

for decoded images x in [−1, 1]. The CLS token is DINOv2's global descriptor of an image, the
vector its linear probes classify and its retrieval compares: one vector per image, so matching it
matches what the image shows (sharpness, texture, content) and leaves where things are to the
latent MSE, which already matches the layout element by element.

Images are prepared as DINOv2's image processor prepares them, differentiably:

    x → clip to [−1, 1] → (x + 1) / 2 → resize (bicubic, antialiased) → centre crop
      → (x − mean) / std

with the sizes, mean and std of the folder's `preprocessor_config.json` (facebook/dinov2-*:
shorter side to 256, crop 224 × 224, ImageNet mean and std). A folder without that file gets a
resize to 224 × 224 and ImageNet's mean and std. Three channels are one RGB image; any other
number of channels is that many grayscale images (a nowcast's frames), each repeated to RGB.

The weights are read from a local folder only; nothing is downloaded.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.errors import CheckpointError, SettingsError
from spanlift.platform.detectors.dinov2 import IMAGENET_MEAN, IMAGENET_STD, dinov2_model

DEFAULT_SIZE = (224, 224)
HOW_TO_GET = (
    "it is usually a copy of facebook/dinov2-base: download it once "
    "(`hf download facebook/dinov2-base --local-dir <folder>`) and give the folder as the "
    "loss option dinov2_path"
)


@dataclass(frozen=True)
class Preprocessing:
    """How DINOv2 expects its images: a resize, a centre crop, a normalisation."""

    shortest_edge: int | None = None  # resize so that the shorter side is this long, or
    size: tuple[int, int] | None = DEFAULT_SIZE  # resize to (height, width); both None: no resize
    crop: tuple[int, int] | None = None  # centre crop (height, width) after the resize
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD


def read_preprocessing(folder: Path) -> Preprocessing:
    """The preprocessing `folder/preprocessor_config.json` describes; the default without it."""
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return Preprocessing()
    try:
        config = json.loads(path.read_text())
        return preprocessing_of(config)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: not a DINOv2 image processor config ({type(exc).__name__}: {exc})"
        ) from None


def preprocessing_of(config: dict[str, Any]) -> Preprocessing:
    """Preprocessing from the keys of a Hugging Face image processor config."""
    size = config.get("size", {}) if config.get("do_resize", True) else {}
    if isinstance(size, int):  # older configs: the shorter side
        size = {"shortest_edge": size}
    crop = config.get("crop_size") if config.get("do_center_crop", True) else None
    normalise = config.get("do_normalize", True)
    return Preprocessing(
        shortest_edge=size.get("shortest_edge"),
        size=(size["height"], size["width"]) if "height" in size else None,
        crop=(crop["height"], crop["width"]) if crop else None,
        mean=tuple(config.get("image_mean", IMAGENET_MEAN)) if normalise else (0.0,) * 3,
        std=tuple(config.get("image_std", IMAGENET_STD)) if normalise else (1.0,) * 3,
    )


def resize_to(height: int, width: int, p: Preprocessing) -> tuple[int, int]:
    """The size after the resize: the shorter side to `shortest_edge` (the longer one scaled and
    truncated, as the Hugging Face processors do), or the fixed size."""
    if p.shortest_edge:
        short, long = sorted((height, width))
        scaled = int(p.shortest_edge * long / short)
        return (p.shortest_edge, scaled) if height <= width else (scaled, p.shortest_edge)
    return p.size or (height, width)


def center_crop(images: Tensor, size: tuple[int, int]) -> Tensor:
    """The centre (height, width) of images, the offsets rounded down as the processors do."""
    height, width = images.shape[-2:]
    if height < size[0] or width < size[1]:
        raise SettingsError(f"DINOv2: images of {height}×{width} are smaller than its crop {size}")
    top, left = (height - size[0]) // 2, (width - size[1]) // 2
    return images[..., top : top + size[0], left : left + size[1]]


def as_rgb(images: Tensor) -> Tensor:
    """(N, 3, H, W) stays; (N, C, H, W) with C ≠ 3 becomes N·C grayscale images repeated to RGB."""
    n, channels, height, width = images.shape
    if channels == 3:
        return images
    return images.reshape(n * channels, 1, height, width).expand(-1, 3, -1, -1)


class Dinov2Features(torch.nn.Module):
    """f(x): the CLS features (N·k, hidden) of images x (N, C, H, W) in [−1, 1]; k = 1 for RGB,
    C otherwise. Frozen; gradients flow to x."""

    def __init__(self, model: torch.nn.Module, preprocessing: Preprocessing) -> None:
        super().__init__()
        self.model = model.eval().requires_grad_(False)
        self.preprocessing = preprocessing
        self.register_buffer("mean", torch.tensor(preprocessing.mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(preprocessing.std).view(1, 3, 1, 1))

    def pixel_values(self, images: Tensor) -> Tensor:
        """The model's input: images in [−1, 1] prepared as the module docstring says."""
        x = as_rgb((images.float().clamp(-1, 1) + 1) / 2)
        size = resize_to(*x.shape[-2:], self.preprocessing)
        if size != tuple(x.shape[-2:]):
            x = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False)
        if self.preprocessing.crop:
            x = center_crop(x, self.preprocessing.crop)
        return (x - self.mean) / self.std

    def forward(self, images: Tensor) -> Tensor:
        return self.model(pixel_values=self.pixel_values(images)).pooler_output


def load_dinov2(path: str | Path) -> Dinov2Features:
    """The DINOv2 in the local Hugging Face folder `path` (config.json, weights and, usually,
    preprocessor_config.json) as a frozen feature extractor."""
    folder = Path(path).expanduser()
    return Dinov2Features(dinov2_model(folder, HOW_TO_GET), read_preprocessing(folder))
