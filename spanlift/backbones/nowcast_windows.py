"""SEVIR-LR windows looked up by seed: the conditioning and observations of nowcasting backbones.

A window is 13 consecutive SEVIR-LR frames (10 minutes apart): 7 past frames the model is
conditioned on, then the 6 frames it forecasts. VIL v ∈ [0, 255] maps to the sample space
x = v / 127.5 − 1 ∈ [−1, 1], so the EDM image protocol (x·127.5 + 128, clipped) gives back the
VIL scale. Frames are max-pooled from 128² to the model's grid (kernel = stride = 128 / grid),
as SEVIR-LR itself max-pools 384² to 128², so storm cores keep their peak values.

Seed s picks window s mod N of the training windows when s is a training seed, and of the test
windows otherwise (`spanlift.seeds.held_out`); seeds beyond N draw the same windows again with
other noise, i.e. further ensemble members.
"""

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.errors import DataError
from spanlift.nowcasting.windows import DEFAULT_SPLIT, SplitSettings
from spanlift.seeds import TEST_SEED_OFFSET, held_out

LR_SIZE = 128
INPUTS, OUTPUTS = 7, 6


def vil_to_sample(vil: Tensor) -> Tensor:
    """x = v / 127.5 − 1: VIL 0–255 to the model's [−1, 1]."""
    return vil.float() / 127.5 - 1


LEVEL_SNAP = 1e-3
"""A value this close to a whole VIL level is that level."""


def sample_to_vil(x: Tensor) -> Tensor:
    """v = (x + 1)·127.5, clipped to [0, 255]: a sample back on the VIL scale (float).

    v/127.5 − 1 in float32 and back lands up to ~1e-5 below some levels (16 → 15.999999), which
    scores (event = v ≥ threshold) would count as the level below; a value within `LEVEL_SNAP`
    of a whole level is therefore that level. Forecasts otherwise keep their real values."""
    v = ((x + 1) * 127.5).clamp(0, 255)
    whole = v.round()
    return torch.where((v - whole).abs() < LEVEL_SNAP, whole, v)


def frames_side_by_side(frames: Tensor) -> Tensor:
    """uint8 forecasts (N, H, W, T), frames as channels, as one grey strip per sample
    (N, H, T·W, 1): how sample grids show a forecast."""
    return frames.permute(0, 1, 3, 2).reshape(len(frames), frames.shape[1], -1, 1)


def pool_to_grid(frames: Tensor, grid: int) -> Tensor:
    """Max-pool uint8 frames (..., 128, 128) to (..., grid, grid)."""
    size = frames.shape[-1]
    if size % grid:
        raise DataError(f"grid {grid} does not divide the frames' size {size}")
    if size == grid:
        return frames
    kernel = size // grid
    lead = frames.shape[:-2]
    pooled = F.max_pool2d(frames.reshape(-1, 1, size, size).float(), kernel)
    return pooled.reshape(*lead, grid, grid).to(torch.uint8)


class NowcastWindows:
    """Training and test windows (N, 13, grid, grid) uint8, drawn by seed."""

    def __init__(self, train: Tensor, test: Tensor, identity: str = "") -> None:
        for name, part in (("training", train), ("test", test)):
            if part.ndim != 4 or part.shape[1] != INPUTS + OUTPUTS or len(part) == 0:
                raise DataError(
                    f"{name} windows must be a non-empty (N, {INPUTS + OUTPUTS}, H, W) array, "
                    f"got shape {tuple(part.shape)}"
                )
        self.train, self.test = train, test
        self.identity = (
            identity
            or hashlib.sha256(train.numpy().tobytes() + test.numpy().tobytes()).hexdigest()[:16]
        )

    @classmethod
    def open(
        cls, data: str | Path, grid: int, split: SplitSettings = DEFAULT_SPLIT
    ) -> "NowcastWindows":
        """Train and test windows (under the protocol `split`) of a SEVIR folder (CATALOG.csv,
        prepared once into `<data>/sevir_lr.zarr`) or of a store written by `spanlift nowcast
        prepare`, at `grid`² pixels."""
        from spanlift.nowcasting.store import open_prepared, read_vil

        store = open_prepared(Path(data), split)
        parts = {}
        for part in ("train", "test"):
            chosen = np.flatnonzero(store.split.values == part)
            if chosen.size == 0:
                raise DataError(
                    f"{data}: no {part} windows (the split is by date; see docs/nowcasting.md)"
                )
            frames = read_vil(store, chosen)  # uint8, only these windows read
            parts[part] = pool_to_grid(torch.from_numpy(frames), grid)
        protocol = f"{split.split}-{split.start}-{split.end}-{split.seed}"
        identity = f"{store.attrs.get('content_sha256', '')[:16]}-{grid}-{protocol}"
        return cls(parts["train"], parts["test"], identity)

    def windows(self, seeds: Sequence[int]) -> Tensor:
        """uint8 windows (N, 13, H, W) of the seeds."""
        rows = []
        for seed in seeds:
            part = self.test if held_out(int(seed)) else self.train
            rows.append(part[int(seed) % TEST_SEED_OFFSET % len(part)])
        return torch.stack(rows)

    def past(self, seeds: Sequence[int]) -> Tensor:
        """The 7 past frames of each seed's window in [−1, 1]: (N, 7, H, W)."""
        return vil_to_sample(self.windows(seeds)[:, :INPUTS])

    def future(self, seeds: Sequence[int]) -> Tensor:
        """The 6 observed future frames in [−1, 1]: (N, 6, H, W)."""
        return vil_to_sample(self.windows(seeds)[:, INPUTS:])
