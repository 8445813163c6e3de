"""image_reward: ImageReward (Xu et al. 2023), a BLIP-based reward of how well an image matches
its prompt, averaged over the samples of a prompt-conditioned backbone,

    image_reward = (1/N) Σ_n r(x_n, prompt_n).

Scored with the model class of the `image-reward` package (`pip install 'spanlift[imagereward]'`),
run on transformers 5 (see `image_reward_class`), from local files only: the checkpoint
`ImageReward.pt` and `med_config.json` (both from the THUDM/ImageReward model page) in one folder,
and the `bert-base-uncased` tokenizer already in the Hugging Face cache; the hub is never contacted.
Any piece missing makes the metric unavailable, with the reason. Samples are read as the package
reads an image: bicubic resize of the short side to 224, centre crop, CLIP normalisation; the
reward is `(mlp(BLIP text-image feature) − 0.167) / 1.033`.
"""

import functools
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from unittest import mock

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.errors import MetricUnavailable
from spanlift.files import file_sha256
from spanlift.platform.detectors.images import check_samples
from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    Finished,
    Host,
    Options,
    Row,
    SampleMetric,
    Setup,
    Traits,
)
from spanlift.platform.evaluation.metrics.states import MeanState

NAME = "image_reward"
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
def bare_packages(*names: str) -> Iterator[None]:
    """Inside the block the packages `names` (parents first) are empty modules: importing one of
    their submodules does not run the packages' `__init__.py`."""
    try:
        for name in names:
            sys.modules[name] = importlib.util.module_from_spec(importlib.util.find_spec(name))
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)


def no_head_pruning(*args: object) -> NoReturn:
    raise NotImplementedError("ImageReward's text encoder is never pruned here")


class TransformersFourMethods:
    """What the package's text encoder (`med.BertModel`) calls on itself and transformers 5 took
    out of `PreTrainedModel`, as transformers 4 did it. Scoring passes no head mask."""

    def init_weights(self) -> None:
        # transformers 5's init_weights needs the state post_init sets up, which med.py never
        # calls; the checkpoint replaces these weights anyway.
        self.apply(self._init_weights)

    def invert_attention_mask(self, mask: Tensor) -> Tensor:
        extended = mask[:, None, :, :] if mask.dim() == 3 else mask[:, None, None, :]
        return (1.0 - extended.to(self.dtype)) * torch.finfo(self.dtype).min

    def get_head_mask(self, head_mask: Tensor | None, layers: int) -> list[None]:
        if head_mask is not None:
            raise NotImplementedError("ImageReward is scored without a head mask")
        return [None] * layers


def bert_tokenizer():
    """The package's `init_tokenizer` (bert-base-uncased with BLIP's [DEC] bos token and [ENC]
    token), under transformers 5's name for additional special tokens: extra special tokens.

    Read from the cached snapshot folder, so the hub is never contacted; OSError when vocab.txt is
    not in the cache (transformers 5 would otherwise build a tokenizer with no vocabulary)."""
    from huggingface_hub import hf_hub_download
    from transformers import BertTokenizer

    vocab = hf_hub_download("bert-base-uncased", "vocab.txt", local_files_only=True)
    tokenizer = BertTokenizer.from_pretrained(Path(vocab).parent)
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    tokenizer.add_special_tokens({"extra_special_tokens": ["[ENC]"]})
    tokenizer.enc_token_id = tokenizer.extra_special_tokens_ids[0]
    return tokenizer


