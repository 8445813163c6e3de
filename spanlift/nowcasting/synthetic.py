"""Synthetic SEVIR: moving, growing and decaying convective storms in SEVIR's own folder layout.

Each event holds 4–10 cells. A cell is an elliptic Gaussian (major-axis σ of 8–18 px at 1 km
per pixel, any orientation) whose VIL at a pixel is

    v = a(t) · max(core · exp(−r²/2), envelope · exp(−r²/(2k²))),   k ∈ [2.5, 4],

with r the pixel's distance from the cell centre in units of σ along each axis: a sharp core of
160–240 inside a broad stratiform envelope of 25–90 (VIL on SEVIR's 0–255 scale). The cell
moves at a constant velocity, the event's storm motion (1.5–4.5 px per 5-minute frame, any
direction) plus a small per-cell deviation, and lives from its birth for 2–6 hours with
a(t) = sin(π·(t − birth)/lifetime)^1.5: it grows, peaks and decays; the first cell is born
before the event, the others at any time up to an hour before its end. A speckle of 0–3 on 5 %
of pixels and ±5 % texture make up the rest. The past thus predicts the future (constant
motion) but not trivially (growth, decay, births).

Everything of event i comes from numpy's generator seeded with (seed, i): the same seed writes
byte-identical files.
"""

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
from tqdm import tqdm

from spanlift.errors import DataError
from spanlift.nowcasting.sevir import (
    CATALOG_COLUMNS,
    CATALOG_NAME,
    FRAME_COUNT,
    FRAME_MINUTES,
    FRAME_SIZE,
    MINUTE_OFFSETS,
)

PROJECTION = "+proj=laea +lat_0=38 +lon_0=-98 +units=m +a=6370997.0 +ellps=sphere"
PIXEL_METERS = 1000
SETTINGS_NAME = "synthetic.json"
KM_PER_DEGREE_LATITUDE = 111.2


def write_synthetic_sevir(
    out: Path | str,
    events: int = 64,
    seed: int = 0,
    start: str = "2018-01-01",
    end: str = "2019-12-31",
    progress: bool = True,
) -> Path:
    """Write `events` synthetic VIL events as a SEVIR root at `out`, a new or empty folder
    (CATALOG.csv and data/vil/<year>/SEVIR_VIL_STORMEVENTS_<year>_<MMDD>_<MMDD>.h5, one file per
    half-month, and the settings that made them, SETTINGS_NAME). A folder these settings already
    wrote is kept as it is: the events are a function of them.

    Event i happens at start + (i + ½)/events · (end − start), rounded down to 5 minutes: evenly
    spread, so with the defaults every date split (train ≤ 2019-01-01 < val ≤ 2019-06-01 < test)
    gets events."""
    times = event_times(start, end, events)
    if seed < 0:
        raise DataError(f"seed must be ≥ 0, got {seed}")
    root = Path(out)
    settings = {"events": events, "seed": seed, "start": start, "end": end}
    if written_with(root) == settings:
        return root
    if root.exists() and any(root.iterdir()):
        raise DataError(f"{root}: exists and is not empty; write synthetic SEVIR to a new folder")
    files = pd.Series(range(events)).groupby([_file_name(time) for time in times], sort=False)
    rows = []
    with tqdm(total=events, desc="synthetic SEVIR", unit="event", disable=not progress) as bar:
        for file_name, indices in files:
            path = root / "data" / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            with h5py.File(path, "w") as file:
                ids = [_event_id(index) for index in indices]
                file.create_dataset("id", data=np.array(ids, dtype="S"), track_times=False)
                vil = file.create_dataset(
                    "vil",
                    shape=(len(indices), FRAME_SIZE, FRAME_SIZE, FRAME_COUNT),
                    dtype=np.uint8,
                    chunks=(1, FRAME_SIZE, FRAME_SIZE, FRAME_COUNT),
                    compression="gzip",
                    compression_opts=1,
                    track_times=False,
                )
                for file_index, index in enumerate(indices):
                    rng = np.random.default_rng([seed, index])
                    frames = storm_frames(rng)
                    vil[file_index] = np.moveaxis(frames, 0, -1)  # SEVIR stores H × W × T
                    place = (file_name, file_index)
                    rows.append(_catalog_row(rng, index, times[index], place, frames))
                    bar.update()
    pd.DataFrame(rows, columns=list(CATALOG_COLUMNS)).to_csv(root / CATALOG_NAME, index=False)
    (root / SETTINGS_NAME).write_text(json.dumps(settings))
    return root


def written_with(root: Path) -> dict | None:
    """The settings write_synthetic_sevir wrote `root` with, or None for any other folder."""
    try:
        return json.loads((root / SETTINGS_NAME).read_text())
    except (OSError, ValueError):
        return None


def event_times(start: str, end: str, events: int) -> list[pd.Timestamp]:
    """start + (i + ½)/events · (end − start) for i < events, floored to 5 minutes."""
    if events < 1:
        raise DataError(f"events must be ≥ 1, got {events}")
    try:
        first, last = pd.Timestamp(start), pd.Timestamp(end)
    except ValueError:
        raise DataError(f"start {start!r} or end {end!r} is not a date like 2019-06-01") from None
    if not first < last:
        raise DataError(f"start {start} must come before end {end}")
    step = (last - first) / events
    return [(first + (index + 0.5) * step).floor(f"{FRAME_MINUTES}min") for index in range(events)]


