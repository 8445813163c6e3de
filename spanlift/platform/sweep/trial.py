"""One sweep trial: a configuration's replicates fitted, scored on validation and test seeds,
recorded in MLflow.

    configuration ─ each fit seed (one for an analytic solver) ─ a replicate:
        finished run of this code version in MLflow? ── yes → its metrics
        └─ no → fit (in this process; on Ray Train workers when `workers` > 1)
                → score on validation and test seeds (errors per test seed kept)
                → sample metrics (evaluator actors) → MLflow child run of the sweep's run
    → the replicates' mean of every metric to Tune; the searcher reads `val_<metric>`

Validation values choose (the searcher, the progress view's best, the leaderboard's configuration
per solver, the fit's kept state); test values are only reported. A fit in the trial's own process
is scored there too; one on Ray Train workers is scored on the sweep's evaluator actors, which also
compute every sample metric. The trial's process, reused by Tune (`reuse_actors`), keeps its
backbone (`loaded_backbone`) and the teacher entries it read. Each trial reports the backbone
loads it caused as `model_loads`.

Fitted solvers are kept in the fit cache under `<sweep>/fitted/` (results/fit_cache.py), so a
SpanLift trial finds its fitted base there (the base fitted with the same seed), a resumed sweep
never fits the same solver twice, and a changed fit is never served old weights.
"""

import math
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from spanlift.backbones import Backbone
from spanlift.backbones.loaded import backbone_loads, loaded_backbone
from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.platform.configuration import Configuration, code_version, teacher_identity
from spanlift.platform.evaluation.evaluator import SAMPLE_METRICS, EvaluatorSetup
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.evaluation.sample_metrics import SampleReport, evaluate_samples
from spanlift.platform.resolved import ResolvedConfiguration, write_resolved
from spanlift.platform.results.fit_cache import FitCache, Fitted
from spanlift.platform.results.provenance import run_environment
from spanlift.platform.results.tracking import configuration_params, seed_params
from spanlift.platform.sampling.sample_grid import save_sample_grid
from spanlift.platform.sampling.score import Score, score, score_batch
from spanlift.platform.sampling.teacher import supervision_sigmas
from spanlift.platform.storage import Storage, open_storage
from spanlift.platform.sweep.config import PROBE_SIGMAS, SolverEntry, SweepConfig
from spanlift.platform.sweep.space import decode
from spanlift.platform.sweep.teacher import SweepTeachers, read_entry, sweep_seeds
from spanlift.platform.sweep.train_fit import fit_on_ray_train
from spanlift.platform.sweep.trial_fit import fit_in_trial
from spanlift.platform.tracking.metrics import EVALUATION_METRICS
from spanlift.platform.tracking.per_sample import write_errors
from spanlift.platform.tracking.runs import (
    CODE_TAG,
    PARENT_TAG,
    REPLICATE_PARAM,
    ConfigurationRuns,
    run_name,
)
from spanlift.seeds import describe
from spanlift.solvers import Solver, SolverSpec, build_solver
from spanlift.solvers.loading import is_learnable
from spanlift.solvers.spanlift import SpanLift

NODE_TAG, HOST_TAG = "spanlift.node_id", "spanlift.host"
SUMMED = ("fit_seconds", "eval_seconds", "model_loads")
"""Metrics a trial reports as the sum over its replicates (the others: their mean)."""


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
    evaluators: tuple = ()  # the sweep's evaluator actors
    storage: Storage | None = None  # None: the folder `root`

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


def trial_spec(params: dict[str, Any], config: SweepConfig) -> SolverSpec:
    """The solver spec a Tune config stands for."""
    return decode(params, config)[1]


def trial_name(params: dict[str, Any], config: SweepConfig) -> str:
    """The name of a Tune config's runs, `dyweight nfe=3` or with its entry's label
    `DyWeight (long) nfe=3`: what the progress view and the summary call it."""
    entry, spec = decode(params, config)
    return run_name(spec, entry.label)


