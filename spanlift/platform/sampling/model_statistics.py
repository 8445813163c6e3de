"""Model statistics (DPM-Solver-v3's EMS) cached beside the teacher entry whose samples they use.

The samples are the teacher's endpoints of the training seeds: the backbone's own samples. An
entry is a folder `ems-<key>/` next to that teacher entry, written and verified as teacher
entries are (`teacher.py`: one uncompressed Arrow IPC record batch, a manifest with its SHA-256,
written to a temporary folder and renamed):

    ems.arrow       one row per λ node: `lambda` float64, then `l`, `s`, `b`, each a
                    FixedSizeList of float64 (one sample's shape, flattened)
    manifest.json   {"format", "layout", "key", "count", "shape", "files", "request", "seeds",
                     "teacher", "backbone", "seconds" (what the estimate cost)}

The key hashes the backbone's identity, the teacher spec, the seeds whose endpoints were used and
the request (timesteps, samples, noise seed): equal keys, equal statistics, so every trial of a
sweep (every NFE) reads the one entry. The estimate's model evaluations are the statistics' cost,
recorded in the manifest, never part of a solver's NFE.
"""

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import CacheError
from spanlift.files import file_sha256
from spanlift.platform.sampling.teacher import (
    LAYOUT,
    TeacherSet,
    atomic_folder,
    mapped_columns,
    read_manifest,
    verify_files,
    write_entry_file,
)
from spanlift.solvers.model_statistics import ModelStatistics, estimate_statistics

FORMAT = "spanlift-ems/1"
ENTRY_FILE = "ems.arrow"


def statistics_key(backbone: Backbone, teacher: TeacherSet, request: dict[str, Any]) -> str:
    """The content hash of the statistics of `request` on the first `samples` rows of `teacher`."""
    seeds = teacher.seeds[: request["samples"]].numpy().astype(np.int64)
    content = {
        "format": FORMAT,
        "backbone": backbone.identity(),
        "teacher": teacher.teacher.to_dict(),
        "seeds": hashlib.sha256(seeds.tobytes()).hexdigest(),
        "request": request,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:24]


def model_statistics(
    backbone: Backbone, teacher: TeacherSet, request: dict[str, Any]
) -> ModelStatistics:
    """The statistics of `request` from the teacher's endpoints: read from the entry beside the
    teacher's cache entry, or estimated (and written there when the teacher came from a cache)."""
    folder = None
    if teacher.folder is not None:
        key = statistics_key(backbone, teacher, request)
        folder = teacher.folder.parent / f"ems-{key}"
        if folder.exists():
            return read_statistics(folder)
    start = time.perf_counter()
    samples = teacher.endpoints[: request["samples"]].to(backbone.device)
    stats = estimate_statistics(
        conditioned(backbone, None),
        samples,
        backbone.sigma_min,
        backbone.sigma_max,
        request["timesteps"],
        request["seed"],
        backbone.sampling_batch(),
    )
    if folder is not None:
        metadata = {
            "request": request,
            "samples_used": len(samples),
            "teacher": teacher.teacher.to_dict(),
            "backbone": backbone.identity(),
            "seconds": time.perf_counter() - start,
        }
        write_statistics(folder, stats, key, metadata)
    return stats


def write_statistics(folder: Path, stats: ModelStatistics, key: str, metadata: dict) -> Path:
    """`stats` as `ems.arrow` + `manifest.json` (module docstring), atomically."""

    def column(t: torch.Tensor) -> pa.Array:
        flat = np.ascontiguousarray(t.reshape(len(t), -1).cpu().numpy(), dtype=np.float64)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])

    batch = pa.record_batch(
        {
            "lambda": pa.array(stats.lam.cpu().numpy()),
            **{n: column(getattr(stats, n)) for n in "lsb"},
        }
    )
    with atomic_folder(folder) as tmp:
        write_entry_file(tmp / ENTRY_FILE, batch)
        manifest = {
            "format": FORMAT,
            "layout": LAYOUT,
            "key": key,
            "count": len(stats.lam),
            "shape": list(stats.l.shape[1:]),
            "shapes": {},
            "files": {ENTRY_FILE: file_sha256(tmp / ENTRY_FILE)},
        }
        (tmp / "manifest.json").write_text(json.dumps({**manifest, **metadata}, indent=2))
    return folder


def read_statistics(folder: Path) -> ModelStatistics:
    """An entry's statistics, its file's SHA-256 verified first."""
    manifest = read_manifest(folder)
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{folder} is not a model-statistics entry ({FORMAT}); delete the folder")
    verify_files(folder, manifest["files"])
    columns = mapped_columns(folder / ENTRY_FILE)
    shape = manifest["shape"]
    lam = torch.from_numpy(columns["lambda"].copy())
    rows = {n: torch.from_numpy(columns[n].copy()).reshape(len(lam), *shape) for n in "lsb"}
    return ModelStatistics(lam, rows["l"], rows["s"], rows["b"])
