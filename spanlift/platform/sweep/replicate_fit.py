"""Where a replicate is fitted and scored: in the trial's own process when it fits with one
worker, else on Ray Train workers, and then scored on the sweep's evaluator actors.

Fitted solvers are kept in the fit cache under `<sweep>/fitted/` (results/fit_cache.py), so a
solver on a fitted base finds that base there (fitted with the same seed), a resumed sweep never
fits the same solver twice, and a changed fit is never served old weights.
"""

from pathlib import Path

import torch

from spanlift.backbones import Backbone
from spanlift.platform.configuration import Configuration
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.results.fit_cache import FitCache, FitOne, Fitted
from spanlift.platform.sampling.score import Score, score, score_batch
from spanlift.platform.sampling.teacher import supervision_sigmas
from spanlift.platform.sweep.context import SweepContext
from spanlift.platform.sweep.teacher import read_entry
from spanlift.platform.sweep.train_fit import fit_on_ray_train
from spanlift.platform.sweep.trial_fit import fit_in_trial
from spanlift.solvers import Solver, SolverSpec


def fitted_replicate(
    spec: SolverSpec, result: Configuration, context: SweepContext, backbone: Backbone
) -> Fitted:
    """`spec` as the replicate `result` fits it: from the sweep's fit cache, or fitted into it."""
    cache = FitCache(context.fitted, result, context.reuse_across_versions, context.store)
    return cache.fitted(spec, backbone, fit_one(context, backbone))


def fit_one(context: SweepContext, backbone: Backbone) -> FitOne:
    """How this sweep fits a solver into the fit cache: here, or on Ray Train workers."""

    def fit_here(solver: Solver, out: Path) -> Fitted:
        entries = context.teachers.for_solver(supervision_sigmas(solver))
        train, validation = read_entry(entries.train), read_entry(entries.validation)
        solver = solver.to(context.device)
        store = context.store
        return fit_in_trial(solver, backbone, train, validation, context.config.fit, store, out)

    def fit_on_workers(solver: Solver, out: Path) -> Fitted:
        return fit_on_ray_train(solver, context.config, context.teachers, context.store, out)

    return fit_here if context.config.resources.fits_in_trial else fit_on_workers


def score_fitted(
    fitted: Fitted, context: SweepContext, backbone: Backbone, evaluators: EvaluatorPool
) -> tuple[Score, dict[str, torch.Tensor]]:
    """The fitted solver scored on the test and validation seeds where it was fitted: in this
    process, or on the evaluators (`sampling.score.score`)."""
    teachers = context.teachers
    if not context.config.resources.fits_in_trial:
        return evaluators.call(
            "score", fitted.spec, fitted.path, teachers.test, teachers.validation
        )
    test, validation = read_entry(teachers.test), read_entry(teachers.validation)
    solver = fitted.solver.to(context.device)
    size = score_batch(context.config.evaluation.batch_size, solver, backbone, test, context.device)
    return score(
        solver, backbone, test, device=context.device, validation=validation, batch_size=size
    )
