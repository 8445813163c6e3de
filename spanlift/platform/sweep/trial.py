"""One sweep trial: fit the configuration on Ray Train if it learns, score it, record it in MLflow.

    configuration ──(finished run in MLflow?)── yes → report its metrics again, no work
                  └─ no → fit (TorchTrainer, resumable) → evaluate (Ray task) → MLflow run

Fitted solvers are also kept under `<sweep>/fitted/`, so a SpanLift trial finds its fitted DyWeight
base there, and a resumed sweep never fits the same solver twice.
"""

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from spanlift.backbones import load_backbone
from spanlift.errors import TrainingDivergedError
from spanlift.platform.evaluation import pool
from spanlift.platform.evaluation.diagnostics import write_diagnostics
from spanlift.platform.evaluation.evaluator import SAMPLE_METRICS, EvaluatorSetup
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.evaluation.sample_grid import save_sample_grid
from spanlift.platform.evaluation.sample_metrics import evaluate_samples
from spanlift.platform.fitting.compare import latency_ms
from spanlift.platform.fitting.fit import endpoint_rmse, rollout
from spanlift.platform.fitting.teacher import read_teacher
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.teacher import SweepTeachers
from spanlift.platform.sweep.train_worker import SOLVER_FILE, fit_loop_config, fit_worker
from spanlift.platform.tracking.runs import ConfigurationRuns, configuration_key, solver_params
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import base_spec, build, is_learnable, load_solver, needs_fitted_base

GRID_IMAGES = 8


@dataclass(frozen=True)
class SweepContext:
    """What every trial of a sweep shares: its config, folders, teacher sets and tracking store."""

    config: SweepConfig
    root: Path
    teachers: SweepTeachers
    tracking_uri: str

    @property
    def fitted(self) -> Path:
        return self.root / "fitted"


def trial_spec(params: dict[str, Any], config: SweepConfig) -> SolverSpec:
    """The solver spec a Tune config stands for: a grid index, or TPE's per-entry choices."""
    if "trial" in params:
        return config.trials()[int(params["trial"])]
    index = int(params["entry"])
    entry = config.solvers[index]
    searched = {k: params[f"{index}.{k}"] for k in entry.search}
    return SolverSpec(
        entry.name, int(params[f"{index}.nfe"]), "edm", {**entry.settings, **searched}
    )


def run_params(spec: SolverSpec, nfe: int, context: SweepContext) -> dict[str, Any]:
    """The MLflow params of a configuration."""
    config = context.config
    teacher = config.teacher.solver
    return {
        **solver_params(config.backbone, spec, nfe),
        "loss": config.fit.loss,
        "teacher": f"{teacher.label()} nfe={teacher.nfe}",
        **{f"fit.{k}": v for k, v in config.fit.to_dict().items()},
        "fit.workers": config.resources.workers,
        "fit.use_gpu": config.resources.use_gpu,
        **(
            {"fid.samples": config.evaluation.samples} if "fid" in config.evaluation.metrics else {}
        ),
    }


def key_of(spec: SolverSpec, context: SweepContext) -> str:
    config = context.config
    return configuration_key(
        {
            "backbone": [config.backbone, config.backbone_options],
            "teacher": [context.teachers.train.name, context.teachers.test.name],
            "fit": config.fit.to_dict(),
            "solver": [spec.name, spec.nfe, spec.schedule, spec.key()],
            **({"evaluation": asdict(config.evaluation)} if config.evaluation.metrics else {}),
        }
    )


def run_trial(params: dict[str, Any], context: SweepContext) -> None:
    """The Tune function of a sweep."""
    config = context.config
    spec = trial_spec(params, config)
    key = key_of(spec, context)
    runs = ConfigurationRuns(context.tracking_uri, config.experiment)
    earlier = runs.find(key)
    if earlier and earlier.status == "FINISHED":
        tune.report({**earlier.metrics, "reused": 1})
        return
    if earlier and earlier.failure:  # deterministic: a diverged fit diverges again
        raise TrainingDivergedError(earlier.failure)
    backbone = load_backbone(config.backbone, **config.backbone_options)
    nfe = build(spec, backbone).nfe
    run_id = runs.open(
        key, spec.label(), run_params(spec, nfe, context), {"spanlift.sweep": config.source}
    )
    try:
        checkpoint, fit_metrics = fitted_checkpoint(spec, context)
        task = evaluate_task(config).remote(spec, checkpoint, config, context.teachers.test)
        metrics, samples = ray.get(task)
        extra_metrics, extra_params = evaluation_metrics(spec, checkpoint, context)
        with tempfile.TemporaryDirectory() as folder:
            grid = save_sample_grid(samples, Path(folder) / "samples.png")
            diagnostics = trial_diagnostics(spec, checkpoint, context, Path(folder))
            runs.finish(
                run_id,
                {**metrics, **fit_metrics, **extra_metrics},
                [grid, *diagnostics, *([checkpoint] if checkpoint else [])],
                extra_params,
            )
    except TrainingDivergedError as exc:
        runs.fail(run_id, str(exc))  # final: a retry reports the same failure without refitting
        raise
    except Exception:
        runs.interrupt(run_id)  # a retry reopens this run
        raise
    tune.report({**metrics, **fit_metrics, "reused": 0})


