"""Where a replicate is fitted and scored: in the trial's own process when it fits with one
worker (`trial_fit.InTrialProcess`), else on Ray Train workers and then on the sweep's evaluator
actors (`train_fit.OnRayTrain`). The sweep's resources choose one, once per replicate.

Fitted solvers are kept in the fit cache under `<sweep>/fitted/` (results/fit_cache.py), so a
solver on a fitted base finds that base there (fitted with the same seed), a resumed sweep never
fits the same solver twice, and a changed fit is never served old weights.
"""

from pathlib import Path
from typing import Protocol

import torch

from spanlift.backbones import Backbone
from spanlift.platform.configuration import Configuration
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.results.fit_cache import FitCache, Fitted
from spanlift.platform.sampling.score import Score
from spanlift.platform.sweep.context import SweepContext
from spanlift.platform.sweep.train_fit import OnRayTrain
from spanlift.platform.sweep.trial_fit import InTrialProcess
from spanlift.solvers import Solver, SolverSpec


class Placement(Protocol):
    """Where a replicate's solver is fitted and scored."""

    def fit_solver(self, solver: Solver, out: Path) -> Fitted:
        """A freshly built learnable solver fitted and saved at `out`."""

    def score_solver(self, fitted: Fitted) -> tuple[Score, dict[str, torch.Tensor]]:
        """Its errors on the test seeds, RMSE on the validation seeds, latency and sample
        images (`sampling.score.score`)."""


def placement(context: SweepContext, backbone: Backbone, evaluators: EvaluatorPool) -> Placement:
    """Here, when the sweep fits with one worker; else on Ray Train and the evaluators."""
    if context.config.resources.fits_in_trial:
        return InTrialProcess(
            context.config, context.teachers, context.store, backbone, context.device
        )
    return OnRayTrain(context.config, context.teachers, context.store, evaluators)


def fitted_replicate(
    spec: SolverSpec,
    result: Configuration,
    context: SweepContext,
    backbone: Backbone,
    place: Placement,
) -> Fitted:
    """`spec` as the replicate `result` fits it: from the sweep's fit cache, or fitted into it
    where `place` fits."""
    cache = FitCache(context.fitted, result, context.reuse_across_versions, context.store)
    return cache.fitted(spec, backbone, place.fit_solver)
