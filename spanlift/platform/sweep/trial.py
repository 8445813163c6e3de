"""One sweep trial: fit the configuration on Ray Train if it learns, score it, record it in MLflow.

    configuration ──(finished run of this code version in MLflow?)── yes → report its metrics
                  └─ no → fit (TorchTrainer, resumable) → score, evaluate (evaluator actors)
                          → MLflow child run of the sweep's run → every metric to Tune

Scoring and sample metrics run on the sweep's evaluator actors, started once by the driver and
shared by all trials; the trial's own process, reused by Tune (`reuse_actors`), keeps its backbone
too (`loaded_backbone`). Each trial reports the backbone loads it caused as `model_loads`.

The trial loads the backbone once and builds its solver once (`FitCache.fitted`); the fitted
solver is kept in the fit cache under `<sweep>/fitted/` (results/fit_cache.py), so a SpanLift
trial finds its fitted base there, a resumed sweep never fits the same solver twice, and a
changed fit is never served old weights.
"""

import math
import shutil
import socket
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from spanlift.backbones import Backbone
from spanlift.backbones.loaded import backbone_loads, loaded_backbone
from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.files import atomic_write
from spanlift.platform.configuration import Configuration, code_version, teacher_identity
from spanlift.platform.evaluation.diagnostics import write_diagnostics
from spanlift.platform.evaluation.evaluator import SAMPLE_METRICS, EvaluatorSetup
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.evaluation.sample_metrics import SampleReport, evaluate_samples
from spanlift.platform.results.fit_cache import FitCache, Fitted
from spanlift.platform.results.tracking import configuration_params
from spanlift.platform.sampling.sample_grid import save_sample_grid
from spanlift.platform.sampling.teacher import supervision_sigmas
from spanlift.platform.storage import Storage, open_storage
from spanlift.platform.sweep.config import SolverEntry, SweepConfig
from spanlift.platform.sweep.teacher import SweepTeachers, sweep_seeds
from spanlift.platform.sweep.train_worker import SOLVER_FILE, fit_loop_config, fit_worker
from spanlift.platform.tracking.runs import CODE_TAG, PARENT_TAG, ConfigurationRuns, run_name
from spanlift.solvers import Solver, SolverSpec
from spanlift.solvers.spanlift import SpanLift

NODE_TAG, HOST_TAG = "spanlift.node_id", "spanlift.host"
TRAIN_CHECKPOINTS_KEPT = 2
"""Ray Train checkpoints kept per fit: the newest to resume from, and one before it."""


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

    def backbone(self) -> Backbone:
        """The sweep's backbone as loaded in this process."""
        return loaded_backbone(self.config.backbone, self.config.backbone_options)


def trial_entry(params: dict[str, Any], config: SweepConfig) -> tuple[SolverEntry, SolverSpec]:
    """The solver entry and spec a Tune config stands for: a grid index, or TPE's per-entry
    choices."""
    if "trial" in params:
        return config.grid()[int(params["trial"])]
    index = int(params["entry"])
    entry = config.solvers[index]
    searched = {k: params[f"{index}.{k}"] for k in entry.search}
    spec = SolverSpec(
        entry.name, int(params[f"{index}.nfe"]), entry.schedule, {**entry.settings, **searched}
    )
    return entry, spec


def trial_spec(params: dict[str, Any], config: SweepConfig) -> SolverSpec:
    """The solver spec a Tune config stands for."""
    return trial_entry(params, config)[1]


def with_entry_fit(context: SweepContext, entry: SolverEntry) -> SweepContext:
    """The context as the entry's trials see it: the sweep's fit with the entry's own on top."""
    if not entry.fit:
        return context
    return replace(context, config=replace(context.config, fit=context.config.fit_of(entry)))


def configuration(spec: SolverSpec, context: SweepContext) -> Configuration:
    """Everything that produces the trial's result."""
    config = context.config
    return Configuration(
        config.backbone,
        config.backbone_options,
        spec,
        teacher_identity(
            config.teacher.solver, context.teachers.train.name, context.teachers.test.name
        ),
        fit={**config.fit.to_dict(), "workers": config.resources.workers},
        evaluation=evaluation_settings(config),
    )


