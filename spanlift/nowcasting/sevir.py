"""SEVIR events as a lazy xarray Dataset, read from SEVIR's own folder layout or SEVIR-LR's.

A SEVIR root holds `CATALOG.csv` (one row per event and image type) and `data/<file_name>`, HDF5
files holding one dataset named after the image type, e.g. `vil`. Row `file_index` of that
dataset is the event. Two file layouts are read, each detected from the dataset's shape:

- SEVIR: `vil` is N × 384 × 384 × 49 uint8 (height, width, then 49 frames 5 minutes apart at
  offsets −120 … 120 minutes around the catalog's `time_utc`), and a dataset `id` (N byte
  strings) names each row; the reader checks it against the catalog.
- SEVIR-LR, as PreDiff distributes it (`sevir_lr.zip`, written by Earthformer's
  `save_downsampled_dataset`): `vil` is N × 128 × 128 × 25 (every second frame, max-pooled over
  3 × 3 blocks; 10 minutes apart) and there is no `id`; the rows follow the same catalog.

Only the catalog columns the reader uses are required (REQUIRED_COLUMNS, the ones Earthformer's
loader reads); the event coordinates (EVENT_COORDS) are kept when present, NaN otherwise; other
columns may be missing or extra. Frames are taken by position, as Earthformer does, so
`minute_offsets` is not read. `open_sevir` checks the layout up front (cheaply: catalog,
dataset names, shapes, dtypes and ids) and reads frames only when they are computed, one dask
chunk per event.
"""

from collections.abc import Hashable
from dataclasses import dataclass
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
"""The columns of SEVIR's own CATALOG.csv (what the synthetic writer writes); the reader needs
only REQUIRED_COLUMNS of them."""
REQUIRED_COLUMNS = ("id", "file_name", "file_index", "img_type", "time_utc", "pct_missing")
EVENT_COORDS = ("llcrnrlat", "llcrnrlon", "urcrnrlat", "urcrnrlon", "episode_id", "event_id")


@dataclass(frozen=True)
class FileLayout:
    """How one kind of SEVIR HDF5 file stores an event: frames of `size`² pixels, `count` frames
    `minutes` apart centred on the catalog's time_utc; `ids`: whether the file has an `id`
    dataset naming its rows."""

    name: str
    size: int
    count: int
    minutes: int
    ids: bool

    @property
    def offsets(self) -> np.ndarray:
        """Minutes of each frame relative to time_utc: −120 … 120."""
        half = (self.count - 1) // 2 * self.minutes
        return np.arange(-half, half + 1, self.minutes)


SEVIR = FileLayout("sevir", size=384, count=49, minutes=5, ids=True)
SEVIR_LR = FileLayout("sevir-lr", size=128, count=25, minutes=10, ids=False)
LAYOUTS = (SEVIR, SEVIR_LR)
FRAME_SIZE, FRAME_COUNT, FRAME_MINUTES = SEVIR.size, SEVIR.count, SEVIR.minutes
MINUTE_OFFSETS = tuple(int(offset) for offset in SEVIR.offsets)

TimeBound = str | datetime | pd.Timestamp | None


