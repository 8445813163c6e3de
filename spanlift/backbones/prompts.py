"""MJHQ-30K prompts from a local `meta_data.json`, split into training and evaluation prompts.

The file (dataset `playgroundai/MJHQ-30K`) is one JSON object mapping image ids to
{"category": str, "prompt": str}, 30 000 entries.

Split: the ids sorted as strings; the first n_train = max(1, min(5000, n // 6)) are the training
prompts, the other n − n_train the evaluation prompts. The real file gives 5 000 / 25 000; any file
of at least 2 prompts gives two non-empty halves.

Seeds (spanlift/seeds.py) choose prompts:

    seed s < TEST_SEED_OFFSET (training)   → train[s mod n_train]
    any other seed s                       → eval[(s − r) mod n_eval]

where r is the first seed of s's range (TEST_SEED_OFFSET, FID_FIRST_SEED or REFERENCE_FIRST_SEED).
Each held-out range so starts at the first evaluation prompt: seeds FID_FIRST_SEED …
FID_FIRST_SEED + n_eval − 1 meet every evaluation prompt exactly once.

A prompt's index is its position in train + eval: training prompt k is index k, evaluation prompt
k is index n_train + k. Indices are what a backbone's conditioning holds.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from spanlift.errors import DataError
from spanlift.files import file_sha256
from spanlift.seeds import held_out, offset_in_range

TRAIN_PROMPTS = 5000
"""Training prompts of the real file; a smaller file trains on a sixth of its prompts."""

EXPECTED = (
    'expected MJHQ-30K meta_data.json: one JSON object mapping image ids to {"category": str, '
    '"prompt": str}'
)


@dataclass(frozen=True)
class PromptSplit:
    """Training and evaluation prompts of one prompts file, and the file's SHA-256."""

    train: tuple[str, ...]
    evaluation: tuple[str, ...]
    digest: str

    @property
    def texts(self) -> tuple[str, ...]:
        """Every prompt, by index: train + evaluation."""
        return self.train + self.evaluation

    def index(self, seed: int) -> int:
        """The index of seed's prompt (see the module docstring)."""
        seed = int(seed)
        if not held_out(seed):
            return seed % len(self.train)
        return len(self.train) + offset_in_range(seed) % len(self.evaluation)

    def indices(self, seeds: Sequence[int]) -> Tensor:
        """The prompt index of every seed, a LongTensor (N,)."""
        return torch.tensor([self.index(seed) for seed in seeds], dtype=torch.int64)


def read_mjhq(path: str | Path) -> PromptSplit:
    """The split prompts of an MJHQ-30K `meta_data.json`; a file of another shape is a DataError."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(
            f"MJHQ prompts file not found: {path}; pass prompts=<MJHQ-30K meta_data.json> "
            f"(from the playgroundai/MJHQ-30K dataset)"
        )
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DataError(f"MJHQ prompts file {path} is not JSON ({exc}); {EXPECTED}") from None
    if not isinstance(entries, dict):
        raise DataError(
            f"MJHQ prompts file {path} holds a JSON {type(entries).__name__}; {EXPECTED}"
        )
    prompts = [prompt_of(entries[key], key, path) for key in sorted(entries)]
    if len(prompts) < 2:
        raise DataError(
            f"MJHQ prompts file {path} holds {len(prompts)} prompts; at least 2 are needed "
            f"(a training and an evaluation prompt); {EXPECTED}"
        )
    n_train = max(1, min(TRAIN_PROMPTS, len(prompts) // 6))
    return PromptSplit(tuple(prompts[:n_train]), tuple(prompts[n_train:]), file_sha256(path))


def prompt_of(entry: object, key: str, path: Path) -> str:
    """The `prompt` string of one entry of the file."""
    if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str):
        raise DataError(
            f"MJHQ prompts file {path}: entry {key!r} has no string 'prompt'; {EXPECTED}"
        )
    return entry["prompt"]
