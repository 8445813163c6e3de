"""One sweep trial: a configuration's replicates fitted, scored on validation and test seeds,
evaluated, recorded in MLflow.

    Tune config → Trial (entry, spec, whether it learns: built once) ─ each fit seed (one for an
    analytic solver) ─ a replicate:
        finished run of this code version in MLflow? ── yes → its metrics
        └─ no → where the sweep fits and scores (`placement`):                 replicate_fit.py
                fit (in this process; on Ray Train workers when `workers` > 1)
                → score on validation and test seeds (errors per test seed kept)
                → evaluate: sample metrics on the evaluator actors, the solver's own  evaluation.py
                → MLflow child run of the sweep's run                                replicate.py
    → the replicates' mean of every metric to Tune; the searcher reads `val_<metric>`

Validation values choose (the searcher, the progress view's best, the leaderboard's configuration
per solver, the fit's kept state); test values are only reported. A fit in the trial's own process
is scored there too; one on Ray Train workers is scored on the sweep's evaluator actors, which also
compute every sample metric. The trial's process, reused by Tune (`reuse_actors`), keeps its
backbone (`loaded_backbone`) and the teacher entries it read. Each trial reports the backbone
loads it caused as `model_loads`.
"""

import math
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import ray
import torch
from ray import tune

from spanlift.backbones.loaded import backbone_loads
from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.platform.configuration import Configuration, code_version
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.context import SweepContext, for_replicate
from spanlift.platform.sweep.evaluation import evaluate_fitted
from spanlift.platform.sweep.replicate import configuration, replicate_files, run_params
from spanlift.platform.sweep.replicate_fit import fitted_replicate, placement
from spanlift.platform.sweep.retries import FAILED_FOR_GOOD
from spanlift.platform.sweep.solver_entry import SolverEntry
from spanlift.platform.sweep.space import decode
from spanlift.platform.tracking.runs import CODE_TAG, PARENT_TAG, ConfigurationRuns, run_name
from spanlift.solvers import SolverSpec

__all__ = ["SweepContext", "Trial", "run_trial", "trial_name", "trial_spec"]

NODE_TAG, HOST_TAG = "spanlift.node_id", "spanlift.host"
SUMMED = ("fit_seconds", "eval_seconds", "model_loads")
"""Metrics a trial reports as the sum over its replicates (the others: their mean)."""


@dataclass(frozen=True)
class Trial:
    """A Tune config as a trial runs it: the sweep entry and solver spec it stands for, and
    whether the solver learns (a fit changes it), as the entry recorded when it was read."""

    entry: SolverEntry
    spec: SolverSpec
    learns: bool

    @classmethod
    def of(cls, params: dict[str, Any], config: SweepConfig) -> "Trial":
        entry, spec = decode(params, config)
        return cls(entry, spec, entry.learns(spec))

    @property
    def name(self) -> str:
        """`dyweight nfe=3`, or with its entry's label `DyWeight (long) nfe=3`."""
        return run_name(self.spec, self.entry.label)

    def seeds(self, config: SweepConfig) -> tuple[int, ...]:
        """The fit seeds of its replicates: the sweep's for a learned solver, the first alone
        for an analytic one (it has nothing to fit)."""
        seeds = config.replicate_seeds(self.entry)
        return seeds if self.learns else seeds[:1]


def trial_spec(params: dict[str, Any], config: SweepConfig) -> SolverSpec:
    """The solver spec a Tune config stands for."""
    return decode(params, config)[1]


def trial_name(params: dict[str, Any], config: SweepConfig) -> str:
    """The name of a Tune config's runs: what the progress view and the summary call it."""
    entry, spec = decode(params, config)
    return run_name(spec, entry.label)


def run_tags(context: SweepContext) -> dict[str, str]:
    """Tags of a configuration's run: the sweep, its parent run, the Tune trial and the Ray node
    and host it ran on, the code."""
    return {
        **context.tags,
        "spanlift.sweep": context.config.experiment,
        "spanlift.trial_id": tune.get_context().get_trial_id() or "",
        NODE_TAG: ray.get_runtime_context().get_node_id(),
        HOST_TAG: socket.gethostname(),
        CODE_TAG: code_version(),
        **({PARENT_TAG: context.parent_run_id} if context.parent_run_id else {}),
    }


