"""SEVIR events as a lazy xarray Dataset, read from SEVIR's own folder layout.

A SEVIR root holds `CATALOG.csv` (one row per event and image type) and `data/<file_name>`, HDF5
files with a dataset `id` (N fixed-length byte strings) and one dataset named after the image
type, e.g. `vil` (N × 384 × 384 × 49 uint8: height, width, then 49 frames 5 minutes apart at
`minute_offsets` −120 … 120 around the catalog's `time_utc`). Row `file_index` of that file is
the event. `open_sevir` checks this layout up front (cheaply: catalog, dataset names, shapes,
dtypes and ids) and reads frames only when they are computed, one dask chunk per event.
"""

from collections.abc import Hashable
from datetime import datetime
from pathlib import Path

import dask
import dask.array as da
import h5py
import numpy as np
import pandas as pd
import xarray as xr

from spanlift.errors import DataError

CATALOG_NAME = "CATALOG.csv"
CATALOG_COLUMNS = (
    "id", "file_name", "file_index", "img_type", "time_utc", "minute_offsets", "episode_id",
    "event_id", "llcrnrlat", "llcrnrlon", "urcrnrlat", "urcrnrlon", "proj", "size_x", "size_y",
    "height_m", "width_m", "data_min", "data_max", "pct_missing",
)  # fmt: skip
FRAME_SIZE = 384
FRAME_COUNT = 49
FRAME_MINUTES = 5
MINUTE_OFFSETS = tuple(range(-120, 121, FRAME_MINUTES))
EVENT_COORDS = ("llcrnrlat", "llcrnrlon", "urcrnrlat", "urcrnrlon", "episode_id", "event_id")

TimeBound = str | datetime | pd.Timestamp | None


def read_catalog(root: Path | str) -> pd.DataFrame:
    """`<root>/CATALOG.csv` with its required columns checked and `time_utc` parsed (all rows, all
    image types; extra columns are kept). The index is the row's position in the file."""
    path = Path(root) / CATALOG_NAME
    if not path.is_file():
        raise DataError(f"{path}: not found (a SEVIR root holds CATALOG.csv and data/)")
    text_columns = ("id", "file_name", "img_type", "minute_offsets", "proj")
    try:
        catalog = pd.read_csv(path, dtype=dict.fromkeys(text_columns, str), low_memory=False)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not a readable CSV file ({error})") from None
    missing = [column for column in CATALOG_COLUMNS if column not in catalog.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)} of the SEVIR catalog")
    times = pd.to_datetime(catalog["time_utc"], format="ISO8601", errors="coerce")
    _reject_first(path, catalog, times.isna(), "time_utc", "a time like 2019-06-01 13:20:00")
    catalog["time_utc"] = times
    return catalog


def open_sevir(
    root: Path | str,
    img_type: str = "vil",
    start: TimeBound = None,
    end: TimeBound = None,
    max_missing: float = 0.0,
) -> xr.Dataset:
    """The catalog's `img_type` events with `pct_missing ≤ max_missing` and start ≤ time_utc < end
    as a lazy Dataset: variable `img_type` (event, time, y, x) uint8, coordinates `event` (the
    catalog id), `time` (minute offsets −120 … 120), and per event `time_utc`, the corner
    latitudes/longitudes, `episode_id` and `event_id`. Events are sorted by time_utc; an id listed
    twice (a known SEVIR quirk) is kept once."""
    root = Path(root)
    events = _select_events(read_catalog(root), root, img_type, start, end, max_missing)
    files = {
        name: _check_file(root, name, rows, img_type)
        for name, rows in events.groupby("file_name", sort=False)
    }
    frames = [
        _lazy_event(files[row.file_name], int(row.file_index), img_type)
        for row in events.itertuples()
    ]
    coords: dict[Hashable, object] = {
        "event": events["id"].to_numpy(dtype=str),
        "time": np.array(MINUTE_OFFSETS),
        "time_utc": ("event", events["time_utc"].to_numpy(dtype="datetime64[ns]")),
    }
    coords.update({name: ("event", events[name].to_numpy()) for name in EVENT_COORDS})
    return xr.Dataset(
        {img_type: (("event", "time", "y", "x"), da.stack(frames))},
        coords=coords,
        attrs={"source": str(root), "img_type": img_type, "frame_minutes": FRAME_MINUTES},
    )


def _select_events(
    catalog: pd.DataFrame,
    root: Path,
    img_type: str,
    start: TimeBound,
    end: TimeBound,
    max_missing: float,
) -> pd.DataFrame:
    """The rows to open, validated and typed (`file_index` int, `pct_missing` float)."""
    path = root / CATALOG_NAME
    rows = catalog[catalog["img_type"] == img_type].copy()
    if rows.empty:
        raise DataError(f"{path}: no rows with img_type {img_type!r}")
    missing = pd.to_numeric(rows["pct_missing"], errors="coerce")
    _reject_first(path, rows, missing.isna(), "pct_missing", "a number")
    lower, upper = _time_bound(start, "start"), _time_bound(end, "end")
    chosen = missing <= max_missing
    if lower is not None:
        chosen &= rows["time_utc"] >= lower
    if upper is not None:
        chosen &= rows["time_utc"] < upper
    rows = rows[chosen]
    if rows.empty:
        raise DataError(
            f"{path}: no {img_type} events with pct_missing ≤ {max_missing} "
            f"from {lower or 'the first'} to {upper or 'the last'} (exclusive)"
        )
    file_index = pd.to_numeric(rows["file_index"], errors="coerce")
    _reject_first(path, rows, ~(file_index >= 0), "file_index", "an index ≥ 0")
    rows["file_index"] = file_index.astype(np.int64)
    offsets = rows["minute_offsets"].map(_parse_offsets)
    expected = "-120:-115:…:120 (49 frames 5 minutes apart)"
    wrong = offsets.map(lambda parsed: parsed != MINUTE_OFFSETS)
    _reject_first(path, rows, wrong, "minute_offsets", expected)
    return rows.drop_duplicates("id").sort_values(["time_utc", "id"], kind="stable")


