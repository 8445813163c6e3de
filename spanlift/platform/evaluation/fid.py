"""FID of a solver on evaluator actors: reference statistics (cached), solver moments, distance.

    FID = ‖μ_s − μ_r‖² + tr(Σ_s + Σ_r − 2 (Σ_s Σ_r)^{1/2})

over detector features of the solver's samples (s) and of the reference set (r): the backbone's
dataset, or teacher samples from seeds disjoint from the evaluated ones.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.evaluation import pool
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.reference import (
    FID_FIRST_SEED,
    ReferenceSet,
    load_reference,
    reference_path,
    save_reference,
)
from spanlift.solvers import SolverSpec


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
    actors: list, setup: EvaluatorSetup, reference: ReferenceSet, detector: str
) -> FeatureMoments:
    """Load the reference statistics, or compute them on the actors and cache them."""
    backbone = load_backbone(setup.backbone, **setup.backbone_options)
    path = reference_path(setup.cache_dir, detector, backbone.identity(), reference)
    if path.is_file():
        return load_reference(path, detector)
    if reference.kind == "dataset":
        images = backbone.reference_images()
        if images is None:
            raise SettingsError(
                f"reference: backbone {setup.backbone!r} ships no dataset; use reference teacher"
            )
        moments = pool.image_moments(actors, images, "reference: dataset")
    else:
        seeds = reference.seeds()
        moments = pool.solver_moments(actors, reference.teacher, None, seeds, "reference: teacher")
    save_reference(path, moments, detector)
    return moments


def evaluate_fid(
    actors: list,
    setup: EvaluatorSetup,
    spec: SolverSpec,
    checkpoint: Path | None,
    samples: int,
    reference: ReferenceSet,
) -> FidResult:
    """FID of `samples` samples of the solver (seeds from FID_FIRST_SEED) against the reference."""

    detector = ray.get(actors[0].identity.remote())
    ref = reference_moments(actors, setup, reference, detector)
    label = f"{spec.label()} nfe={spec.nfe}"
    seeds = list(range(FID_FIRST_SEED, FID_FIRST_SEED + samples))
    moments = pool.solver_moments(actors, spec, checkpoint, seeds, label)
    return FidResult(frechet_distance(moments, ref), samples, detector, reference.describe())