def fitted_checkpoint(
    spec: SolverSpec, context: SweepContext
) -> tuple[Path | None, dict[str, float]]:
    """The checkpoint of `spec` fitted on the sweep's teacher (None if it has nothing to fit),
    and the fit's metrics: `fit_seconds` (base included), `fit_resumed_from` (0: a fresh fit)."""
    config = context.config
    backbone = load_backbone(config.backbone, **config.backbone_options)
    metrics = {"fit_seconds": 0.0, "fit_resumed_from": 0.0}
    if needs_fitted_base(spec, backbone):
        base, metrics = fitted_checkpoint(base_spec(spec), context)
        spec = replace(spec, settings={**spec.settings, "base_checkpoint": str(base)})
    if not is_learnable(build(spec, backbone)):
        return None, metrics
    path = context.fitted / f"{spec.name}-nfe{spec.nfe}-{spec.key()}.pt"
    if path.exists():
        return path, metrics
    seconds, resumed_from = fit_on_ray_train(spec, context, path)
    return path, {"fit_seconds": metrics["fit_seconds"] + seconds, "fit_resumed_from": resumed_from}


def fit_on_ray_train(spec: SolverSpec, context: SweepContext, out: Path) -> tuple[float, float]:
    """Fit `spec` with a TorchTrainer (resuming its earlier attempt); copy the result to `out`.

    Returns the fit's compute seconds and the iteration its last (re)start resumed from."""
    config, resources = context.config, context.config.resources
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        fit_worker,
        train_loop_config=fit_loop_config(
            spec, config.backbone, config.backbone_options, context.teachers.train, config.fit
        ),
        scaling_config=ScalingConfig(
            num_workers=resources.workers,
            use_gpu=resources.use_gpu,
            resources_per_worker={"CPU": resources.worker_cpu},
        ),
        run_config=RunConfig(
            name=f"fit-{spec.name}-nfe{spec.nfe}-{spec.key()}-{trial_id}",
            storage_path=str(context.root / "train"),
            failure_config=FailureConfig(max_failures=resources.max_failures),
            callbacks=[TuneReportCallback()],
        ),
    )
    result = trainer.fit()
    if "diverged" in (result.metrics or {}):
        raise TrainingDivergedError(result.metrics["diverged"])
    out.parent.mkdir(parents=True, exist_ok=True)
    with result.checkpoint.as_directory() as folder:
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(Path(folder) / SOLVER_FILE, partial)
        os.replace(partial, out)
    return float(result.metrics["fit_seconds"]), float(result.metrics["resumed_from"])


def trial_diagnostics(
    spec: SolverSpec, checkpoint: Path | None, context: SweepContext, folder: Path
) -> list[Path]:
    """Per-step SpanLift diagnostics (CSV + PNG) when the YAML asks for them; [] otherwise."""
    config = context.config
    if "diagnostics" not in config.evaluation.metrics or spec.name != "spanlift":
        return []
    backbone = load_backbone(config.backbone, **config.backbone_options)
    solver = load_solver(spec, checkpoint, backbone)
    return write_diagnostics(solver, backbone, folder, "spanlift")[1]


def evaluation_metrics(
    spec: SolverSpec, checkpoint: Path | None, context: SweepContext
) -> tuple[dict[str, float], dict[str, str]]:
    """The YAML's sample metrics (FID, LPIPS) on evaluator actors, each with a Train worker's
    resources and placed outside the trial's placement group; ({}, {}) when none are asked."""
    config = context.config
    evaluation, resources = config.evaluation, config.resources
    metrics = tuple(m for m in evaluation.metrics if m in SAMPLE_METRICS)
    if not metrics:
        return {}, {}
    backbone = load_backbone(config.backbone, **config.backbone_options)
    setup = EvaluatorSetup(
        config.backbone,
        evaluation.detector or backbone.fid_detector,
        context.root / "eval-cache",
        config.backbone_options,
        threads=max(1, int(resources.worker_cpu)),
        lpips_weights=evaluation.lpips_weights,
        image_reward_weights=evaluation.image_reward_weights,
        teacher=config.teacher.solver,
    )
    reference = ReferenceSet(
        evaluation.reference, evaluation.reference_samples, config.teacher.solver
    )
    with pool.running_evaluators(
        setup,
        evaluation.evaluators,
        cpus=resources.worker_cpu,
        gpus=1 if resources.use_gpu else 0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None),
    ) as actors:
        report = evaluate_samples(
            actors, setup, spec, checkpoint, evaluation.samples, metrics, reference
        )
    return report.metrics(), report.params()


def evaluate_task(config: SweepConfig) -> Any:
    """`evaluate` as a Ray task with one Train worker's resources (its GPU when the sweep has one).

    It is placed outside the trial's own small placement group, as the Train workers are.
    """
    resources = config.resources
    return ray.remote(evaluate).options(
        num_cpus=resources.worker_cpu,
        num_gpus=1 if resources.use_gpu else 0,
        max_retries=2,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None),
    )


@torch.no_grad()
def evaluate(
    spec: SolverSpec, checkpoint: Path | None, config: SweepConfig, test: Path
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Endpoint RMSE against the teacher's test set, latency per image, and sample images
    (teacher's and the solver's, uint8) for the grid artifact."""
    start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backbone = load_backbone(config.backbone, **config.backbone_options).to(device)
    solver = load_solver(spec, checkpoint, backbone).to(device)
    teacher = read_teacher(test)
    rmse = endpoint_rmse(solver, backbone, teacher, device=device)
    noise = teacher.noise[:64].to(device)
    ms = latency_ms(solver, backbone, noise)
    samples = rollout(solver, backbone, noise[:GRID_IMAGES])
    images = {
        "teacher": backbone.to_images(teacher.endpoints[:GRID_IMAGES].to(device)).cpu(),
        f"{spec.label()} nfe={solver.nfe}": backbone.to_images(samples).cpu(),
    }
    metrics = {
        "rmse": rmse,
        "nfe": float(solver.nfe),
        "ms_per_image": ms,
        "eval_seconds": time.perf_counter() - start,
    }
    return metrics, images
