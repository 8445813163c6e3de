"""The embedded nowcasting backbone: a conditional EDM U-Net forecasting SEVIR-LR radar frames.

The sample is the 6 future frames (10, 20, …, 60 minutes ahead) as channels of one (6, g, g)
tensor; the conditioning y is the 7 past frames (−60 … 0 minutes), read as 7 more input channels:

    D(x, σ, y) = c_skip(σ) x + c_out(σ) F(concat(c_in(σ) x, y), c_noise(σ))      (edm_precond.py)

Frames are SEVIR-LR windows max-pooled to g×g pixels (g = 32 by default), VIL v ↦ v/127.5 − 1,
so the model runs on a CPU while CSI at every threshold, CSI-4 and CSI-16 stay defined. The
committed checkpoint `weights/nowcast_unet.pt` was trained on synthetic storms by
`spanlift train-nowcast` (see train_nowcast.py). Which window a seed conditions on:
nowcast_windows.py.
"""

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from spanlift.backbones.base import Backbone
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.nowcast_windows import (
    INPUTS,
    OUTPUTS,
    NowcastWindows,
    frames_side_by_side,
)
from spanlift.backbones.registry import BACKBONES
from spanlift.backbones.unet import UNet, UNetConfig
from spanlift.backbones.weights import edm_unet, read_weights, weights_digest
from spanlift.errors import DataError, SettingsError
from spanlift.nowcasting.windows import DEFAULT_SPLIT, SplitSettings

DEFAULT_WEIGHTS = Path(__file__).parent / "weights" / "nowcast_unet.pt"
DEFAULT_DATA = Path("data") / "sevir_synth"
GRID = 32
UNET = UNetConfig(
    in_channels=OUTPUTS + INPUTS,
    out_channels=OUTPUTS,
    channels=32,
    channel_mult=(1, 2, 2),
    blocks_per_level=1,
    attention_levels=(2,),
)


def open_windows(
    data: str | Path, grid: int, split: SplitSettings = DEFAULT_SPLIT
) -> NowcastWindows:
    """The windows of `data` split by `split`; a missing folder says how to make the synthetic
    one."""
    if not Path(data).exists():
        raise DataError(
            f"nowcasting data not found: {data}; create synthetic storms with "
            f"`spanlift nowcast synth --out {data}`, or pass data=<SEVIR folder or prepared store>"
        )
    return NowcastWindows.open(data, grid, split)


@BACKBONES.register("nowcast")
class NowcastUNet(Backbone):
    """Conditional EDM U-Net: 6 future SEVIR-LR frames from 7 past ones (CPU, committed weights)."""

    needs: ClassVar[str] = (
        "data=<SEVIR folder or prepared store> (default data/sevir_synth, made by "
        "`spanlift nowcast synth`); its weights ship with spanlift; split=earthformer|prediff, "
        "start=, end= choose the windows (spanlift.nowcasting.windows.SplitSettings)"
    )

    sigma_min = 0.002
    sigma_max = 80.0
    cpu_batch = 16  # 1.9 ms per 32×32 window at 16, 5.1 ms at 256 (2 threads)

    def __init__(
        self,
        data: str | Path = DEFAULT_DATA,
        weights: str | Path | None = None,
        split: str = "earthformer",
        start: str | None = None,
        end: str | None = None,
    ) -> None:
        super().__init__()
        bounds = (None if date is None else str(date) for date in (start, end))  # YAML: dates
        splitting = SplitSettings(split, *bounds)
        path = Path(weights) if weights else DEFAULT_WEIGHTS
        remedy = f"train them with `spanlift train-nowcast --out {path}` or pass weights=<file>"
        state = read_weights(path, "nowcast backbone", remedy)
        self.model = edm_unet(state, path, "nowcast")
        self.grid = int(state["grid"])
        self.shape = (OUTPUTS, self.grid, self.grid)
        self.windows = open_windows(data, self.grid, splitting)
        self._digest = weights_digest(state["ema"])
        self.freeze()

    def blocks(self) -> list[torch.nn.Module]:
        return self.model.net.blocks()

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        if cond is None:
            raise SettingsError("the nowcast backbone forecasts from past frames: cond is required")
        return self.model(x, sigma, cond)

    def conditioning(self, seeds: Any) -> Tensor:
        return self.windows.past(seeds)

    def observations(self, seeds: Any) -> Tensor:
        return self.windows.future(seeds)

    def to_images(self, x: Tensor) -> Tensor:
        """The 6 forecast frames side by side as one grey uint8 image (N, g, 6g, 1)."""
        return frames_side_by_side(super().to_images(x))

    def identity(self) -> str:
        return f"nowcast-{self._digest}-{self.windows.identity}"


def untrained_state(grid: int = GRID, sigma_data: float = 0.5, seed: int = 0) -> dict:
    """A checkpoint dict of a freshly initialised network (the trainer's start; tests)."""
    torch.manual_seed(seed)
    model = EDMPrecond(UNet(UNET), sigma_data=sigma_data)
    return {
        "config": UNET.to_dict(),
        "sigma_data": sigma_data,
        "grid": grid,
        "ema": {k: v.clone() for k, v in model.state_dict().items()},
    }