class Phases:
    """Wall seconds of a trial's phases, as `phase.<name>_s` metrics (where a trial's time
    goes: `benchmarks/trial_phases.py`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            key = f"phase.{name}_s"
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start


def run_trial(params: dict[str, Any], context: SweepContext) -> None:
    """The Tune function of a sweep: runs the configuration's replicates and reports the mean of
    every metric over them (the searcher reads `val_<metric>`)."""
    trial = Trial.of(params, context.config)
    if context.config.resources.fits_in_trial:
        torch.set_num_threads(context.config.resources.fit_threads)
    phases = Phases()
    try:
        measured = [
            run_replicate(trial, for_replicate(context, trial.entry, seed), phases)
            for seed in trial.seeds(context.config)
        ]
    except (TrainingDivergedError, SettingsError):  # the same settings fail the same way
        tune.report({FAILED_FOR_GOOD: 1.0})  # no retry (`retries.py`)
        raise
    tune.report({**replicate_mean(measured), **phases.seconds})


def replicate_mean(measured: list[dict[str, float]]) -> dict[str, float]:
    """The replicates' mean of each metric they all report (SUMMED ones: their sum), with
    `replicates` and `reused` (1 when every replicate came from MLflow)."""
    shared = set.intersection(*(set(m) for m in measured))
    combined = {
        name: (math.fsum if name in SUMMED else lambda v: math.fsum(v) / len(v))(
            [m[name] for m in measured]
        )
        for name in shared
        if name != "reused"
    }
    reused = all(m.get("reused") for m in measured)
    return {**combined, "replicates": float(len(measured)), "reused": float(reused)}


def run_replicate(trial: Trial, context: SweepContext, phases: Phases) -> dict[str, float]:
    """One replicate (`context`: as `for_replicate` makes it): taken from MLflow when this code
    version finished it, else fitted, scored, evaluated and recorded in its own run; returns its
    metrics."""
    result = configuration(trial.spec, context)
    runs = ConfigurationRuns(context.tracking_uri, context.config.experiment)
    with phases("lookup"):
        earlier = runs.find(result.key(), None if context.reuse_across_versions else code_version())
    if earlier and earlier.status == "FINISHED":
        return {**earlier.metrics, "reused": 1.0}
    if earlier and earlier.failure:  # deterministic: a diverged fit diverges again
        raise TrainingDivergedError(earlier.failure)
    with phases("record"):
        params = run_params(result, context, trial.entry.label)
        run_id = runs.open(result.key(), trial.name, params, run_tags(context))
    with recorded(runs, run_id), tempfile.TemporaryDirectory() as folder:
        measured = measure(trial, result, context, phases, Path(folder))
        with phases("record"):
            runs.finish(run_id, *measured)
    check_searched(measured, trial, context.config)
    return {**measured.metrics, "reused": 0.0}


@contextmanager
def recorded(runs: ConfigurationRuns, run_id: str) -> Iterator[None]:
    """The replicate's run while it is measured: marked failed for good by a fit that diverged
    (a retry reports the same failure without refitting), left to reopen by any other error."""
    try:
        yield
    except TrainingDivergedError as exc:
        runs.fail(run_id, str(exc))
        raise
    except Exception:
        runs.interrupt(run_id)
        raise


class Measured(NamedTuple):
    """What a replicate's run finishes with (`ConfigurationRuns.finish`)."""

    metrics: dict[str, float]
    files: list[Path]
    params: dict[str, Any]  # known only once measured
    histories: dict[str, Any] | None  # the fit's curves


def measure(
    trial: Trial, result: Configuration, context: SweepContext, phases: Phases, folder: Path
) -> Measured:
    """Fit, score and evaluate the replicate, its files written in `folder`."""
    loads = backbone_loads()
    with phases("backbone"):
        backbone = context.backbone()
    evaluators = replace(context.evaluators, loads=0)  # this replicate's loads
    place = placement(context, backbone, evaluators)
    with phases("fit"):
        fitted = fitted_replicate(trial.spec, result, context, backbone, place)
    with phases("score"):
        scored, samples = place.score_solver(fitted)
    with phases("evaluate"):
        evaluated = evaluate_fitted(fitted, context.plan.evaluation, backbone, evaluators, folder)
    loads = backbone_loads() - loads + evaluators.loads
    metrics = {
        **scored.metrics(),
        "eval_seconds": phases.seconds["phase.score_s"],
        **fitted.metrics(),
        **evaluated.metrics,
        "model_loads": float(loads),
        **phases.seconds,
    }
    with phases("record"):
        files = [*replicate_files(fitted, scored, samples, context, folder), *evaluated.files]
    return Measured(metrics, files, {**evaluated.params, **fitted.params()}, fitted.histories())


def check_searched(measured: Measured, trial: Trial, config: SweepConfig) -> None:
    """Refuse a replicate that produced no value of the metric the sweep searches on."""
    if config.search_metric not in measured.metrics:
        reason = measured.params.get(f"{config.metric}.unavailable", "it was not computed")
        raise SettingsError(
            f"{trial.spec.label()} nfe={trial.spec.nfe} produced no {config.metric!r} to search "
            f"on: {reason}"
        )
