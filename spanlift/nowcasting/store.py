"""Prepared SEVIR-LR window stores: written once from a SEVIR root, read by every run.

A store is a Zarr (`.zarr`) or NetCDF (`.nc`) file holding `vil` (window, time, y, x) uint8, one
window per compressed chunk, the per-window coordinates of `sevir_windows` (event, time_utc,
start_utc), and attributes `schema` (SCHEMA), `inputs`, `outputs`, `stride` (6 by default, as
Earthformer's and PreDiff's SEVIR-LR configs), `source` (the SEVIR root), `catalog_sha256`
(SHA-256 of its CATALOG.csv) and `content_sha256` (SHA-256 of all window bytes in window order,
so two stores holding equal windows have equal hashes whatever their format). The split is not
stored: `read_windows` adds a `split` coordinate for the protocol asked for (`SplitSettings`).

Reading a window whose compressed chunk is damaged raises DataError naming the store.

A store is written into a temporary sibling folder and renamed into place when complete: an
interrupted or failed prepare leaves nothing at the target path.
"""

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import numpy as np
import xarray as xr
import zarr
from tqdm import tqdm

from spanlift.errors import DataError
from spanlift.nowcasting.sevir import CATALOG_NAME, open_sevir
from spanlift.nowcasting.windows import (
    DEFAULT_SPLIT,
    STRIDE,
    SplitSettings,
    sevir_windows,
    split_windows,
    to_sevir_lr,
)

SCHEMA = "spanlift-sevir-lr/2"
PREPARED_NAME = "sevir_lr.zarr"
STORE_SUFFIXES = (".zarr", ".nc")
ZSTD_LEVEL = 3
GZIP_LEVEL = 4