def for_replicate(context: SweepContext, entry: SolverEntry, seed: int) -> SweepContext:
    """The context as one replicate sees it: the sweep's fit with the entry's own on top, and the
    replicate's fit seed."""
    fit = replace(context.config.fit_of(entry), seed=seed)
    return replace(context, config=replace(context.config, fit=fit))


def configuration(spec: SolverSpec, context: SweepContext) -> Configuration:
    """Everything that produces the replicate's result."""
    config, teachers = context.config, context.teachers
    return Configuration(
        config.backbone,
        config.backbone_options,
        spec,
        teacher_identity(
            config.teacher.solver,
            f"{teachers.train.name}|{teachers.validation.name}",
            teachers.test.name,
        ),
        fit={**config.fit.identity(), "workers": config.resources.workers},
        evaluation=evaluation_settings(config),
    )


def evaluation_settings(config: SweepConfig) -> dict[str, Any]:
    """The evaluation section in the run key; a statistics file enters by name and content
    digest, so a changed file makes a new result."""
    if not config.evaluation.metrics:
        return {}
    settings, reference = asdict(config.evaluation), reference_set(config)
    del settings["batch_size"]  # how many at once changes memory, not the result
    if reference.kind == "file":
        settings["reference"] = reference.describe()
    return settings


def reference_set(config: SweepConfig) -> ReferenceSet:
    """What the sweep's FIDs are measured against."""
    evaluation = config.evaluation
    return ReferenceSet.from_setting(
        evaluation.reference, evaluation.reference_samples, config.teacher.solver
    )


def searched_family(config: SweepConfig) -> str | None:
    """The evaluation entry (fid, lpips, skill, …) whose metric the sweep searches on, measured
    on validation seeds too; None when it searches on the endpoint RMSE."""
    return next(
        (
            name
            for name in config.evaluation.metrics
            if name in SAMPLE_METRICS and config.metric in EVALUATION_METRICS[name]
        ),
        None,
    )


def validation_sample_seeds(config: SweepConfig) -> range:
    """The validation seeds of a searched sample metric: the validation range continued."""
    first = sweep_seeds(config)["validation"].start
    count = config.evaluation.validation_samples or config.evaluation.samples
    return range(first, first + count)


def run_params(result: Configuration, context: SweepContext) -> dict[str, Any]:
    """The MLflow params of a replicate: what ran, on which seeds of each role, what its metrics
    are measured against, what chose it, and where it ran (`env.*`)."""
    config = context.config
    family = searched_family(config)
    return {
        **configuration_params(result),
        REPLICATE_PARAM: result.replicate_key(),
        "loss": config.fit.loss,
        **seed_params(sweep_seeds(config)),
        "selection.metric": config.search_metric,
        "fit.use_gpu": config.resources.use_gpu,
        **(
            {"fid.samples": config.evaluation.samples} if "fid" in config.evaluation.metrics else {}
        ),
        **(
            {f"{family}.validation_seeds": describe(validation_sample_seeds(config))}
            if family
            else {}
        ),
        **run_environment(context.device, deterministic=config.fit.deterministic),
    }


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
    entry, spec = decode(params, context.config)
    if context.config.resources.fits_in_trial:
        torch.set_num_threads(context.config.resources.fit_threads)
    phases = Phases()
    measured = [
        run_replicate(entry, spec, seed, context, phases)
        for seed in replicate_seeds(entry, spec, context)
    ]
    tune.report({**replicate_mean(measured), **phases.seconds})


def replicate_seeds(entry: SolverEntry, spec: SolverSpec, context: SweepContext) -> tuple[int, ...]:
    """The fit seeds of the configuration's replicates: the sweep's for a learned solver, the
    first alone for an analytic one (it has nothing to fit)."""
    seeds = context.config.replicate_seeds(entry)
    return seeds if is_learnable(build_solver(spec, *PROBE_SIGMAS, channels=1)) else seeds[:1]


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


