"""Random-weight model folders at the real configurations, laid out as the SANA sweep expects them,
so `spanlift doctor --memory` can probe the real architecture where the released weights are not.

Written under FOLDER (the sweep's relative `../models/...` paths resolve from FOLDER/sweeps/):

    models/Sana_600M_512px_diffusers/  a SanaPipeline saved with `save_pretrained`: the
                                       Sana_600M_512px transformer and dc-ae-f32c32-sana-1.0 as
                                       benchmarks/backbone_latency.py builds them, Gemma 2 2B as
                                       text encoder (transformers' Gemma2Config defaults are
                                       gemma-2-2b's; `--text-encoder-layers` fewer, and
                                       `--text-encoder-vocabulary` smaller, for a quick
                                       folder), a word-level tokenizer, the flow scheduler
    models/dinov2-base/                DINOv2-base (Dinov2Config defaults) and facebook/dinov2-base's
                                       preprocessor_config.json
    models/MJHQ-30K/meta_data.json     MJHQ-shaped prompts ({id: {category, prompt}}) of the
                                       tokenizer's words
    sweeps/<each --sweep file>         copies of the sweep files

Weights are bfloat16 (the sweep's `dtype: bfloat16`), drawn from seed 0; nothing is downloaded.

    python benchmarks/random_pipelines.py FOLDER [--sweep sweeps/sana.yaml]
        [--text-encoder-layers 26] [--text-encoder-vocabulary 256000] [--prompts 30000]
    spanlift doctor --memory FOLDER/sweeps/sana.yaml --gpu-memory 80

Writing the full folder takes about a minute and 7 GB of disk (5.2 GB of it Gemma 2 2B).
"""

import argparse
import json
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from backbone_latency import (  # benchmarks/ is on sys.path when run as a script
    SPECIAL_TOKENS,
    WORDS,
    dc_ae_f32c32,
    quiet,
    sana_transformer,
    tokenizer,
)
from diffusers import DPMSolverMultistepScheduler, SanaPipeline
from transformers import Dinov2Config, Dinov2Model, Gemma2Config, Gemma2Model

ROOT = Path(__file__).resolve().parent.parent
SANA_FOLDER = "models/Sana_600M_512px_diffusers"
DINOV2_FOLDER = "models/dinov2-base"
PROMPTS_FILE = "models/MJHQ-30K/meta_data.json"
GEMMA_2_2B_LAYERS = Gemma2Config().num_hidden_layers
GEMMA_2_2B_VOCABULARY = Gemma2Config().vocab_size
TOKENIZER_TOKENS = len(tokenizer(1).get_vocab())
"""The tokens the prompts' word-level tokenizer knows: a text encoder needs at least these."""
DINOV2_PREPROCESSING = {
    "crop_size": {"height": 224, "width": 224},
    "do_center_crop": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_processor_type": "BitImageProcessor",
    "image_std": [0.229, 0.224, 0.225],
    "resample": 3,
    "rescale_factor": 1 / 255,
    "size": {"shortest_edge": 256},
}
"""facebook/dinov2-base's image processor: shorter side to 256, centre crop 224, ImageNet's
mean and std (what `spanlift.platform.fitting.dinov2` reads)."""


@contextmanager
def built_in(dtype: torch.dtype) -> Iterator[None]:
    """Modules built inside are made in `dtype` from the start (half the memory of building in
    float32 and casting)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def gemma_2_2b(layers: int, vocabulary: int) -> Gemma2Model:
    """Gemma 2 2B (transformers' Gemma2Config defaults) with `layers` layers, a vocabulary of
    `vocabulary` tokens (its embedding is 2 304 × 2 bytes a token: 1.2 GB at Gemma's 256 000),
    and the tokenizer's special tokens."""
    config = Gemma2Config(num_hidden_layers=layers, vocab_size=vocabulary, **SPECIAL_TOKENS)
    return Gemma2Model(config)


def sana_pipeline(text_encoder_layers: int, vocabulary: int) -> SanaPipeline:
    """SANA-600M at 512 px with random bfloat16 weights (module docstring)."""
    torch.manual_seed(0)
    with built_in(torch.bfloat16):
        transformer, vae = sana_transformer(), dc_ae_f32c32()
        text_encoder = gemma_2_2b(text_encoder_layers, vocabulary)
    scheduler = DPMSolverMultistepScheduler(
        use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0
    )
    return SanaPipeline(
        tokenizer=tokenizer(300),
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )


def save_dinov2(folder: Path) -> Path:
    """DINOv2-base with random weights and its image processor's config, in `folder`."""
    torch.manual_seed(1)
    Dinov2Model(Dinov2Config()).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(DINOV2_PREPROCESSING, indent=2))
    return folder


def save_prompts(path: Path, count: int) -> Path:
    """An MJHQ-shaped prompts file of `count` entries of the tokenizer's words."""
    generator = random.Random(0)
    entries = {
        f"{generator.getrandbits(128):032x}": {
            "category": generator.choice(["animals", "people", "landscape"]),
            "prompt": " ".join(generator.choices(WORDS, k=generator.randint(3, 12))),
        }
        for _ in range(count)
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries))
    return path


def write_models(root: Path, text_encoder_layers: int, vocabulary: int, prompts: int) -> None:
    """Everything under `root/models` that the SANA sweep reads."""
    sana_pipeline(text_encoder_layers, vocabulary).save_pretrained(root / SANA_FOLDER)
    save_dinov2(root / DINOV2_FOLDER)
    save_prompts(root / PROMPTS_FILE, prompts)


def copy_sweeps(root: Path, sweeps: list[Path]) -> list[Path]:
    """The sweep files copied to `root/sweeps/`, where `../models/...` is `root/models/...`."""
    (root / "sweeps").mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy(sweep, root / "sweeps" / sweep.name)) for sweep in sweeps]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path, help="where models/ and sweeps/ are written")
    p.add_argument(
        "--sweep",
        type=Path,
        action="append",
        help="a sweep file to copy beside the models (repeatable; default sweeps/sana.yaml)",
    )
    p.add_argument(
        "--text-encoder-layers",
        type=int,
        default=GEMMA_2_2B_LAYERS,
        help=f"Gemma 2 layers of the text encoder (default {GEMMA_2_2B_LAYERS}: gemma-2-2b's)",
    )
    p.add_argument(
        "--text-encoder-vocabulary",
        type=int,
        default=GEMMA_2_2B_VOCABULARY,
        help=f"tokens of the text encoder's embedding (default {GEMMA_2_2B_VOCABULARY}: "
        f"gemma-2-2b's; the prompts use the first {TOKENIZER_TOKENS})",
    )
    p.add_argument("--prompts", type=int, default=30000, help="entries of the prompts file")
    args = p.parse_args()
    quiet()
    if args.text_encoder_vocabulary < TOKENIZER_TOKENS:
        p.error(f"--text-encoder-vocabulary: at least {TOKENIZER_TOKENS}, the tokenizer's tokens")
    write_models(args.folder, args.text_encoder_layers, args.text_encoder_vocabulary, args.prompts)
    for copied in copy_sweeps(args.folder, args.sweep or [ROOT / "sweeps" / "sana.yaml"]):
        print(f"spanlift doctor --memory {copied} --gpu-memory 80")


if __name__ == "__main__":
    main()