def storm_frames(rng: np.random.Generator) -> np.ndarray:
    """One event's 49 frames (time, y, x) uint8: the cells of the module docstring."""
    field = np.zeros((FRAME_COUNT, FRAME_SIZE, FRAME_SIZE), np.float32)
    speed, heading = rng.uniform(1.5, 4.5), rng.uniform(0, 2 * math.pi)
    storm_motion = speed * np.array([math.sin(heading), math.cos(heading)])  # (dy, dx) per frame
    for cell in range(rng.integers(4, 11)):
        _add_cell(field, rng, storm_motion + rng.normal(0, 0.3, size=2), mature=cell == 0)
    speckle = rng.random(field.shape, dtype=np.float32)
    field *= 0.95 + 0.1 * speckle
    field += np.where(speckle > 0.95, (speckle - 0.95) * 60, 0)
    return np.rint(np.clip(field, 0, 255)).astype(np.uint8)


def _add_cell(
    field: np.ndarray, rng: np.random.Generator, velocity: np.ndarray, mature: bool
) -> None:
    """Draw one cell's life into `field` (time, y, x), keeping the larger value where cells meet.
    A `mature` cell is born before the first frame, so no event starts empty."""
    sigma_major = rng.uniform(8, 18)
    sigma_minor = sigma_major * rng.uniform(0.45, 0.9)
    orientation = rng.uniform(0, math.pi)
    envelope_scale = rng.uniform(2.5, 4)
    core_peak, envelope_peak = rng.uniform(160, 240), rng.uniform(25, 90)
    lifetime = rng.uniform(24, 72)  # frames: 2–6 hours
    birth = rng.uniform(-0.6 * lifetime, -0.1 * lifetime if mature else FRAME_COUNT - 12)
    peak_position = rng.uniform(48, FRAME_SIZE - 48, size=2)

    frames = np.arange(FRAME_COUNT)
    age = np.clip((frames - birth) / lifetime, 0, 1)
    strength = np.sin(math.pi * age) ** 1.5
    alive = np.flatnonzero(strength > 0.01)
    if alive.size == 0:
        return
    centres = peak_position + np.outer(alive - (birth + lifetime / 2), velocity)  # (n, 2)
    whole = np.floor(centres).astype(int)
    half = math.ceil(3 * envelope_scale * sigma_major)
    offsets = np.arange(-half, half + 1, dtype=np.float32)
    dy = offsets[None, :, None] - (centres[:, 0] - whole[:, 0])[:, None, None]
    dx = offsets[None, None, :] - (centres[:, 1] - whole[:, 1])[:, None, None]
    cos, sin = math.cos(orientation), math.sin(orientation)
    r2 = ((dx * cos + dy * sin) / sigma_major) ** 2 + ((dy * cos - dx * sin) / sigma_minor) ** 2
    profile = np.maximum(
        core_peak * np.exp(-r2 / 2), envelope_peak * np.exp(-r2 / (2 * envelope_scale**2))
    )
    blobs = (strength[alive, None, None] * profile).astype(np.float32)
    for blob, frame, (row, column) in zip(blobs, alive, whole, strict=True):
        _paste_max(field[frame], blob, row - half, column - half)


def _paste_max(frame: np.ndarray, blob: np.ndarray, top: int, left: int) -> None:
    """frame[top:, left:] = max(frame, blob) where the blob overlaps the frame."""
    height, width = frame.shape
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + blob.shape[0], height), min(left + blob.shape[1], width)
    if y0 >= y1 or x0 >= x1:
        return
    window = frame[y0:y1, x0:x1]
    np.maximum(window, blob[y0 - top : y1 - top, x0 - left : x1 - left], out=window)


def _file_name(time: pd.Timestamp) -> str:
    """data/-relative file of a time's half-month, e.g. vil/2019/SEVIR_VIL_STORMEVENTS_2019_0616_0630.h5."""
    first_day, last_day = (1, 15) if time.day <= 15 else (16, time.days_in_month)
    span = f"{time.month:02d}{first_day:02d}_{time.month:02d}{last_day:02d}"
    return f"vil/{time.year}/SEVIR_VIL_STORMEVENTS_{time.year}_{span}.h5"


def _event_id(index: int) -> str:
    return f"S{700000 + index}"


def _catalog_row(
    rng: np.random.Generator,
    index: int,
    time: pd.Timestamp,
    place: tuple[str, int],
    frames: np.ndarray,
) -> dict[str, object]:
    """The catalog entry of event `index`, stored at `place` (file name, row): a 384 km box
    centred over the central or eastern US."""
    latitude, longitude = rng.uniform(30, 45), rng.uniform(-102, -80)
    half_km = FRAME_SIZE * PIXEL_METERS / 2000
    half_lat = half_km / KM_PER_DEGREE_LATITUDE
    half_lon = half_lat / math.cos(math.radians(latitude))
    return {
        "id": _event_id(index),
        "file_name": place[0],
        "file_index": place[1],
        "img_type": "vil",
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S"),
        "minute_offsets": ":".join(map(str, MINUTE_OFFSETS)),
        "episode_id": 100000 + index,
        "event_id": 600000 + index,
        "llcrnrlat": round(latitude - half_lat, 4),
        "llcrnrlon": round(longitude - half_lon, 4),
        "urcrnrlat": round(latitude + half_lat, 4),
        "urcrnrlon": round(longitude + half_lon, 4),
        "proj": PROJECTION,
        "size_x": FRAME_SIZE,
        "size_y": FRAME_SIZE,
        "height_m": FRAME_SIZE * PIXEL_METERS,
        "width_m": FRAME_SIZE * PIXEL_METERS,
        "data_min": int(frames.min()),
        "data_max": int(frames.max()),
        "pct_missing": 0.0,
    }
