"""A DINOv2 from a local Hugging Face folder, shared by the latent fit loss (`fitting/dinov2.py`)
and the fd_dinov2 metric (`evaluation/metrics/fd_dinov2.py`); nothing is downloaded."""

from pathlib import Path

import torch

from spanlift.errors import CheckpointError, SettingsError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def dinov2_model(path: str | Path, how_to_get: str) -> torch.nn.Module:
    """The Hugging Face `Dinov2Model` in the local folder `path` (config.json and weights), float32,
    frozen and in eval mode; a CheckpointError that says `how_to_get` it when there is none."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"DINOv2 folder not found: {folder}; {how_to_get}")
    try:
        from transformers import Dinov2Model
    except ImportError:
        raise SettingsError(
            "DINOv2 needs transformers: pip install 'spanlift[diffusers]'"
        ) from None
    try:
        model = Dinov2Model.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{folder} holds no DINOv2 model ({reason}); {how_to_get}") from None
    return model.eval().requires_grad_(False)
