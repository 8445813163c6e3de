"""Reference statistics for FID: the feature moments of the dataset or of teacher samples, cached,
or given as a statistics file.

A file `reference-<key>.npz` holds count, sum and sum of outer products plus the identity of the
detector that produced them; `key` hashes the detector identity, the backbone identity and the
reference set, so statistics are computed once and reused across sweeps. Loading a file made by
another detector is refused.

A reference of kind `file` reads its moments from an `.npz` the user names: NVlabs EDM's published
statistics (`mu` [D], `sigma` [D, D], unbiased: (Σ f fᵀ − N μμᵀ) / (N − 1), as `fid.py` computes
them; e.g. `cifar10-32x32.npz`), or one of spanlift's own cached files. With the Inception detector,
an FID against NVlabs' file is the number their papers report for the same samples. A file must
match the detector's feature size and, where its name (`<H>x<W>`) or a `resolution` entry states
one, the size of the backbone's images.
"""

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from spanlift.backbones import Backbone
from spanlift.errors import CacheError, ReferenceStatisticsError
from spanlift.files import atomic_write, file_sha256
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
from spanlift.seeds import REFERENCE_FIRST_SEED
from spanlift.solvers import SolverSpec

KINDS = ("dataset", "teacher", "file")
NVLABS_STATISTICS = "https://nvlabs-fi-cdn.nvidia.com/edm/fid-refs/"
PUBLISHED_COUNT = 50_000
"""N taken for a file of μ and Σ alone (NVlabs' do not state theirs): EDM's protocol size. N
changes neither μ nor Σ, hence not the FID; it only feeds the few-samples warning."""


@dataclass(frozen=True)
class ReferenceSet:
    """`dataset`: the backbone's training images; `teacher`: `samples` teacher samples;
    `file`: the statistics in the `.npz` at `path`."""

    kind: str = "dataset"
    samples: int = 10_000
    teacher: SolverSpec = DEFAULT_TEACHER
    path: Path | None = None

    @classmethod
    def from_setting(
        cls, value: str, samples: int = 10_000, teacher: SolverSpec = DEFAULT_TEACHER
    ) -> "ReferenceSet":
        """`dataset` or `teacher` by keyword; any other value is the path of a statistics file."""
        if value in ("dataset", "teacher"):
            return cls(value, samples, teacher)
        return cls("file", samples, teacher, Path(value).expanduser().resolve())

    @cached_property
    def digest(self) -> str:
        """First 16 hex of the statistics file's SHA-256 (kind `file`)."""
        return file_sha256(self.path)[:16]

    def describe(self) -> str:
        """What FIDs are measured against; FIDs with different descriptions do not compare."""
        if self.kind == "dataset":
            return "dataset"
        if self.kind == "file":
            return f"file {self.path.name} sha256:{self.digest}"
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


@dataclass(frozen=True)
class StatisticsFile:
    """The content of a reference-statistics `.npz` and what it says about how it was made."""

    path: Path
    moments: FeatureMoments
    detector: str | None  # the detector identity, when the file names it (spanlift's do)
    resolutions: dict[str, tuple[int, int]]  # where a resolution is stated → (H, W)

    def check(
        self, detector: str, features: int, image: tuple[int, int], identity: str | None = None
    ) -> None:
        """Refuse statistics of another feature size than `features` (detector `detector`'s), of
        images other than `image` (H, W), or, when the file names its detector and `identity` is
        given, of another detector."""
        if self.moments.dim != features:
            raise ReferenceStatisticsError(
                f"FID reference {self.path} holds {self.moments.dim}-d features; detector "
                f"{detector} gives {features}-d features (NVlabs' files are for inception)"
            )
        for where, (height, width) in self.resolutions.items():
            if (height, width) != tuple(image):
                raise ReferenceStatisticsError(
                    f"FID reference {self.path} is for {height}x{width} images ({where}); the "
                    f"backbone makes {image[0]}x{image[1]} images"
                )
        if identity is not None and self.detector not in (None, identity):
            raise ReferenceStatisticsError(
                f"FID reference {self.path} was computed with detector {self.detector}; this "
                f"evaluation uses {identity}"
            )