def evaluation_settings(config: SweepConfig) -> dict[str, Any]:
    """The evaluation section in the run key; a statistics file enters by name and content
    digest, so a changed file makes a new result."""
    if not config.evaluation.metrics:
        return {}
    settings, reference = asdict(config.evaluation), reference_set(config)
    if reference.kind == "file":
        settings["reference"] = reference.describe()
    return settings


def reference_set(config: SweepConfig) -> ReferenceSet:
    """What the sweep's FIDs are measured against."""
    evaluation = config.evaluation
    return ReferenceSet.from_setting(
        evaluation.reference, evaluation.reference_samples, config.teacher.solver
    )


def run_params(result: Configuration, context: SweepContext) -> dict[str, Any]:
    """The MLflow params of a configuration: what ran, and what its metrics are measured against."""
    config = context.config
    train, test = sweep_seeds(config)
    return {
        **configuration_params(result),
        "loss": config.fit.loss,
        "teacher.train_samples": len(train),
        "teacher.test_seeds": f"{test.start}..{test.stop - 1}",
        "fit.use_gpu": config.resources.use_gpu,
        **(
            {"fid.samples": config.evaluation.samples} if "fid" in config.evaluation.metrics else {}
        ),
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


def run_trial(params: dict[str, Any], context: SweepContext) -> None:
    """The Tune function of a sweep: reports every metric of the configuration to the searcher."""
    entry, spec = trial_entry(params, context.config)
    context = with_entry_fit(context, entry)
    config = context.config
    result = configuration(spec, context)
    runs = ConfigurationRuns(context.tracking_uri, config.experiment)
    earlier = runs.find(result.key(), None if context.reuse_across_versions else code_version())
    if earlier and earlier.status == "FINISHED":
        tune.report({**earlier.metrics, "reused": 1})
        return
    if earlier and earlier.failure:  # deterministic: a diverged fit diverges again
        raise TrainingDivergedError(earlier.failure)
    loads_before = backbone_loads()
    backbone = context.backbone()
    params = {**run_params(result, context), **({"solver": entry.label} if entry.label else {})}
    name = f"{entry.label} nfe={spec.nfe}" if entry.label else run_name(spec)
    run_id = runs.open(result.key(), name, params, run_tags(context))
    try:
        fitted = fit_cache(result, context).fitted(
            spec, backbone, lambda solver, out: fit_on_ray_train(solver, context, out)
        )
        evaluators = evaluator_pool(context)
        test = context.teachers.test
        metrics, samples = evaluators.call("score", spec, fitted.path, test)
        report = evaluation_metrics(spec, fitted.path, context, evaluators)
        extra_metrics, extra_params = (report.metrics(), report.params()) if report else ({}, {})
        loads = {"model_loads": float(backbone_loads() - loads_before + evaluators.loads)}
        with tempfile.TemporaryDirectory() as folder:
            grid = save_sample_grid(samples, Path(folder) / "samples.png")
            diagnostics, ratio = trial_diagnostics(fitted.solver, context, backbone, folder)
            metrics = {**metrics, **fitted.metrics(), **extra_metrics, **ratio, **loads}
            scores = skill_file(report, Path(folder))
            runs.finish(
                run_id,
                metrics,
                [grid, *diagnostics, *scores, *([fitted.path] if fitted.path else [])],
                extra_params,
                histories=fitted.histories(),
            )
    except TrainingDivergedError as exc:
        runs.fail(run_id, str(exc))  # final: a retry reports the same failure without refitting
        raise
    except Exception:
        runs.interrupt(run_id)  # a retry reopens this run
        raise
    if config.metric not in metrics:
        raise SettingsError(
            f"{spec.label()} nfe={spec.nfe} produced no {config.metric!r} to search on: "
            f"{extra_params.get(f'{config.metric}.unavailable', 'it was not computed')}"
        )
    tune.report({**metrics, "reused": 0})


def fit_cache(result: Configuration, context: SweepContext) -> FitCache:
    """The sweep's fitted solvers (`<sweep>/fitted/`), for configurations like `result`."""
    return FitCache(context.fitted, result, context.reuse_across_versions, context.store)


def fit_on_ray_train(solver: Solver, context: SweepContext, out: Path) -> Fitted:
    """Fit `solver` with a TorchTrainer (resuming its earlier attempt) on the teacher entry it
    needs (with the teacher's states at its grid when it is trajectory-supervised); save the
    result to `out` and load it into `solver`."""
    config, resources, spec = context.config, context.config.resources, solver.spec
    teacher = context.teachers.for_solver(supervision_sigmas(solver))
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        fit_worker,
        train_loop_config=fit_loop_config(
            spec, config.backbone, config.backbone_options, teacher, config.fit, context.store
        ),
        scaling_config=ScalingConfig(
            num_workers=resources.workers,
            use_gpu=resources.use_gpu,
            resources_per_worker=resources.per_worker(),
        ),
        run_config=RunConfig(
            name=f"fit-{out.stem}-{trial_id}",
            **context.store.ray_storage("train"),
            failure_config=FailureConfig(max_failures=resources.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=TRAIN_CHECKPOINTS_KEPT),
            callbacks=[TuneReportCallback()],
        ),
    )
    result = trainer.fit()
    if "diverged" in (result.metrics or {}):
        raise TrainingDivergedError(result.metrics["diverged"])
    with result.checkpoint.as_directory() as folder, atomic_write(out) as partial:
        shutil.copyfile(Path(folder) / SOLVER_FILE, partial)
    seconds, resumed_from = (
        float(result.metrics["fit_seconds"]),
        int(result.metrics["resumed_from"]),
    )
    gpu = {k: float(v) for k, v in result.metrics.items() if k.startswith("gpu_")}
    return Fitted.from_checkpoint(solver, out, seconds, resumed_from, gpu)


