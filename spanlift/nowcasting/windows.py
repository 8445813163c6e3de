"""SEVIR-LR, its nowcasting windows, and the train/val/test split protocols of Earthformer and
PreDiff.

SEVIR-LR (PreDiff, Gao et al. 2023) keeps every second SEVIR frame (25 frames, 10 minutes
apart: offsets −120, −110, …, 120) and max-pools each frame 384² → 128² over non-overlapping
3 × 3 blocks, so storm cores keep their peak VIL. A window is 7 input frames followed by 6
frames to forecast; windows start every `stride` frames. The default stride is 6, as in
Earthformer's `cfg_sevirlr.yaml` and PreDiff's SEVIR-LR config (starts 0, 6 and 12 of 25: three
windows an event, consecutive ones sharing 7 frames).

Split protocols (`SplitSettings.split`), each as the reference code does it; dates compare on
the event's catalog time_utc with `> start` and `<= end`, as Earthformer's loader filters:

- "earthformer" (Earthformer's SEVIR-LR table): train time_utc ≤ 2019-01-01, val
  2019-01-01 < time_utc ≤ 2019-06-01, test time_utc > 2019-06-01.
- "prediff" (PreDiff's SEVIR-LR table): test time_utc > 2019-06-01 as above; the windows with
  time_utc ≤ 2019-06-01 are split at random, 10 % validation: events in id order, shuffled as
  Earthformer's loader shuffles them (pandas `sample(frac=1, random_state=1)`, applied twice:
  once when the samples are listed and once at reset), their windows in start order, then
  `torch.utils.data.random_split(…, [0.9, 0.1], torch.Generator().manual_seed(seed))`.

Both protocols share the test set, so test scores of either are comparable with both tables.
`start`/`end` narrow every split (Earthformer's `start_date`/`end_date`; None: unbounded).
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from spanlift.errors import DataError, SettingsError

LR_TIME_STEP = 2
LR_POOL = 3
LR_FRAME_MINUTES = 10
STRIDE = 6
VAL_START = pd.Timestamp("2019-01-01")
TEST_START = pd.Timestamp("2019-06-01")
PREDIFF_VAL_RATIO = 0.1
EARTHFORMER_SHUFFLE_SEED = 1  # SEVIRTorchDataset's default shuffle_seed


def _date(value: object, name: str) -> pd.Timestamp | None:
    if value is None:
        return None
    try:
        return pd.Timestamp(value)
    except ValueError:
        raise SettingsError(f"{name} date {value!r} is not a date like 2019-06-01") from None


@dataclass(frozen=True)
class SplitSettings:
    """Which windows are train, val and test."""

    split: str = "earthformer"
    """split protocol: earthformer (train ≤ 2019-01-01 < val ≤ 2019-06-01 < test) or prediff
    (test > 2019-06-01, val a seeded random tenth of the windows up to then)"""
    start: str | None = None
    """only events with time_utc after this date (none: from the first)"""
    end: str | None = None
    """only events with time_utc up to and including this date (none: to the last)"""
    seed: int = 0
    """seed of PreDiff's random validation split (its configs' seed)"""

    def __post_init__(self) -> None:
        if self.split not in PROTOCOLS:
            raise SettingsError(
                f"split {self.split!r} is not a protocol; expected one of {', '.join(PROTOCOLS)}"
            )
        for name in ("start", "end"):
            _date(getattr(self, name), name)


PROTOCOLS = ("earthformer", "prediff")
DEFAULT_SPLIT = SplitSettings()


def split_windows(windows: xr.Dataset, settings: SplitSettings = DEFAULT_SPLIT) -> np.ndarray:
    """Per window of `windows` (coordinates `event`, `time_utc`, in store order: events' windows
    consecutive, in start order) its split under `settings`: "train", "val", "test", or "" for a
    window outside start/end."""
    time = pd.DatetimeIndex(windows["time_utc"].to_numpy())
    inside = np.ones(time.size, dtype=bool)
    if settings.start is not None:
        inside &= time > _date(settings.start, "start")
    if settings.end is not None:
        inside &= time <= _date(settings.end, "end")
    splits = np.where(time > TEST_START, "test", "train").astype("<U5")
    if settings.split == "earthformer":
        splits[(time > VAL_START) & (time <= TEST_START)] = "val"
    else:
        before = np.flatnonzero(inside & (time <= TEST_START))
        events = windows["event"].to_numpy().astype(str)
        splits[_prediff_validation(events[before], settings.seed, before)] = "val"
    splits[~inside] = ""
    return splits


def _prediff_validation(events: np.ndarray, seed: int, rows: np.ndarray) -> np.ndarray:
    """The rows (of `rows`, whose events are `events`) that PreDiff's random split draws as
    validation windows; see the module docstring for the order it draws from."""
    import torch  # only this protocol draws with torch's generator

    order = pd.DataFrame({"event": np.unique(events)})  # groupby('id') lists ids sorted
    for _ in range(2):
        order = order.sample(frac=1, random_state=EARTHFORMER_SHUFFLE_SEED)
    rank = pd.Series(np.arange(len(order)), index=order["event"].to_numpy())
    listed = np.lexsort((np.arange(events.size), rank[events].to_numpy()))  # stable per event
    generator = torch.Generator().manual_seed(seed)
    parts = torch.utils.data.random_split(
        range(listed.size), [1 - PREDIFF_VAL_RATIO, PREDIFF_VAL_RATIO], generator=generator
    )
    return rows[listed[np.asarray(parts[1].indices, dtype=np.int64)]]


def to_sevir_lr(ds: xr.Dataset) -> xr.Dataset:
    """Every second frame of each variable (event, time, y, x), max-pooled over 3 × 3 blocks:
    pooled[i, j] = max(frame[3i:3i+3, 3j:3j+3]). Lazy when `ds` is. Events already in SEVIR-LR's
    layout (attribute layout "sevir-lr", as read from PreDiff's files) are returned as they are."""
    if ds.attrs.get("layout") == "sevir-lr":
        return ds
    for dim in ("y", "x"):
        if ds.sizes.get(dim, 0) % LR_POOL:
            raise DataError(
                f"SEVIR-LR pools 3 × 3 blocks: {dim} size {ds.sizes.get(dim)} is not a multiple of 3"
            )
    subsampled = ds.isel(time=slice(None, None, LR_TIME_STEP))
    pooled = subsampled.coarsen(y=LR_POOL, x=LR_POOL).max()
    pooled.attrs = {**ds.attrs, "frame_minutes": LR_FRAME_MINUTES, "layout": "sevir-lr"}
    return pooled


def sevir_windows(
    ds: xr.Dataset, inputs: int = 7, outputs: int = 6, stride: int = STRIDE
) -> xr.Dataset:
    """Windows of `inputs + outputs` consecutive frames starting every `stride` frames of each
    event (6: Earthformer's and PreDiff's SEVIR-LR stride), event by event: the data variable
    (e.g. `vil`) as (window, time, y, x). `time` is minutes relative to the last input frame
    (−60, …, 0, …, 60 for SEVIR-LR); per window `event` (the id), `time_utc` (the event's
    catalog time, which the splits compare) and `start_utc` (time_utc + the first frame's
    offset). `split_windows` says which split each window is in."""
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
    """The stacked windows with per-window `event`, `time_utc` and `start_utc` coordinates."""
    event_time = windows["time_utc"].to_numpy().astype("datetime64[ns]")
    start_utc = event_time + windows["start"].to_numpy().astype("timedelta64[m]")
    coords = {
        "event": ("window", windows["event"].to_numpy().astype(str)),
        "time_utc": ("window", event_time),
        "start_utc": ("window", start_utc.astype("datetime64[ns]")),
    }
    data = windows.drop_vars([name for name in windows.coords if name != "time"])
    return xr.Dataset({windows.name: data.assign_coords(coords)}, attrs=attrs)