def read_statistics(path: Path) -> StatisticsFile:
    """A statistics `.npz`: NVlabs' (`mu`, `sigma`; N taken as PUBLISHED_COUNT) or spanlift's
    (`count`, `total`, `outer`, `detector`); an optional `resolution` (H or (H, W)) beside them."""
    path = Path(path)
    if not path.is_file():
        raise ReferenceStatisticsError(
            f"FID reference {path} not found (a reference is dataset, teacher or a statistics "
            f".npz; NVlabs publishes theirs, e.g. cifar10-32x32.npz, at {NVLABS_STATISTICS})"
        )
    arrays = npz_arrays(path)
    return StatisticsFile(
        path, moments_of(arrays, path), named_detector(arrays), stated_resolutions(arrays, path)
    )


def npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array in the `.npz` (a zip archive of `.npy` files) at `path`; no pickled objects."""
    if not zipfile.is_zipfile(path):
        raise ReferenceStatisticsError(
            f"FID reference {path}: not an .npz file (not a zip archive)"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ReferenceStatisticsError(f"FID reference {path}: not an .npz file ({exc})") from None


def moments_of(arrays: dict[str, np.ndarray], path: Path) -> FeatureMoments:
    """Feature moments from the arrays of either form (see `read_statistics`)."""
    if {"count", "total", "outer"} <= arrays.keys():
        total, outer = vector_and_matrix(arrays, "total", "outer", path)
        return FeatureMoments(int(arrays["count"]), total, outer)
    if {"mu", "sigma"} <= arrays.keys():
        mu, sigma = vector_and_matrix(arrays, "mu", "sigma", path)
        return FeatureMoments.from_statistics(mu, sigma, PUBLISHED_COUNT)
    raise ReferenceStatisticsError(
        f"FID reference {path}: expected arrays mu and sigma (NVlabs) or count, total and outer "
        f"(spanlift), found {', '.join(sorted(arrays)) or 'none'}"
    )


def vector_and_matrix(
    arrays: dict[str, np.ndarray], vector: str, matrix: str, path: Path
) -> tuple[np.ndarray, np.ndarray]:
    """`arrays[vector]` of shape (D,) and `arrays[matrix]` of shape (D, D), as float64."""
    first, second = arrays[vector], arrays[matrix]
    dim = first.shape[0] if first.ndim == 1 else -1
    if second.shape != (dim, dim):
        raise ReferenceStatisticsError(
            f"FID reference {path}: {vector} of shape {first.shape} and {matrix} of shape "
            f"{second.shape}; expected (D,) and (D, D)"
        )
    return first.astype(np.float64), second.astype(np.float64)


def named_detector(arrays: dict[str, np.ndarray]) -> str | None:
    return str(arrays["detector"]) if "detector" in arrays else None


def stated_resolutions(arrays: dict[str, np.ndarray], path: Path) -> dict[str, tuple[int, int]]:
    """(H, W) as the file states it: `<H>x<W>` in its name (NVlabs': `cifar10-32x32.npz`), a
    `resolution` entry (H for square images, or (H, W))."""
    stated = {}
    sizes = re.findall(r"(?<![0-9])([0-9]+)x([0-9]+)(?![0-9])", path.name)
    if sizes:
        stated["by its name"] = (int(sizes[-1][0]), int(sizes[-1][1]))
    if "resolution" in arrays:
        entry = np.atleast_1d(arrays["resolution"]).astype(int).tolist()
        if len(entry) not in (1, 2):
            raise ReferenceStatisticsError(
                f"FID reference {path}: resolution {entry}; expected H or (H, W)"
            )
        stated["by its resolution entry"] = (entry[0], entry[-1])
    return stated


@torch.no_grad()
def image_size(backbone: Backbone) -> tuple[int, int]:
    """(H, W) of the images a backbone's samples become: the shape of one decoded sample (`decode`
    is the identity for pixel backbones, so that is `shape[-2:]`; a VAE decoder for latents)."""
    tensors = [*backbone.parameters(), *backbone.buffers()]
    device = tensors[0].device if tensors else torch.device("cpu")
    decoded = backbone.decode(torch.zeros(1, *backbone.shape, device=device))
    return int(decoded.shape[-2]), int(decoded.shape[-1])