def trial_diagnostics(
    solver: Solver, context: SweepContext, backbone: Backbone, folder: str
) -> tuple[list[Path], dict[str, float]]:
    """Per-step SpanLift diagnostics (CSV + PNG) of the fitted solver when the YAML asks for
    them, and their mean out-of-span ratio as a metric; ([], {}) otherwise."""
    if "diagnostics" not in context.config.evaluation.metrics or not isinstance(solver, SpanLift):
        return [], {}
    table, files = write_diagnostics(solver, backbone, Path(folder), "spanlift")
    ratio = float(table["out_of_span"].mean())
    return files, ({"out_of_span_ratio": ratio} if math.isfinite(ratio) else {})


def evaluator_setup(config: SweepConfig, root: Path) -> EvaluatorSetup:
    """What the sweep's evaluator actors load: the backbone, the detector, LPIPS and ImageReward
    files, the teacher LPIPS compares with; one thread per CPU they hold."""
    evaluation = config.evaluation
    return EvaluatorSetup(
        config.backbone,
        evaluation.detector or "",
        root / "eval-cache",
        config.backbone_options,
        threads=max(1, int(config.resources.evaluator_cpus)),
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
    """The YAML's sample metrics (FID, LPIPS, ImageReward, skill) on the sweep's evaluators;
    None when none are asked."""
    evaluation = context.config.evaluation
    metrics = tuple(m for m in evaluation.metrics if m in SAMPLE_METRICS)
    if not metrics:
        return None
    reference = reference_set(context.config)
    return evaluate_samples(evaluators, spec, checkpoint, evaluation.samples, metrics, reference)


def skill_file(report: SampleReport | None, folder: Path) -> list[Path]:
    """The skill scores per threshold, pool and lead time as NetCDF, when they were computed."""
    if report is None or report.skill is None:
        return []
    path = folder / "skill-scores.nc"
    report.skill.to_dataset().to_netcdf(path, engine="h5netcdf")
    return [path]