def read_catalog(root: Path | str) -> pd.DataFrame:
    """`<root>/CATALOG.csv` with its REQUIRED_COLUMNS checked and `time_utc` parsed (all rows, all
    image types; other columns are kept as they are). The index is the row's position in the
    file."""
    path = Path(root) / CATALOG_NAME
    if not path.is_file():
        raise DataError(f"{path}: not found (a SEVIR root holds CATALOG.csv and data/)")
    text_columns = ("id", "file_name", "img_type", "minute_offsets", "proj")
    try:
        catalog = pd.read_csv(path, dtype=dict.fromkeys(text_columns, str), low_memory=False)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not a readable CSV file ({error})") from None
    missing = [column for column in REQUIRED_COLUMNS if column not in catalog.columns]
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
    """The catalog's `img_type` events with `pct_missing ≤ max_missing` and start < time_utc ≤ end
    (Earthformer's loader: `> start_date`, `<= end_date`) as a lazy Dataset: variable `img_type`
    (event, time, y, x) uint8, coordinates `event` (the catalog id), `time` (minute offsets
    −120 … 120), and per event `time_utc`, the corner latitudes/longitudes, `episode_id` and
    `event_id`; attribute `layout` is "sevir" or "sevir-lr" (every file must have the same).
    Events are sorted by time_utc. An id listed more than once among the chosen rows (a known
    SEVIR quirk) is dropped with every one of its rows, as Earthformer's loader does."""
    root = Path(root)
    events = _select_events(read_catalog(root), root, img_type, start, end, max_missing)
    files = {
        name: _check_file(root, name, rows, img_type)
        for name, rows in events.groupby("file_name", sort=False)
    }
    layout = _one_layout(root, files)
    frames = [
        _lazy_event(files[row.file_name][0], int(row.file_index), img_type, layout)
        for row in events.itertuples()
    ]
    coords: dict[Hashable, object] = {
        "event": events["id"].to_numpy(dtype=str),
        "time": layout.offsets,
        "time_utc": ("event", events["time_utc"].to_numpy(dtype="datetime64[ns]")),
    }
    coords.update({name: ("event", _event_column(events, name)) for name in EVENT_COORDS})
    attrs = {
        "source": str(root),
        "img_type": img_type,
        "frame_minutes": layout.minutes,
        "layout": layout.name,
    }
    return xr.Dataset(
        {img_type: (("event", "time", "y", "x"), da.stack(frames))}, coords=coords, attrs=attrs
    )


def _event_column(events: pd.DataFrame, name: str) -> np.ndarray:
    """A per-event catalog column as numbers (NaN where the column or a value is missing)."""
    if name not in events:
        return np.full(len(events), np.nan)
    return pd.to_numeric(events[name], errors="coerce").to_numpy()


def _one_layout(root: Path, files: dict[str, tuple[Path, FileLayout]]) -> FileLayout:
    """The layout every file shares; a mix of layouts is a DataError naming two files."""
    by_layout = {layout.name: (path, layout) for path, layout in files.values()}
    if len(by_layout) > 1:
        (first, a), (second, b) = list(by_layout.values())[:2]
        raise DataError(
            f"{root}: {first} has the {a.name} layout but {second} the {b.name} layout; "
            "a root holds one"
        )
    return next(iter(by_layout.values()))[1]


def _select_events(
    catalog: pd.DataFrame,
    root: Path,
    img_type: str,
    start: TimeBound,
    end: TimeBound,
    max_missing: float,
) -> pd.DataFrame:
    """The rows to open, validated and typed (`file_index` int, `pct_missing` float): ids that
    occur more than once among the rows of `img_type` that pass the filters are dropped whole."""
    path = root / CATALOG_NAME
    rows = catalog[catalog["img_type"] == img_type].copy()
    if rows.empty:
        raise DataError(f"{path}: no rows with img_type {img_type!r}")
    missing = pd.to_numeric(rows["pct_missing"], errors="coerce")
    _reject_first(path, rows, missing.isna(), "pct_missing", "a number")
    lower, upper = _time_bound(start, "start"), _time_bound(end, "end")
    chosen = missing <= max_missing
    if lower is not None:
        chosen &= rows["time_utc"] > lower
    if upper is not None:
        chosen &= rows["time_utc"] <= upper
    rows = rows[chosen]
    rows = rows[~rows["id"].duplicated(keep=False)]
    if rows.empty:
        raise DataError(
            f"{path}: no {img_type} events with pct_missing ≤ {max_missing} and a unique id "
            f"after {lower or 'the first'} up to {upper or 'the last'}"
        )
    file_index = pd.to_numeric(rows["file_index"], errors="coerce")
    _reject_first(path, rows, ~(file_index >= 0), "file_index", "an index ≥ 0")
    rows["file_index"] = file_index.astype(np.int64)
    return rows.sort_values(["time_utc", "id"], kind="stable")


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


