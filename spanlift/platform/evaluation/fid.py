"""FID's reference statistics (cached) and result; `sample_metrics.py` computes the solver's side.

    FID = ‖μ_s − μ_r‖² + tr(Σ_s + Σ_r − 2 (Σ_s Σ_r)^{1/2})

over detector features of the solver's samples (s) and of the reference set (r): the backbone's
dataset, teacher samples from seeds disjoint from the evaluated ones, or a statistics file
(NVlabs' published ones make the FID comparable with their papers' tables).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanlift.backbones import Backbone
from spanlift.backbones.loaded import loaded_backbone
from spanlift.errors import SettingsError
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.frechet import FeatureMoments
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.evaluation.reference import (
    ReferenceSet,
    image_size,
    load_reference,
    read_statistics,
    reference_path,
    save_reference,
)


@dataclass(frozen=True)
class FidResult:
    fid: float
    samples: int
    detector: str  # identity: name and weights hash
    reference: str  # ReferenceSet.describe()

    def metrics(self) -> dict[str, float]:
        return {"fid": self.fid}

    def params(self) -> dict[str, Any]:
        return {"fid.detector": self.detector, "fid.reference": self.reference}


def reference_moments(
    pool: EvaluatorPool, reference: ReferenceSet, detector: str
) -> FeatureMoments:
    """Load the reference statistics, or compute them on the pool's evaluators and cache them."""
    setup = pool.setup
    backbone = loaded_backbone(setup.backbone, setup.backbone_options)
    if reference.kind == "file":
        return file_moments(reference.path, setup, backbone, detector)
    path = reference_path(setup.cache_dir, detector, backbone.identity(), reference)
    if path.is_file():
        return load_reference(path, detector)
    if reference.kind == "dataset":
        images = backbone.reference_images()
        if images is None:
            raise SettingsError(
                f"reference: backbone {setup.backbone!r} ships no dataset; give the statistics of "
                "one (--reference <file.npz>, e.g. NVlabs' cifar10-32x32.npz) or use reference "
                "teacher"
            )
        moments = pool.image_moments(images, "reference: dataset")["fid"]
    else:
        seeds, desc = reference.seeds(), "reference: teacher"
        moments = pool.solver_states(reference.teacher, None, seeds, ("fid",), desc)["fid"]
    save_reference(path, moments, detector)
    return moments


def file_moments(
    path: Path, setup: EvaluatorSetup, backbone: Backbone, identity: str | None = None
) -> FeatureMoments:
    """The moments in statistics file `path`, refused unless they fit the evaluation: the feature
    size of its detector, the backbone's image size and, given, the detector's `identity`."""
    from spanlift.platform.detectors.registry import feature_size  # torch-fidelity: on demand

    detector = setup.detector or backbone.fid_detector
    statistics = read_statistics(path)
    statistics.check(detector, feature_size(detector), image_size(backbone), identity)
    return statistics.moments
