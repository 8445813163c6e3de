"""fd_dinov2: the Fréchet distance between DINOv2 ViT-L/14 features of the solver's samples (s)
and of a reference set (r), the FD_DINOv2 that EDM2 (Karras et al. 2024) reports beside FID:

    FD_DINOv2 = ‖μ_s − μ_r‖² + tr(Σ_s + Σ_r − 2 (Σ_s Σ_r)^{1/2})        (`frechet.py`)

with μ, Σ the mean and unbiased covariance of f(x) over each set, and f(x) the CLS token after
DINOv2's final layer norm (the torch-hub model's `x_norm_clstoken`, which is Hugging Face
`Dinov2Model`'s `pooler_output`) of each image prepared as NVlabs/edm2's `calculate_metrics.py`
prepares it (its `DINOv2Detector`, resize mode `torch`, the default):

    x ∈ [−1, 1] → u = clip(x · 127.5 + 128, 0, 255), truncated to uint8 (EDM2's pixel decoder;
                  a grayscale image repeated to RGB)
      → bicubic antialiased resize of u, as float32, to 224 × 224 (no clipping after it)
      → u / 255 → (u − ImageNet mean) / ImageNet std

The samples' state is their feature moments, merged over shards as FID's are. The reference is
the evaluation's: the backbone's dataset or teacher samples, whose moments are computed once on
the evaluators and cached under the network's identity (`fid.computed_moments`). Where the
evaluation's reference is a statistics file (FID's Inception statistics), fd_dinov2 needs its own,
the option `fd_dinov2_statistics`: an `.npz` of `mu` and `sigma` of these features (EDM2's
published reference `.pkl` files hold them under `fd_dinov2`); given, it is the reference whatever
the evaluation's.

The weights are read from a local Hugging Face folder only (`fd_dinov2_weights`, by default
facebook/dinov2-large in the Hugging Face cache); nothing is downloaded.

Where it differs from EDM2, deliberately:
- the weights are Hugging Face's copy (facebook/dinov2-large) of the hub's `dinov2_vitl14`, which
  EDM2 fetches with torch.hub at run time. Its position embeddings (37 × 37 patches, for 518-pixel
  images) are interpolated to 16 × 16 as the hub model does it (bicubic with the scale factor
  (16 + 0.1) / 37, `hub_position_embeddings`), not as transformers does (to the size 16 × 16),
  which moves the features: on the small random model of the tests, by 0.035 where they are ≈ 4;
- tr (Σ_s Σ_r)^{1/2} is the sum of the square roots of the eigenvalues of Σ_s Σ_r (torch-fidelity's
  computation, as FID's), where EDM2 takes the trace of `scipy.linalg.sqrtm`: the same number
  (equal to 1e-9 relative on the tests' features);
- EDM2's slower `pil` resize mode (dgm-eval's PIL resize of uint8 images) is not offered.
"""

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.errors import MetricUnavailable, ReferenceStatisticsError
from spanlift.files import file_sha256
from spanlift.platform.detectors.dinov2 import IMAGENET_MEAN, IMAGENET_STD, dinov2_model
from spanlift.platform.detectors.images import to_uint8_rgb
from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    Finished,
    Host,
    Options,
    Row,
    SampleMetric,
    Setup,
    Shards,
    Traits,
)
from spanlift.platform.evaluation.metrics.fid import computed_moments
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.metrics.reference import (
    ReferenceSet,
    image_size,
    read_statistics,
)

NAME = "fd_dinov2"
NETWORK = "dinov2"
MODEL = "facebook/dinov2-large"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INPUT_SIZE = (224, 224)
HUB_OFFSET = 0.1
"""The torch-hub DINOv2's `interpolate_offset`: its scale factor is (n + 0.1) / M."""
VARIANTS = {384: "vits14", 768: "vitb14", 1024: "vitl14", 1536: "vitg14"}
HOW_TO_GET = (
    f"download it once (`hf download {MODEL} --local-dir <folder>`) and give the folder as "
    "fd_dinov2_weights (--fd-dinov2-weights)"
)


