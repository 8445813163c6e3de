"""fid: the Fréchet distance between detector features of the solver's samples (s) and of a
reference set (r):

    FID = ‖μ_s − μ_r‖² + tr(Σ_s + Σ_r − 2 (Σ_s Σ_r)^{1/2})        (`frechet.py`)

The samples' state is their feature moments, merged over shards. The reference is the backbone's
dataset, teacher samples from seeds disjoint from the evaluated ones, or a statistics file
(NVlabs' published ones make the FID comparable with their papers' tables); dataset and teacher
statistics are computed once on the evaluators and cached (`reference.py`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.loaded import loaded_backbone
from spanlift.errors import SettingsError
from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    Finished,
    Host,
    Row,
    SampleMetric,
    Setup,
    Shards,
)
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.metrics.reference import (
    ReferenceSet,
    image_size,
    load_reference,
    read_statistics,
    reference_path,
    save_reference,
)

NAME = "fid"


@dataclass(frozen=True)
class FidResult:
    fid: float
    samples: int
    detector: str  # identity: name and weights hash
    reference: str  # ReferenceSet.describe()

    def metrics(self) -> dict[str, float]:
        return {NAME: self.fid}

    def params(self) -> dict[str, Any]:
        return {f"{NAME}.detector": self.detector, f"{NAME}.reference": self.reference}

    def line(self) -> str:
        return (
            f"{NAME} {self.fid:.4f}  ({self.samples} samples against {self.reference}; "
            f"detector {self.detector})"
        )


@dataclass(frozen=True)
class Compared:
    """What an FID compares with: the reference's moments, by which detector, described."""

    moments: FeatureMoments
    detector: str
    reference: str


@METRICS.register(NAME)
class Fid(SampleMetric):
    default = True
    rows = (
        Row(
            NAME,
            "min",
            "Fréchet distance of detector features",
            (f"{NAME}.detector", f"{NAME}.reference", f"{NAME}.samples"),
        ),
    )

    @classmethod
    def networks(cls, params: Mapping[str, str]) -> frozenset[str]:
        """The detector it was measured with, by name: `fid.detector` is `<name>:<hash>`."""
        name = params.get(f"{NAME}.detector", "").split(":")[0]
        return frozenset({name} if name else ())

    def check(self, setup: Setup, reference: ReferenceSet, backbone: Backbone) -> None:
        """A statistics file must fit the detector's features and the backbone's images."""
        if reference.kind == "file":
            file_moments(reference.path, setup, backbone)

    def prepare(self, shards: Shards, reference: ReferenceSet) -> Compared:
        detector = shards.call("identity")
        moments = reference_moments(shards, reference, detector)
        return Compared(moments, detector, reference.describe())

    def load(self, host: Host) -> Any:
        return host.detector

    def state(self, batch: Batch, network: Any) -> FeatureMoments:
        return FeatureMoments.of(network.features(batch.samples))

    def image_state(self, network: Any, images: Tensor) -> FeatureMoments:
        return FeatureMoments.of(network.features(images))

    def finish(self, state: FeatureMoments, prepared: Compared, done: Done) -> Finished:
        fid = frechet_distance(state, prepared.moments)
        result = FidResult(fid, done.samples, prepared.detector, prepared.reference)
        return Finished(result.metrics(), result.params(), lines=(result.line(),))


def reference_moments(shards: Shards, reference: ReferenceSet, detector: str) -> FeatureMoments:
    """Load the reference statistics, or compute them on the evaluators and cache them."""
    setup = shards.setup
    if reference.kind == "file":
        backbone = loaded_backbone(setup.backbone, setup.backbone_options)
        return file_moments(reference.path, setup, backbone, detector)
    return computed_moments(shards, reference, detector, NAME)


def computed_moments(
    shards: Shards, reference: ReferenceSet, identity: str, metric: str
) -> FeatureMoments:
    """The feature moments of `metric` (whose network is `identity`) of the backbone's dataset or
    of teacher samples: read from the cache, or computed on the evaluators and cached."""
    setup = shards.setup
    backbone = loaded_backbone(setup.backbone, setup.backbone_options)
    path = reference_path(setup.cache_dir, identity, backbone.identity(), reference)
    if path.is_file():
        return load_reference(path, identity)
    if reference.kind == "dataset":
        images = backbone.reference_images()
        if images is None:
            raise SettingsError(
                f"reference: backbone {setup.backbone!r} ships no dataset; give the statistics of "
                "one (--reference <file.npz>, e.g. NVlabs' cifar10-32x32.npz) or use reference "
                "teacher"
            )
        moments = shards.image_states(images, (metric,), "reference: dataset")[metric]
    else:
        seeds, desc = reference.seeds(), "reference: teacher"
        moments = shards.solver_states(reference.teacher, None, seeds, (metric,), desc)[metric]
    save_reference(path, moments, identity)
    return moments


def file_moments(
    path: Path, setup: Setup, backbone: Backbone, identity: str | None = None
) -> FeatureMoments:
    """The moments in statistics file `path`, refused unless they fit the evaluation: the feature
    size of its detector, the backbone's image size and, given, the detector's `identity`."""
    from spanlift.platform.detectors.registry import feature_size  # torch-fidelity: on demand

    detector = setup.detector or backbone.fid_detector
    statistics = read_statistics(path)
    statistics.check(detector, feature_size(detector), image_size(backbone), identity)
    return statistics.moments
