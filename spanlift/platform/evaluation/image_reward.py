"""ImageReward (Xu et al. 2023): a BLIP-based reward of how well an image matches its prompt.

Scored with the `image-reward` package (`pip install 'spanlift[imagereward]'`) from local files
only: the checkpoint `ImageReward.pt` and `med_config.json` (both from the THUDM/ImageReward
model page) in one folder, and the `bert-base-uncased` tokenizer already in the Hugging Face
cache; the hub is never contacted. Any piece missing makes the metric unavailable, with the
reason. Samples are read as the package reads an image: bicubic resize of the short side to 224,
centre crop, CLIP normalisation; the reward is `(mlp(BLIP text-image feature) − 0.167) / 1.033`.
"""

import importlib.util
import os
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.errors import MetricUnavailable
from spanlift.platform.evaluation.images import check_samples
from spanlift.platform.evaluation.states import MeanState

FILES = ("ImageReward.pt", "med_config.json")
DEFAULT_FOLDER = Path("~/.cache/ImageReward")  # where the package itself keeps them
INPUT_SIZE = 224
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
PROMPT_TOKENS = 35


def image_reward_files(folder: Path | None) -> tuple[Path, Path]:
    """(checkpoint, med_config) in `folder` (default ~/.cache/ImageReward); MetricUnavailable
    naming what is missing and where it comes from."""
    folder = Path(folder or DEFAULT_FOLDER).expanduser()
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise MetricUnavailable(
            f"ImageReward unavailable: {', '.join(missing)} not found in {folder}; download "
            "ImageReward.pt and med_config.json from the THUDM/ImageReward model page into it"
        )
    return folder / FILES[0], folder / FILES[1]


def check_package() -> None:
    if importlib.util.find_spec("ImageReward") is None:
        raise MetricUnavailable(
            "ImageReward unavailable: the image-reward package is not installed "
            "(pip install 'spanlift[imagereward]')"
        )


@contextmanager
def hub_offline():
    """Hugging Face libraries read their cache only, inside the block."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


def load_image_reward(folder: Path | None, device: torch.device | str = "cpu") -> torch.nn.Module:
    checkpoint, med_config = image_reward_files(folder)
    check_package()
    import ImageReward  # the optional package: imported only when the metric is asked for

    try:
        with hub_offline():
            model = ImageReward.load(str(checkpoint), device=device, med_config=str(med_config))
    except OSError as exc:  # transformers: the tokenizer is not in the cache
        raise MetricUnavailable(
            f"ImageReward unavailable: the bert-base-uncased tokenizer is not in the Hugging "
            f"Face cache ({str(exc).splitlines()[0]})"
        ) from None
    return model.eval().requires_grad_(False)


def reward_input(images: Tensor) -> Tensor:
    """[-1, 1] samples → the model's input: short side bicubic to 224, centre crop, CLIP norm."""
    check_samples(images)
    x = (images.clamp(-1, 1) + 1) / 2
    x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
    height, width = x.shape[-2:]
    scale = INPUT_SIZE / min(height, width)
    size = (max(INPUT_SIZE, round(height * scale)), max(INPUT_SIZE, round(width * scale)))
    x = F.interpolate(x, size=size, mode="bicubic", align_corners=False, antialias=True)
    top, left = (size[0] - INPUT_SIZE) // 2, (size[1] - INPUT_SIZE) // 2
    x = x[..., top : top + INPUT_SIZE, left : left + INPUT_SIZE].clamp(0, 1)
    mean = torch.tensor(CLIP_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


@torch.no_grad()
def image_reward_state(model: torch.nn.Module, images: Tensor, prompts: Sequence[str]) -> MeanState:
    """Summed reward of each sample for its own prompt."""
    if len(prompts) != len(images):
        raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
    device = next(model.parameters()).device
    tokens = model.blip.tokenizer(
        list(prompts),
        padding="max_length",
        truncation=True,
        max_length=PROMPT_TOKENS,
        return_tensors="pt",
    ).to(device)
    rewards = model.score_gard(tokens.input_ids, tokens.attention_mask, reward_input(images))
    return MeanState(float(rewards.double().sum()), len(images))