def run_replicate(
    entry: SolverEntry, spec: SolverSpec, seed: int, context: SweepContext, phases: Phases
) -> dict[str, float]:
    """One replicate: taken from MLflow when this code version finished it, else fitted, scored,
    evaluated and recorded in its own run; returns its metrics."""
    context = for_replicate(context, entry, seed)
    config = context.config
    result = configuration(spec, context)
    runs = ConfigurationRuns(context.tracking_uri, config.experiment)
    with phases("lookup"):
        earlier = runs.find(result.key(), None if context.reuse_across_versions else code_version())
    if earlier and earlier.status == "FINISHED":
        return {**earlier.metrics, "reused": 1.0}
    if earlier and earlier.failure:  # deterministic: a diverged fit diverges again
        raise TrainingDivergedError(earlier.failure)
    loads_before = backbone_loads()
    with phases("backbone"):
        backbone = context.backbone()
    params = {**run_params(result, context), **({"solver": entry.label} if entry.label else {})}
    name = run_name(spec, entry.label)
    with phases("record"):
        run_id = runs.open(result.key(), name, params, run_tags(context))
    try:
        with phases("fit"):
            fitted = fit_cache(result, context).fitted(spec, backbone, fit_one(context, backbone))
        evaluators = evaluator_pool(context)
        with phases("score"):
            scored, samples = score_fitted(fitted, context, backbone, evaluators)
        eval_seconds = phases.seconds["phase.score_s"]
        with phases("evaluate"):
            report = evaluation_metrics(spec, fitted.path, context, evaluators)
        extra_metrics, extra_params = (report.metrics(), report.params()) if report else ({}, {})
        extra_params |= fitted.params()
        extra_metrics |= validation_metric(spec, fitted.path, context, evaluators)
        loads = {"model_loads": float(backbone_loads() - loads_before + evaluators.loads)}
        metrics = {
            **scored.metrics(),
            "eval_seconds": eval_seconds,
            **fitted.metrics(),
            **extra_metrics,
            **loads,
            **phases.seconds,
        }
        with phases("record"), tempfile.TemporaryDirectory() as folder:
            files, ratio = replicate_files(
                fitted, scored, samples, report, context, backbone, Path(folder)
            )
            metrics |= ratio
            runs.finish(run_id, metrics, files, extra_params, histories=fitted.histories())
    except TrainingDivergedError as exc:
        runs.fail(run_id, str(exc))  # final: a retry reports the same failure without refitting
        raise
    except Exception:
        runs.interrupt(run_id)  # a retry reopens this run
        raise
    if config.search_metric not in metrics:
        raise SettingsError(
            f"{spec.label()} nfe={spec.nfe} produced no {config.metric!r} to search on: "
            f"{extra_params.get(f'{config.metric}.unavailable', 'it was not computed')}"
        )
    return {**metrics, "reused": 0.0}


def fit_cache(result: Configuration, context: SweepContext) -> FitCache:
    """The sweep's fitted solvers (`<sweep>/fitted/`), for configurations like `result`."""
    return FitCache(context.fitted, result, context.reuse_across_versions, context.store)


def fit_one(context: SweepContext, backbone: Backbone) -> Any:
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


def trial_diagnostics(
    solver: Solver, context: SweepContext, backbone: Backbone, folder: Path
) -> tuple[list[Path], dict[str, float]]:
    """Per-step SpanLift diagnostics (CSV + PNG) of the fitted solver when the YAML asks for
    them, and their mean out-of-span ratio as a metric; ([], {}) otherwise."""
    if "diagnostics" not in context.config.evaluation.metrics or not isinstance(solver, SpanLift):
        return [], {}
    from spanlift.platform.evaluation.diagnostics import write_diagnostics  # matplotlib: here

    table, files = write_diagnostics(solver, backbone, folder, "spanlift")
    ratio = float(table["out_of_span"].mean())
    return files, ({"out_of_span_ratio": ratio} if math.isfinite(ratio) else {})


