"""One evaluator: a backbone and a detector loaded once, turning seed shards into FID moments.

A plain class so it runs in-process as well as as a Ray actor (`pool.py` wraps it). Samples of a
shard are generated from the seeds' own noise (`seed_noise`), so a seed gives the same sample
whichever actor draws it, and merged moments do not depend on how seeds were split.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones import load_backbone
from spanlift.platform.compare import load_solver
from spanlift.platform.evaluation.detectors import load_detector
from spanlift.platform.evaluation.frechet import FeatureMoments, merge_all
from spanlift.platform.fit import rollout
from spanlift.platform.teacher import seed_noise
from spanlift.solvers import SolverSpec


@dataclass(frozen=True)
class EvaluatorSetup:
    """What every evaluator of one evaluation loads: backbone, detector, cache, CPU threads."""

    backbone: str
    detector: str
    cache_dir: Path
    backbone_options: dict[str, Any] = field(default_factory=dict)
    detector_weights: Path | None = None
    threads: int | None = None
    batch_size: int = 256


class Evaluator:
    def __init__(self, setup: EvaluatorSetup) -> None:
        if setup.threads:
            torch.set_num_threads(setup.threads)
        self.setup = setup
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.backbone = load_backbone(setup.backbone, **setup.backbone_options).to(self.device)
        detector = load_detector(setup.detector, setup.cache_dir, setup.detector_weights)
        self.detector = detector.to(self.device)

    def identity(self) -> str:
        return self.detector.identity

    @torch.no_grad()
    def solver_moments(
        self, spec: SolverSpec, checkpoint: Path | None, seeds: Sequence[int]
    ) -> FeatureMoments:
        """Feature moments of the solver's samples from `seeds`."""
        solver = load_solver(spec, checkpoint, self.backbone).to(self.device)
        parts = []
        for start in range(0, len(seeds), self.setup.batch_size):
            batch = seeds[start : start + self.setup.batch_size]
            noise = seed_noise(batch, self.backbone.shape).to(self.device)
            samples = self.backbone.decode(rollout(solver, self.backbone, noise))
            parts.append(FeatureMoments.of(self.detector.features(samples)))
        return merge_all(parts)

    @torch.no_grad()
    def image_moments(self, images: Tensor) -> FeatureMoments:
        """Feature moments of given [-1, 1] images (a dataset shard)."""
        parts = [
            FeatureMoments.of(self.detector.features(batch.to(self.device)))
            for batch in images.split(self.setup.batch_size)
        ]
        return merge_all(parts)