def dinov2_folder(path: Path | None) -> Path:
    """The Hugging Face folder of the DINOv2: `path`, else facebook/dinov2-large in the Hugging Face
    cache; MetricUnavailable naming the missing file and how to get it."""
    folder = Path(path).expanduser() if path else cached_folder()
    if folder is None:
        raise MetricUnavailable(
            f"fd_dinov2 unavailable: DINOv2 ViT-L/14 weights ({MODEL}) are not in the Hugging "
            f"Face cache; {HOW_TO_GET}"
        )
    missing = None
    if not (folder / "config.json").is_file():
        missing = folder / "config.json"
    elif not any((folder / name).is_file() for name in WEIGHT_FILES):
        missing = folder / WEIGHT_FILES[0]
    if missing is not None:
        raise MetricUnavailable(
            f"fd_dinov2 unavailable: DINOv2 ViT-L/14 file {missing} not found; {HOW_TO_GET}"
        )
    return folder


def cached_folder() -> Path | None:
    """facebook/dinov2-large's snapshot folder in the Hugging Face cache, without contacting the
    hub; None when it is not there."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(MODEL, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def weights_file(folder: Path) -> Path:
    return next(folder / name for name in WEIGHT_FILES if (folder / name).is_file())


def dinov2_identity(folder: Path) -> str:
    """`dinov2-<variant>:<first 12 hex of the weights' SHA-256>`, e.g. `dinov2-vitl14:3f9a0c1b2d4e`:
    what an fd_dinov2 value was measured with."""
    config = json.loads((folder / "config.json").read_text())
    hidden, patch = config.get("hidden_size"), config.get("patch_size")
    variant = VARIANTS.get(hidden, f"{hidden}d") if patch == 14 else f"{hidden}d-p{patch}"
    weights = weights_file(folder)
    stat = weights.stat()
    return f"dinov2-{variant}:{weights_digest(str(weights), stat.st_size, stat.st_mtime_ns)}"


@functools.lru_cache(maxsize=8)
def weights_digest(path: str, size: int, modified: int) -> str:
    """First 12 hex of the SHA-256 of a weights file, read once per size and modification time."""
    return file_sha256(Path(path))[:12]


def feature_size(folder: Path) -> int:
    return int(json.loads((folder / "config.json").read_text())["hidden_size"])


def edm2_pixels(images: Tensor) -> Tensor:
    """[-1, 1] samples [N, 1 or 3, H, W] → DINOv2's input [N, 3, 224, 224] as EDM2 makes it:
    uint8 pixels, bicubic antialiased resize, / 255, ImageNet normalisation (module docstring)."""
    x = to_uint8_rgb(images).to(torch.float32)
    x = F.interpolate(x, size=INPUT_SIZE, mode="bicubic", antialias=True)
    x = x / 255
    mean = torch.tensor(IMAGENET_MEAN, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def hub_position_embeddings(
    embeddings: torch.nn.Module, tokens: Tensor, height: int, width: int
) -> Tensor:
    """The position embeddings of a height × width input as the torch-hub DINOv2 interpolates
    its M × M table to n_h × n_w patches: bicubic, without antialiasing, with the scale factors
    ((n_h + 0.1) / M, (n_w + 0.1) / M); the table itself for a square input of M × M patches.
    `embeddings` is a Hugging Face `Dinov2Embeddings`, whose method this replaces."""
    table = embeddings.position_embeddings
    positions = table.shape[1] - 1
    patch = embeddings.patch_embeddings.patch_size
    patch_h, patch_w = (patch, patch) if isinstance(patch, int) else patch
    rows, cols = height // patch_h, width // patch_w
    if rows * cols == positions and height == width:
        return table
    side = math.isqrt(positions)
    grid = table[:, 1:].float().reshape(1, side, side, -1).permute(0, 3, 1, 2)
    scale = ((rows + HUB_OFFSET) / side, (cols + HUB_OFFSET) / side)
    grid = F.interpolate(grid, scale_factor=scale, mode="bicubic", antialias=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, rows * cols, -1)
    return torch.cat([table[:, :1].float(), grid], dim=1).to(table.dtype)


class Dinov2Detector(torch.nn.Module):
    """f(x): the CLS features after the final norm of [-1, 1] samples, prepared as EDM2 does."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        embeddings = model.embeddings
        embeddings.interpolate_pos_encoding = functools.partial(hub_position_embeddings, embeddings)
        self.model = model.eval().requires_grad_(False)

    @torch.no_grad()
    def forward(self, images: Tensor) -> Tensor:
        device = next(self.model.parameters()).device
        return self.model(pixel_values=edm2_pixels(images.to(device))).pooler_output

    def features(self, images: Tensor) -> np.ndarray:
        """[N, D] float64 features."""
        return self.forward(images).double().cpu().numpy()