def _parse_offsets(text: object) -> tuple[int, ...] | None:
    """The offsets of a `minute_offsets` cell ("-120:-115:…:120") as ints; None if malformed."""
    try:
        return tuple(int(part) for part in str(text).split(":"))
    except ValueError:
        return None


def _time_bound(value: TimeBound, name: str) -> pd.Timestamp | None:
    if value is None:
        return None
    try:
        return pd.Timestamp(value)
    except ValueError:
        raise DataError(f"{name} date {value!r} is not a date like 2019-06-01") from None


def _reject_first(
    path: Path, rows: pd.DataFrame, bad: pd.Series, column: str, expected: str
) -> None:
    """DataError naming the first bad row (CSV line = index + 2: the header is line 1)."""
    if bad.any():
        index = bad[bad].index[0]
        value = rows.at[index, column]
        raise DataError(f"{path} line {index + 2}: {column} = {value!r}, expected {expected}")


def _check_file(root: Path, name: str, rows: pd.DataFrame, img_type: str) -> Path:
    """The HDF5 file of `rows`, checked: datasets `id` and `img_type` present, frames of 384 × 384
    × 49, each row's index in range with the catalog's id at it, values representable as uint8."""
    path = root / "data" / name
    if not path.is_file():
        raise DataError(f"{_row_label(root, rows, rows.index[0])}: data file {path} not found")
    try:
        with h5py.File(path, "r") as file:
            for dataset in ("id", img_type):
                if not isinstance(file.get(dataset), h5py.Dataset):
                    raise DataError(f"{path}: no dataset {dataset!r} (found {sorted(file)})")
            frames = file[img_type]
            _check_frames_shape(path, img_type, frames.shape)
            ids = [_decode(raw) for raw in file["id"][:]]
            for row in rows.itertuples():
                label = _row_label(root, rows, row.Index)
                _check_row(path, label, row.file_index, row.id, ids, len(frames))
            if frames.dtype != np.uint8:
                _check_value_range(path, img_type, frames, rows["file_index"])
    except OSError as error:
        raise DataError(f"{path}: not a readable HDF5 file ({error})") from None
    return path


def _check_frames_shape(path: Path, img_type: str, shape: tuple[int, ...]) -> None:
    expected = (FRAME_SIZE, FRAME_SIZE, FRAME_COUNT)
    if len(shape) != 4 or shape[1:] != expected:
        raise DataError(
            f"{path}: dataset {img_type!r} has shape {shape}, "
            f"expected (N, {', '.join(map(str, expected))})"
        )


def _row_label(root: Path, rows: pd.DataFrame, index: int) -> str:
    """Where a row comes from, e.g. `<root>/CATALOG.csv line 12 (id S728503)`: the CSV line is
    index + 2, as line 1 is the header."""
    return f"{root / CATALOG_NAME} line {index + 2} (id {rows.at[index, 'id']})"


def _check_row(path: Path, label: str, index: int, event: str, ids: list[str], count: int) -> None:
    """The event's row exists in the file and the file's `id` there is the catalog's id."""
    if index >= count:
        raise DataError(
            f"{label}: file_index {index} is out of range for {path}, which holds {count} events"
        )
    found = ids[index] if index < len(ids) else "no id"
    if found != event:
        raise DataError(f"{label}: {path} has id {found!r} at index {index}, expected {event!r}")


def _check_value_range(path: Path, img_type: str, frames: h5py.Dataset, indices: pd.Series) -> None:
    """A non-uint8 dataset is accepted when every value of the chosen rows lies in 0–255."""
    if frames.dtype.kind not in "iuf":
        raise DataError(f"{path}: dataset {img_type!r} has dtype {frames.dtype}, expected uint8")
    for index in indices:
        event = frames[int(index)]
        low, high = float(np.min(event)), float(np.max(event))
        if not (low >= 0 and high <= 255):  # also rejects NaN
            raise DataError(
                f"{path}: dataset {img_type!r} ({frames.dtype}) row {index} has values from "
                f"{low} to {high}, expected uint8 values 0–255"
            )


def _decode(raw: bytes | str) -> str:
    return (raw.decode() if isinstance(raw, bytes) else str(raw)).strip()


def _lazy_event(path: Path, index: int, img_type: str) -> da.Array:
    """Event `index` of `path` as a (time, y, x) dask array of one chunk, read when computed."""
    shape = (FRAME_COUNT, FRAME_SIZE, FRAME_SIZE)
    reader = dask.delayed(_read_event, pure=True)(str(path), index, img_type)
    return da.from_delayed(reader, shape=shape, dtype=np.uint8)


def _read_event(path: str, index: int, img_type: str) -> np.ndarray:
    """Row `index` of the file's (N, y, x, time) dataset as a (time, y, x) uint8 array."""
    with h5py.File(path, "r") as file:
        frames = file[img_type][index]
    if frames.dtype != np.uint8:
        frames = np.rint(frames)  # validated to lie in 0–255 when opened
    return np.ascontiguousarray(np.moveaxis(frames, -1, 0), dtype=np.uint8)