@functools.cache
def image_reward_class() -> type[torch.nn.Module]:
    """The package's `ImageReward` model class, adapted to transformers 5.

    image-reward 1.5 targets transformers 4. Its package `__init__` also imports OpenAI's `clip`
    (which needs pkg_resources, gone from setuptools 81) and the ReFL trainer (diffusers,
    datasets), none of which scoring uses, so only the module of the model class is imported, with
    `ImageReward` and `ImageReward.models` entered bare. For transformers 5:
    - med.py imports `apply_chunking_to_forward` and `prune_linear_layer` from
      `transformers.modeling_utils` (moved to `transformers.pytorch_utils` in 4.40), and
      `find_pruneable_heads_and_indices` (removed in 5, used only to prune heads): they are put
      there while it is imported;
    - its `BertModel` is built as a subclass with `TransformersFourMethods`;
    - its tokenizer is built by `bert_tokenizer`.
    The package's own import-time settings (all warnings ignored, transformers logging at error
    level) are undone.
    """
    from transformers import modeling_utils, pytorch_utils
    from transformers.utils import logging

    moved = {
        "apply_chunking_to_forward": pytorch_utils.apply_chunking_to_forward,
        "prune_linear_layer": pytorch_utils.prune_linear_layer,
        "find_pruneable_heads_and_indices": no_head_pruning,
    }
    verbosity = logging.get_verbosity()
    try:
        with (
            warnings.catch_warnings(),
            mock.patch.multiple(modeling_utils, create=True, **moved),
            bare_packages("ImageReward", "ImageReward.models"),
        ):
            model_module = importlib.import_module("ImageReward.ImageReward")
            blip_pretrain = importlib.import_module("ImageReward.models.BLIP.blip_pretrain")
    finally:
        logging.set_verbosity(verbosity)
    base = blip_pretrain.BertModel
    blip_pretrain.BertModel = type(base.__name__, (TransformersFourMethods, base), {})
    blip_pretrain.init_tokenizer = bert_tokenizer
    return model_module.ImageReward


def load_image_reward(folder: Path | None, device: torch.device | str = "cpu") -> torch.nn.Module:
    """The package's model with the checkpoint loaded as `ImageReward.load` loads it (not
    strictly), frozen, in eval mode."""
    checkpoint, med_config = image_reward_files(folder)
    check_package()
    model_class = image_reward_class()
    try:
        model = model_class(med_config=str(med_config), device=device).to(device)
    except OSError as exc:  # bert_tokenizer: the tokenizer is not in the cache
        raise MetricUnavailable(
            f"ImageReward unavailable: the bert-base-uncased tokenizer is not in the Hugging "
            f"Face cache ({str(exc).splitlines()[0]})"
        ) from None
    model.load_state_dict(
        torch.load(checkpoint, map_location="cpu", weights_only=True), strict=False
    )
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


@dataclass(frozen=True)
class ImageRewardOptions(Options):
    image_reward_weights: Path | None = None
    """Folder with ImageReward.pt and med_config.json; None: ~/.cache/ImageReward."""


@METRICS.register(NAME)
class ImageReward(SampleMetric):
    Options = ImageRewardOptions
    rows = (Row(NAME, "max", "ImageReward score", (f"{NAME}.detector",)),)

    @classmethod
    def networks(cls, params: Mapping[str, str]) -> frozenset[str]:
        return frozenset({"imagereward"})

    def measures(self, setup: Setup, traits: Traits) -> dict[str, Any]:
        """The checkpoint it scores with; MetricUnavailable without prompts, files or package."""
        if not traits.prompted:
            raise MetricUnavailable(
                f"ImageReward unavailable: backbone {setup.backbone!r} has no prompts "
                "(ImageReward scores prompt-conditioned backbones)"
            )
        checkpoint, _ = image_reward_files(self.options.image_reward_weights)
        check_package()
        return {f"{NAME}.detector": f"imagereward:{file_sha256(checkpoint)[:12]}"}

    def load(self, host: Host) -> torch.nn.Module:
        return load_image_reward(self.options.image_reward_weights, host.device)

    def state(self, batch: Batch, network: torch.nn.Module) -> MeanState:
        return image_reward_state(network, batch.samples, batch.prompts)

    def finish(self, state: MeanState, prepared: Any, done: Done) -> Finished:
        return Finished({NAME: state.mean}, lines=(f"{NAME} {state.mean:.4f}",))