def _check_file(
    root: Path, name: str, rows: pd.DataFrame, img_type: str
) -> tuple[Path, FileLayout]:
    """The HDF5 file of `rows` and its layout, checked: dataset `img_type` present with a
    layout's frame shape, each row's index in range (with the catalog's id at it where the file
    has ids), values representable as uint8."""
    path = root / "data" / name
    if not path.is_file():
        raise DataError(f"{_row_label(root, rows, rows.index[0])}: data file {path} not found")
    try:
        with h5py.File(path, "r") as file:
            frames = _dataset(file, path, img_type)
            layout = _layout_of(path, img_type, frames.shape)
            ids = [_decode(raw) for raw in _dataset(file, path, "id")[:]] if layout.ids else None
            for row in rows.itertuples():
                label = _row_label(root, rows, row.Index)
                _check_row(path, label, row.file_index, row.id, ids, len(frames))
            if frames.dtype != np.uint8:
                _check_value_range(path, img_type, frames, rows["file_index"])
    except OSError as error:
        raise DataError(f"{path}: not a readable HDF5 file ({error})") from None
    return path, layout


def _dataset(file: h5py.File, path: Path, name: str) -> h5py.Dataset:
    if not isinstance(file.get(name), h5py.Dataset):
        raise DataError(f"{path}: no dataset {name!r} (found {sorted(file)})")
    return file[name]


def _layout_of(path: Path, img_type: str, shape: tuple[int, ...]) -> FileLayout:
    """The layout whose (N, size, size, count) shape the dataset has."""
    for layout in LAYOUTS:
        if len(shape) == 4 and shape[1:] == (layout.size, layout.size, layout.count):
            return layout
    expected = " or ".join(f"(N, {lay.size}, {lay.size}, {lay.count})" for lay in LAYOUTS)
    raise DataError(f"{path}: dataset {img_type!r} has shape {shape}, expected {expected}")


def _row_label(root: Path, rows: pd.DataFrame, index: int) -> str:
    """Where a row comes from, e.g. `<root>/CATALOG.csv line 12 (id S728503)`: the CSV line is
    index + 2, as line 1 is the header."""
    return f"{root / CATALOG_NAME} line {index + 2} (id {rows.at[index, 'id']})"


def _check_row(
    path: Path, label: str, index: int, event: str, ids: list[str] | None, count: int
) -> None:
    """The event's row exists in the file and the file's `id` there (if it has ids) is the
    catalog's id."""
    if index >= count:
        raise DataError(
            f"{label}: file_index {index} is out of range for {path}, which holds {count} events"
        )
    if ids is None:
        return
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


def _lazy_event(path: Path, index: int, img_type: str, layout: FileLayout) -> da.Array:
    """Event `index` of `path` as a (time, y, x) dask array of one chunk, read when computed."""
    shape = (layout.count, layout.size, layout.size)
    reader = dask.delayed(_read_event, pure=True)(str(path), index, img_type)
    return da.from_delayed(reader, shape=shape, dtype=np.uint8)


def _read_event(path: str, index: int, img_type: str) -> np.ndarray:
    """Row `index` of the file's (N, y, x, time) dataset as a (time, y, x) uint8 array; a row
    that does not read (a damaged compressed chunk) is a DataError naming the file and row."""
    try:
        with h5py.File(path, "r") as file:
            frames = file[img_type][index]
    except OSError as error:
        reason = str(error).strip().splitlines()[0]
        raise DataError(f"{path}: row {index} of {img_type!r} cannot be read ({reason})") from None
    if frames.dtype != np.uint8:
        frames = np.rint(frames)  # validated to lie in 0–255 when opened
    return np.ascontiguousarray(np.moveaxis(frames, -1, 0), dtype=np.uint8)
