"""Images as detectors see them, following the EDM/StyleGAN3 FID protocol.

Samples live in [-1, 1]; a detector gets uint8 pixels `clip(x · 127.5 + 128, 0, 255)`, truncated
as EDM's `generate.py` does, with three channels (grayscale repeated). Resizing and scaling are the
detector's own business.
"""

import torch
from torch import Tensor

from spanlift.errors import SettingsError

# Few-step samples overshoot [-1, 1] (iPNDM at NFE 3 on digits: [-1.61, 1.36]) and are clipped
# by the protocol; values beyond ±4 mean images in another range ([0, 255]): a caller's bug.
TOLERATED_RANGE = 4.0


def check_samples(images: Tensor) -> None:
    """Stop with a clear message unless `images` is a finite float [N, C, H, W] batch in ≈[-1, 1]."""
    if not isinstance(images, Tensor) or not images.is_floating_point():
        kind = images.dtype if isinstance(images, Tensor) else type(images).__name__
        raise SettingsError(f"images: expected a float tensor in [-1, 1], got {kind}")
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise SettingsError(f"images: expected shape [N, 1 or 3, H, W], got {tuple(images.shape)}")
    if not torch.isfinite(images).all():
        raise SettingsError("images: contain NaN or infinite values")
    low, high = images.min().item(), images.max().item()
    if low < -TOLERATED_RANGE or high > TOLERATED_RANGE:
        raise SettingsError(
            f"images: values span [{low:.3g}, {high:.3g}]; expected samples in [-1, 1] "
            "(rescale images in [0, 1] or [0, 255] first)"
        )


def to_uint8_rgb(images: Tensor) -> Tensor:
    """[-1, 1] float [N, C, H, W] → uint8 [N, 3, H, W] by `x · 127.5 + 128`, clipped, truncated."""
    check_samples(images)
    pixels = (images * 127.5 + 128).clamp(0, 255).to(torch.uint8)
    return pixels.expand(-1, 3, -1, -1).contiguous() if pixels.shape[1] == 1 else pixels
