"""SEVIR-LR and its nowcasting windows, with the date split of Earthformer and PreDiff.

SEVIR-LR (PreDiff, Gao et al. 2023) keeps every second SEVIR frame (25 frames, 10 minutes
apart: offsets −120, −110, …, 120) and max-pools each frame 384² → 128² over non-overlapping
3 × 3 blocks, so storm cores keep their peak VIL. A window is 7 input frames followed by 6
frames to forecast; windows start every `stride` frames (12 by default: starts 0 and 12 of 25,
so the two windows of an event share one frame, the last of the first window and the first
input of the second).
"""

import numpy as np
import pandas as pd
import xarray as xr

from spanlift.errors import DataError

LR_TIME_STEP = 2
LR_POOL = 3
VAL_START = pd.Timestamp("2019-01-01")
TEST_START = pd.Timestamp("2019-06-01")


def split_by_date(time_utc: object) -> str:
    """The split of an event by its time: train before VAL_START (2019-01-01), val from VAL_START
    up to TEST_START (2019-06-01), test from TEST_START on. This is the split of Earthformer's
    and PreDiff's SEVIR and SEVIR-LR experiments (train on 2017–2018, validate on January–May
    2019, test on June 2019 onwards): chronological, so that windows of one storm day never fall
    on both sides, and comparable with their published scores."""
    time = pd.Timestamp(time_utc)
    if time < VAL_START:
        return "train"
    return "val" if time < TEST_START else "test"


def to_sevir_lr(ds: xr.Dataset) -> xr.Dataset:
    """Every second frame of each variable (event, time, y, x), max-pooled over 3 × 3 blocks:
    pooled[i, j] = max(frame[3i:3i+3, 3j:3j+3]). Lazy when `ds` is."""
    for dim in ("y", "x"):
        if ds.sizes.get(dim, 0) % LR_POOL:
            raise DataError(
                f"SEVIR-LR pools 3 × 3 blocks: {dim} size {ds.sizes.get(dim)} is not a multiple of 3"
            )
    subsampled = ds.isel(time=slice(None, None, LR_TIME_STEP))
    pooled = subsampled.coarsen(y=LR_POOL, x=LR_POOL).max()
    pooled.attrs = {**ds.attrs, "frame_minutes": ds.attrs.get("frame_minutes", 5) * LR_TIME_STEP}
    return pooled


def sevir_windows(
    ds: xr.Dataset, inputs: int = 7, outputs: int = 6, stride: int = 12
) -> xr.Dataset:
    """Windows of `inputs + outputs` consecutive frames starting every `stride` frames of each
    event, event by event: the data variable (e.g. `vil`) as (window, time, y, x). `time` is
    minutes relative to the last input frame (−60, …, 0, …, 60 for SEVIR-LR); per window
    `event` (the id), `start_utc` (time_utc + the first frame's offset) and `split`
    (`split_by_date` of the event's time_utc)."""
    length = inputs + outputs
    offsets = ds["time"].to_numpy()
    if inputs < 1 or outputs < 1 or stride < 1 or length > offsets.size:
        raise DataError(
            f"windows of {inputs} inputs + {outputs} outputs with stride {stride} do not fit "
            f"events of {offsets.size} frames (each must be ≥ 1)"
        )
    starts = range(0, offsets.size - length + 1, stride)
    relative = _relative_minutes(offsets, starts, length, inputs)
    pieces = [
        _only_variable(ds).isel(time=slice(start, start + length)).assign_coords(time=relative)
        for start in starts
    ]
    stacked = xr.concat(pieces, dim="start", coords="minimal", compat="override", join="override")
    stacked = stacked.assign_coords(start=("start", offsets[list(starts)]))
    windows = stacked.transpose("event", "start", "time", "y", "x").stack(
        window=("event", "start"), create_index=False
    )
    windows = windows.transpose("window", "time", "y", "x")
    attrs = {**ds.attrs, "inputs": inputs, "outputs": outputs, "stride": stride}
    return _window_dataset(windows, attrs)


def _only_variable(ds: xr.Dataset) -> xr.DataArray:
    if len(ds.data_vars) != 1:
        raise DataError(f"expected one image variable such as vil, found {list(ds.data_vars)}")
    return next(iter(ds.data_vars.values()))


def _relative_minutes(offsets: np.ndarray, starts: range, length: int, inputs: int) -> np.ndarray:
    """Minutes of a window's frames after its last input frame; the same for every start."""
    relative = offsets[starts[0] : starts[0] + length] - offsets[starts[0] + inputs - 1]
    for start in starts:
        other = offsets[start : start + length] - offsets[start + inputs - 1]
        if not np.array_equal(other, relative):
            raise DataError(f"frames are not evenly spaced: offsets {offsets.tolist()}")
    return relative


def _window_dataset(windows: xr.DataArray, attrs: dict) -> xr.Dataset:
    """The stacked windows with per-window `event`, `start_utc` and `split` coordinates."""
    event_time = windows["time_utc"].to_numpy()
    start_utc = event_time + windows["start"].to_numpy().astype("timedelta64[m]")
    splits = np.array([split_by_date(time) for time in event_time], dtype=object)
    coords = {
        "event": ("window", windows["event"].to_numpy().astype(str)),
        "start_utc": ("window", start_utc.astype("datetime64[ns]")),
        "split": ("window", splits.astype(str)),
    }
    data = windows.drop_vars([name for name in windows.coords if name != "time"])
    return xr.Dataset({windows.name: data.assign_coords(coords)}, attrs=attrs)
