"""What every trial of a sweep shares, and how one replicate sees it."""

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from spanlift.backbones import Backbone
from spanlift.backbones.loaded import loaded_backbone
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.results.tracking import seed_params
from spanlift.platform.storage import Storage, open_storage
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.evaluation import (
    EvaluationPlan,
    evaluation_params,
    evaluation_settings,
)
from spanlift.platform.sweep.solver_entry import SolverEntry
from spanlift.platform.sweep.teacher import SweepTeachers, sweep_seeds


@dataclass(frozen=True)
class SweepPlan:
    """What every replicate of a sweep shares whatever its solver and fit, worked out once per
    sweep: its seeds by role, the params every run records (seeds, selection, evaluation), the
    evaluation's part of every run key, the evaluation as a replicate runs it."""

    seeds: dict[str, range]
    params: dict[str, Any]
    evaluation_key: dict[str, Any]  # `evaluation_settings`
    evaluation: EvaluationPlan

    @classmethod
    def of(cls, config: SweepConfig) -> "SweepPlan":
        seeds = sweep_seeds(config)
        params = {
            **seed_params(seeds),
            "selection.metric": config.search_metric,
            "fit.use_gpu": config.resources.use_gpu,
            **evaluation_params(config),
        }
        evaluation = EvaluationPlan.of(config)  # its reference's digest: read once, kept
        return cls(seeds, params, evaluation_settings(config, evaluation.reference), evaluation)


@dataclass(frozen=True)
class SweepContext:
    """What every trial of a sweep shares: its config, storage (`root`: its folder on this node),
    teacher sets, tracking store, the sweep's parent MLflow run and whether results of other code
    versions may be reused."""

    config: SweepConfig
    root: Path
    teachers: SweepTeachers
    tracking_uri: str
    parent_run_id: str = ""
    reuse_across_versions: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    evaluators: EvaluatorPool | None = None  # the sweep's evaluator actors, once started
    storage: Storage | None = None  # None: the folder `root`
    plan: SweepPlan | None = None  # None: worked out from `config` as the context is made

    def __post_init__(self) -> None:
        if self.plan is None:  # a `replace`d context keeps its plan: no fit setting enters it
            object.__setattr__(self, "plan", SweepPlan.of(self.config))

    @property
    def store(self) -> Storage:
        """The sweep's storage: a bucket mirrored at `root`, or the folder `root` itself."""
        return self.storage or open_storage(str(self.root))

    @property
    def fitted(self) -> Path:
        return self.root / "fitted"

    @property
    def device(self) -> torch.device:
        """Where this trial's process computes: its GPU when it holds one, else the CPU."""
        holds_gpu = self.config.resources.use_gpu and self.config.resources.fits_in_trial
        return torch.device("cuda" if holds_gpu and torch.cuda.is_available() else "cpu")

    def backbone(self) -> Backbone:
        """The sweep's backbone as loaded in this process, on its device."""
        return loaded_backbone(self.config.backbone, self.config.backbone_options).to(self.device)


def for_replicate(context: SweepContext, entry: SolverEntry, seed: int) -> SweepContext:
    """The context as one replicate sees it: the sweep's fit with the entry's own on top, and the
    replicate's fit seed."""
    fit = replace(context.config.fit_of(entry), seed=seed)
    return replace(context, config=replace(context.config, fit=fit))