def evaluator_setup(config: SweepConfig, root: Path) -> EvaluatorSetup:
    """What the sweep's evaluator actors load: the backbone, the detector, LPIPS and ImageReward
    files, the teacher LPIPS compares with, their threads (`SweepConfig.evaluator_actors`)."""
    evaluation = config.evaluation
    return EvaluatorSetup(
        config.backbone,
        evaluation.detector or "",
        root / "eval-cache",
        config.backbone_options,
        threads=config.evaluator_actors()[3],
        batch_size=evaluation.batch_size,
        lpips_weights=evaluation.lpips_weights,
        image_reward_weights=evaluation.image_reward_weights,
        teacher=config.teacher.solver,
        skill_convention=evaluation.skill_convention,
    )


def evaluator_pool(context: SweepContext) -> EvaluatorPool:
    """This trial's calls on the sweep's evaluator actors (its own count of model loads)."""
    return EvaluatorPool(evaluator_setup(context.config, context.root), list(context.evaluators))


def evaluation_metrics(
    spec: SolverSpec, checkpoint: Path | None, context: SweepContext, evaluators: EvaluatorPool
) -> SampleReport | None:
    """The YAML's sample metrics (FID, LPIPS, ImageReward, skill) on the sweep's evaluators, on
    their test seeds; None when none are asked."""
    evaluation = context.config.evaluation
    metrics = tuple(m for m in evaluation.metrics if m in SAMPLE_METRICS)
    if not metrics:
        return None
    reference = reference_set(context.config)
    return evaluate_samples(evaluators, spec, checkpoint, evaluation.samples, metrics, reference)


def validation_metric(
    spec: SolverSpec, checkpoint: Path | None, context: SweepContext, evaluators: EvaluatorPool
) -> dict[str, float]:
    """`val_<metric>` of a searched sample metric, measured on validation seeds; {} when the
    sweep searches on the endpoint RMSE (scored on validation seeds with the test seeds)."""
    config = context.config
    family = searched_family(config)
    if family is None:
        return {}
    seeds = validation_sample_seeds(config)
    reference = reference_set(config)
    report = evaluate_samples(
        evaluators, spec, checkpoint, len(seeds), (family,), reference, seeds.start
    )
    value = report.metrics().get(config.metric)
    return {} if value is None else {config.search_metric: value}


def replicate_files(
    fitted: Fitted,
    scored: Score,
    samples: dict[str, torch.Tensor],
    report: SampleReport | None,
    context: SweepContext,
    backbone: Backbone,
    folder: Path,
) -> tuple[list[Path], dict[str, float]]:
    """The files a replicate's run keeps (sample grid, errors per test seed, diagnostics, skill
    scores, the fitted checkpoint) and the diagnostics' metric."""
    grid = save_sample_grid(samples, folder / "samples.png")
    errors = write_errors(folder, scored.seeds.numpy(), scored.errors.numpy())
    resolved = write_resolved(folder, resolved_configuration(fitted.spec, context))
    diagnostics, ratio = trial_diagnostics(fitted.solver, context, backbone, folder)
    scores = skill_file(report, folder)
    checkpoint = [fitted.path] if fitted.path else []
    return [grid, errors, resolved, *diagnostics, *scores, *checkpoint], ratio


def resolved_configuration(spec: SolverSpec, context: SweepContext) -> ResolvedConfiguration:
    """Everything re-running the replicate needs (`spanlift rerun`)."""
    config = context.config
    return ResolvedConfiguration(
        backbone=config.backbone,
        backbone_options=config.backbone_options,
        solver=spec.to_dict(),
        teacher=config.teacher.solver.to_dict(),
        seeds={role: [s.start, s.stop] for role, s in sweep_seeds(config).items()},
        fit=config.fit.to_dict(),
        workers=config.resources.workers,
        threads=torch.get_num_threads(),
        device=str(context.device),
    )


def skill_file(report: SampleReport | None, folder: Path) -> list[Path]:
    """The skill scores per threshold, pool and lead time as NetCDF, when they were computed."""
    if report is None or report.skill is None:
        return []
    path = folder / "skill-scores.nc"
    report.skill.to_dataset().to_netcdf(path, engine="h5netcdf")
    return [path]