def prepare_sevir_lr(
    root: Path | str,
    out: Path | str,
    img_type: str = "vil",
    stride: int = STRIDE,
    progress: bool = True,
) -> Path:
    """Write the SEVIR-LR windows of the SEVIR root `root` to `out` (.zarr or .nc), replacing
    what is there only once the new store is complete. Returns `out`."""
    root, out = Path(root), Path(out)
    if out.suffix not in STORE_SUFFIXES:
        raise DataError(f"{out}: a prepared store must end in .zarr or .nc")
    windows = sevir_windows(to_sevir_lr(open_sevir(root, img_type)), stride=stride)
    windows.attrs.update(
        schema=SCHEMA, source=str(root.resolve()), catalog_sha256=catalog_sha256(root)
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as error:
        raise DataError(f"{out}: cannot write the prepared store there ({error})") from None
    try:
        staged = _write_zarr(windows, scratch / f"windows{STORE_SUFFIXES[0]}", progress)
        if out.suffix == ".nc":
            staged = _zarr_to_netcdf(staged, scratch / "windows.nc")
        _replace(staged, out, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def read_windows(path: Path | str, split: SplitSettings = DEFAULT_SPLIT) -> xr.Dataset:
    """A prepared store (.zarr or .nc), lazily: `vil` stays on disk until indexed; the small
    per-window coordinates are loaded, and `split` ("train", "val", "test", or "" outside the
    date range) added by `split_windows(…, split)`. Raises DataError unless its schema is
    SCHEMA."""
    path = Path(path)
    if path.suffix not in STORE_SUFFIXES or not path.exists():
        raise DataError(f"{path}: no prepared .zarr or .nc store there")
    try:
        if path.suffix == ".zarr":
            store = xr.open_zarr(path, consolidated=False)
        else:
            store = xr.open_dataset(path, engine="h5netcdf", chunks={})
    except (OSError, ValueError, KeyError) as error:
        raise DataError(f"{path}: not a readable prepared store ({error})") from None
    found = store.attrs.get("schema")
    if found != SCHEMA:
        raise DataError(f"{path}: schema {found!r} found, expected {SCHEMA!r} (prepare it again)")
    if "vil" not in store or store["vil"].dims != ("window", "time", "y", "x"):
        raise DataError(f"{path}: expected a variable vil with dims (window, time, y, x)")
    coords = {name: (store[name].dims, _plain(store[name].to_numpy())) for name in store.coords}
    store = store.assign_coords(coords).assign_attrs(path=str(path))
    return store.assign_coords(split=("window", split_windows(store, split)))


def open_prepared(data: Path, split: SplitSettings = DEFAULT_SPLIT) -> xr.Dataset:
    """The windows of `data` with their `split`: a SEVIR root (prepared into
    `<data>/sevir_lr.zarr` on first use and again whenever its CATALOG.csv changes) or a prepared
    .zarr/.nc store."""
    data = Path(data)
    if (data / CATALOG_NAME).is_file():
        prepared = data / PREPARED_NAME
        with _exclusive(data / f".{PREPARED_NAME}.lock"):  # concurrent runs prepare it once
            if not _is_current(prepared, catalog_sha256(data)):
                prepare_sevir_lr(data, prepared)
        return read_windows(prepared, split)
    if data.suffix in STORE_SUFFIXES and data.exists():
        return read_windows(data, split)
    raise DataError(
        f"{data}: neither a SEVIR folder with {CATALOG_NAME} nor a prepared .zarr/.nc store"
    )


def read_vil(store: xr.Dataset, rows: np.ndarray) -> np.ndarray:
    """The uint8 frames (window, time, y, x) of the store's windows at `rows`, read now; a chunk
    that does not decompress or read is a DataError naming the store."""
    try:
        return np.asarray(store["vil"].isel(window=rows).values, dtype=np.uint8)
    except DataError:
        raise
    except Exception as error:  # the codec's or HDF5's own error types vary by format
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(
            f"{store.attrs.get('path', 'the prepared store')}: a window could not be read, the "
            f"file is damaged ({reason}); prepare it again"
        ) from None


def catalog_sha256(root: Path) -> str:
    """SHA-256 hex of `<root>/CATALOG.csv`'s bytes."""
    return hashlib.sha256((root / CATALOG_NAME).read_bytes()).hexdigest()


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if absent) for the `with` block."""
    try:
        handle = lock_path.open("a")
    except OSError as error:
        raise DataError(f"{lock_path}: cannot create the lock file ({error})") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _is_current(prepared: Path, catalog_hash: str) -> bool:
    """Whether `prepared` is a readable store of this schema made from this catalog."""
    if not prepared.exists():
        return False
    try:
        return read_windows(prepared).attrs.get("catalog_sha256") == catalog_hash
    except DataError:
        return False


def _write_zarr(windows: xr.Dataset, path: Path, progress: bool) -> Path:
    """Write `windows` event by event (hashing each event's windows in order), then the
    attributes with `content_sha256`."""
    encoding = {
        "vil": {
            "chunks": (1, *windows["vil"].shape[1:]),
            "compressors": [zarr.codecs.ZstdCodec(level=ZSTD_LEVEL)],
        }
    }
    layout = _with_object_strings(windows)
    layout.to_zarr(path, mode="w-", compute=False, consolidated=False, encoding=encoding)
    digest = hashlib.sha256()
    bar = tqdm(_event_slices(windows), desc="SEVIR-LR", unit="event", disable=not progress)
    for rows in bar:
        block = np.ascontiguousarray(windows["vil"][rows].to_numpy(), dtype=np.uint8)
        digest.update(block.tobytes())
        region = xr.Dataset({"vil": (windows["vil"].dims, block)})
        region.to_zarr(path, region={"window": rows}, consolidated=False)
    attrs = {**windows.attrs, "content_sha256": digest.hexdigest()}
    xr.Dataset(attrs=attrs).to_zarr(path, mode="a", consolidated=False)
    return path


def _event_slices(windows: xr.Dataset) -> list[slice]:
    """The window ranges of each event (windows of one event are consecutive)."""
    events = windows["event"].to_numpy()
    starts = [0, *np.flatnonzero(events[1:] != events[:-1]) + 1, events.size]
    return [slice(int(first), int(stop)) for first, stop in pairwise(starts)]


def _zarr_to_netcdf(source: Path, path: Path) -> Path:
    """Copy a finished Zarr store to NetCDF-4 (h5netcdf), gzip-compressed, one window a chunk."""
    windows = read_windows(source).drop_vars("split")
    windows.attrs.pop("path", None)
    encoding = {
        "vil": {
            "chunksizes": (1, *windows["vil"].shape[1:]),
            "compression": "gzip",
            "compression_opts": GZIP_LEVEL,
        }
    }
    windows.to_netcdf(path, engine="h5netcdf", encoding=encoding)
    return path


def _replace(staged: Path, out: Path, scratch: Path) -> None:
    """Move `staged` to `out`; an older `out` is first moved into `scratch` (deleted after)."""
    if out.exists() or out.is_symlink():
        os.replace(out, scratch / "previous")
    os.replace(staged, out)


def _with_object_strings(windows: xr.Dataset) -> xr.Dataset:
    """Text coordinates as variable-length strings, which Zarr v3 stores without warnings."""
    text = {
        name: windows[name].astype(object) for name in windows.coords if _is_text(windows[name])
    }
    return windows.assign_coords(text)


def _is_text(array: xr.DataArray) -> bool:
    return array.dtype.kind in "UOT"


def _plain(values: np.ndarray) -> np.ndarray:
    """Text read back (object or numpy StringDType) as fixed-width str, other values unchanged."""
    return np.array(values.tolist(), dtype=str) if values.dtype.kind in "OT" else values