def load_detector(folder: Path) -> Dinov2Detector:
    return Dinov2Detector(dinov2_model(folder, HOW_TO_GET))


@dataclass(frozen=True)
class FdDinov2Options(Options):
    fd_dinov2_weights: Path | None = None
    """Hugging Face folder of DINOv2 ViT-L/14 (facebook/dinov2-large); None: its copy in the
    Hugging Face cache."""
    fd_dinov2_statistics: Path | None = None
    """Reference statistics .npz (mu, sigma) of DINOv2 features; None: the evaluation's reference
    (dataset or teacher; a statistics-file reference needs this)."""


@dataclass(frozen=True)
class Compared:
    """What fd_dinov2 compares with: the reference's moments, by which network, described."""

    moments: FeatureMoments
    reference: str


@METRICS.register(NAME)
class FdDinov2(SampleMetric):
    Options = FdDinov2Options
    rows = (
        Row(
            NAME,
            "min",
            "Fréchet distance of DINOv2 ViT-L/14 features (EDM2's FD_DINOv2)",
            (f"{NAME}.detector", f"{NAME}.reference", "eval.samples"),
        ),
    )

    @classmethod
    def networks(cls, params: Mapping[str, str]) -> frozenset[str]:
        return frozenset({NETWORK})

    def folder(self) -> Path:
        return dinov2_folder(self.options.fd_dinov2_weights)

    def measures(self, setup: Setup, traits: Traits) -> dict[str, Any]:
        """The DINOv2 it measures with; MetricUnavailable without its files."""
        return {f"{NAME}.detector": dinov2_identity(self.folder())}

    def check(self, setup: Setup, reference: ReferenceSet, backbone: Backbone) -> None:
        """A statistics file of its own where the reference is a file; one that fits the network's
        features and the backbone's images."""
        statistics = self.options.fd_dinov2_statistics
        if statistics is None:
            if reference.kind == "file":
                raise ReferenceStatisticsError(
                    f"fd_dinov2: the reference {reference.path.name} holds FID's statistics; give "
                    "fd_dinov2_statistics, an .npz of mu and sigma of DINOv2 features (EDM2's "
                    "reference .pkl files hold them under 'fd_dinov2'), or use reference dataset "
                    "or teacher"
                )
            return
        folder = self.folder()
        read_statistics(statistics).check(
            NETWORK, feature_size(folder), image_size(backbone), dinov2_identity(folder)
        )

    def prepare(self, shards: Shards, reference: ReferenceSet) -> Compared:
        statistics = self.options.fd_dinov2_statistics
        if statistics is not None:
            path = Path(statistics)
            described = f"file {path.name} sha256:{file_sha256(path)[:16]}"
            return Compared(read_statistics(path).moments, described)
        identity = dinov2_identity(self.folder())
        return Compared(computed_moments(shards, reference, identity, NAME), reference.describe())

    def load(self, host: Host) -> Dinov2Detector:
        return load_detector(self.folder()).to(host.device)

    def state(self, batch: Batch, network: Dinov2Detector) -> FeatureMoments:
        return FeatureMoments.of(network.features(batch.samples))

    def image_state(self, network: Dinov2Detector, images: Tensor) -> FeatureMoments:
        return FeatureMoments.of(network.features(images))

    def finish(self, state: FeatureMoments, prepared: Compared, done: Done) -> Finished:
        value = frechet_distance(state, prepared.moments, NAME)
        detector = done.measures.get(f"{NAME}.detector", NETWORK)
        line = (
            f"{NAME} {value:.4f}  ({done.samples} samples against {prepared.reference}; "
            f"detector {detector})"
        )
        return Finished({NAME: value}, {f"{NAME}.reference": prepared.reference}, lines=(line,))
