"""Reference statistics for FID: the feature moments of the dataset or of teacher samples, cached.

A file `reference-<key>.npz` holds count, sum and sum of outer products plus the identity of the
detector that produced them; `key` hashes the detector identity, the backbone identity and the
reference set, so statistics are computed once and reused across sweeps. Loading a file made by
another detector is refused.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spanlift.errors import CacheError
from spanlift.files import atomic_write
from spanlift.platform.evaluation.frechet import FeatureMoments
from spanlift.platform.fitting.teacher import DEFAULT_TEACHER
from spanlift.seeds import REFERENCE_FIRST_SEED
from spanlift.solvers import SolverSpec


@dataclass(frozen=True)
class ReferenceSet:
    """`dataset`: the backbone's training images; `teacher`: `samples` teacher samples."""

    kind: str = "dataset"
    samples: int = 10_000
    teacher: SolverSpec = DEFAULT_TEACHER

    def describe(self) -> str:
        if self.kind == "dataset":
            return "dataset"
        return f"teacher {self.teacher.label()} nfe={self.teacher.nfe} x{self.samples}"

    def seeds(self) -> list[int]:
        return list(range(REFERENCE_FIRST_SEED, REFERENCE_FIRST_SEED + self.samples))


def reference_path(cache_dir: Path, detector: str, backbone: str, reference: ReferenceSet) -> Path:
    content = json.dumps(
        {"detector": detector, "backbone": backbone, "reference": reference.describe()},
        sort_keys=True,
    )
    return Path(cache_dir) / f"reference-{hashlib.sha256(content.encode()).hexdigest()[:24]}.npz"


def save_reference(path: Path, moments: FeatureMoments, detector: str) -> Path:
    """Write atomically: a crash never leaves a half-written statistics file."""
    with atomic_write(path) as partial:
        np.savez(
            partial,
            count=moments.count,
            total=moments.total,
            outer=moments.outer,
            detector=np.array(detector),
        )
    return path


def load_reference(path: Path, detector: str) -> FeatureMoments:
    """Moments from a statistics file, refused unless made by `detector` (its identity)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            made_by = str(data["detector"])
            moments = FeatureMoments(int(data["count"]), data["total"], data["outer"])
    except (OSError, KeyError, ValueError) as exc:
        raise CacheError(
            f"reference statistics {path} are unreadable ({exc}); delete the file"
        ) from None
    if made_by != detector:
        raise CacheError(
            f"reference statistics {path} were computed with detector {made_by}, "
            f"this evaluation uses {detector}; FIDs from different detectors do not compare"
        )
    return moments
