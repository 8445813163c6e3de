"""`spanlift eval`: start Ray and the evaluator actors, compute the requested metrics, stop them,
and record the result as the configuration's MLflow run (one run per evaluated configuration)."""

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.files import file_sha256
from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.detectors.registry import DETECTORS
from spanlift.platform.evaluation.diagnostics import write_diagnostics
from spanlift.platform.evaluation.evaluator import SAMPLE_METRICS, EvaluatorSetup
from spanlift.platform.evaluation.fid import file_moments
from spanlift.platform.evaluation.pool import evaluators_on_ray
from spanlift.platform.evaluation.reference import KINDS, ReferenceSet
from spanlift.platform.evaluation.sample_metrics import (
    SampleReport,
    check_available,
    evaluate_samples,
)
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.results.tracking import (
    command_tags,
    configuration_params,
    open_experiment,
    record_result,
)
from spanlift.platform.tracking.runs import ConfigurationRuns, run_name
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec, read_checkpoint
from spanlift.solvers.loading import load_solver

METRICS = (*SAMPLE_METRICS, "latency", "diagnostics")  # latency: sampling timed, nothing scored
SAMPLES_GPU, SAMPLES_CPU = 50_000, 10_000
"""Default samples scored: 50K on a GPU, the FID protocol of the papers (EDM's tables); 10K on a
CPU, where 50K takes too long (an FID from fewer samples is biased upwards)."""


def default_samples() -> int:
    return SAMPLES_GPU if torch.cuda.is_available() else SAMPLES_CPU


@dataclass(frozen=True)
class Tracking:
    """Where `spanlift eval` records its run; None in EvalRequest: not recorded."""

    uri: str
    experiment: str


@dataclass(frozen=True)
class EvalRequest:
    setup: EvaluatorSetup
    spec: SolverSpec
    checkpoint: Path | None
    metrics: tuple[str, ...]
    samples: int
    evaluators: int
    reference: ReferenceSet
    tracking: Tracking | None = None
    first_seed: int = FID_FIRST_SEED
    """Seed of the first sample; sample i has seed first_seed + i."""


def check_request(request: EvalRequest) -> None:
    """Reject bad input before Ray starts: unknown metrics, metrics that cannot be computed
    here, counts, the solver itself."""
    unknown = [m for m in request.metrics if m not in METRICS]
    if unknown or not request.metrics:
        raise SettingsError(
            f"--metrics: unknown {', '.join(unknown) or 'empty list'}; expected some of {METRICS}"
        )
    if request.samples < 2:
        raise SettingsError(f"--samples: expected at least 2, got {request.samples}")
    if request.evaluators < 1:
        raise SettingsError(f"--evaluators: expected at least 1, got {request.evaluators}")
    DETECTORS.get(request.setup.detector)  # an unknown name lists the known ones
    if request.reference.kind not in KINDS:
        raise SettingsError(
            f"reference: expected one of {', '.join(KINDS)}, got {request.reference.kind!r}"
        )
    backbone = load_backbone(request.setup.backbone, **request.setup.backbone_options)
    check_available(request.metrics, request.setup, backbone)  # LPIPS without AlexNet, say
    if request.reference.kind == "file" and "fid" in request.metrics:
        file_moments(request.reference.path, request.setup, backbone)
    solver = load_solver(request.spec, request.checkpoint, backbone)  # bad name, NFE, checkpoint
    if "diagnostics" in request.metrics and not solver.has_parts:
        raise SettingsError(f"--metrics diagnostics: needs a SpanLift solver, got {solver.name}")


def solver_spec(request: EvalRequest) -> SolverSpec:
    """The spec that is evaluated: the checkpoint's own when one is given."""
    if request.checkpoint is None:
        return request.spec
    return SolverSpec.from_dict(read_checkpoint(request.checkpoint)["spec"])


@dataclass
class EvalReport:
    samples: SampleReport | None = None
    diagnostics: pd.DataFrame | None = None
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    run_id: str = ""


def run_eval(
    request: EvalRequest, workdir: Path, address: str | None = None, num_cpus: int | None = None
) -> EvalReport:
    """The requested metrics of one solver: sample metrics on evaluator actors, diagnostics
    in-process; then the MLflow run when `request.tracking` is set."""
    check_request(request)
    runs = open_tracking(request.tracking)
    start, report = time.perf_counter(), EvalReport()
    if "diagnostics" in request.metrics:
        report.diagnostics, report.files = solver_diagnostics(request, workdir / "eval")
    if any(m in request.metrics for m in (*SAMPLE_METRICS, "latency")):
        report.samples = samples_on_actors(request, workdir, address, num_cpus)
    report.seconds = time.perf_counter() - start
    if runs is not None:
        report.run_id = record_run(runs, request, report)
    return report


def solver_diagnostics(request: EvalRequest, folder: Path) -> tuple[pd.DataFrame, list[Path]]:
    setup = request.setup
    backbone = load_backbone(setup.backbone, **setup.backbone_options)
    solver = load_solver(request.spec, request.checkpoint, backbone)
    return write_diagnostics(solver, backbone, folder, f"{request.spec.label()}-nfe{solver.nfe}")


def samples_on_actors(
    request: EvalRequest, workdir: Path, address: str | None, num_cpus: int | None
) -> SampleReport:
    start_ray(address, workdir, num_cpus)
    metrics = tuple(m for m in request.metrics if m in SAMPLE_METRICS)
    with evaluators_on_ray(request.setup, request.evaluators) as pool:
        return evaluate_samples(
            pool,
            request.spec,
            request.checkpoint,
            request.samples,
            metrics,
            request.reference,
            request.first_seed,
        )


def open_tracking(tracking: Tracking | None) -> ConfigurationRuns | None:
    """The experiment's runs, created if new; checked before any work so a bad URI fails fast."""
    return None if tracking is None else open_experiment(tracking.uri, tracking.experiment)


def record_run(runs: ConfigurationRuns, request: EvalRequest, report: EvalReport) -> str:
    """Log the evaluation as a new run of its configuration (key: solver, checkpoint, evaluation
    settings), so repeated evaluations of one configuration sit side by side."""
    spec, setup = solver_spec(request), request.setup
    checkpoint = file_sha256(request.checkpoint)[:12] if request.checkpoint else ""
    result = Configuration(
        setup.backbone,
        setup.backbone_options,
        spec,
        teacher_identity(setup.teacher),
        evaluation={
            "samples": request.samples,
            "detector": setup.detector,
            "reference": request.reference.describe(),
            **({} if request.first_seed == FID_FIRST_SEED else {"first_seed": request.first_seed}),
        },
        checkpoint=checkpoint,
    )
    samples = report.samples
    return record_result(
        runs,
        result,
        run_name(spec),
        {**configuration_params(result), "checkpoint.sha256": checkpoint},
        command_tags("eval"),
        {**(samples.metrics() if samples else {}), "eval_seconds": report.seconds},
        [*report.files, *([request.checkpoint] if request.checkpoint else [])],
        samples.params() if samples else {},
    )
