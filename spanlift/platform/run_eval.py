"""`spanlift eval`: start Ray and the evaluator actors, compute the requested metrics, stop them,
and record the result as the configuration's MLflow run (one run per evaluated configuration)."""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.files import file_sha256
from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.detectors.registry import DETECTORS
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics import METRICS, Finished, SampleMetric, chosen
from spanlift.platform.evaluation.metrics.reference import KINDS, ReferenceSet
from spanlift.platform.evaluation.pool import evaluators_on_ray
from spanlift.platform.evaluation.sample_metrics import (
    SampleReport,
    check_available,
    evaluate_samples,
)
from spanlift.platform.evaluation.solver_metrics import check_solver, solver_metrics
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
            f"--metrics: unknown {', '.join(unknown) or 'empty list'}; expected some of "
            f"{', '.join(METRICS.names())}"
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
    setup = request.setup
    backbone = load_backbone(setup.backbone, **setup.backbone_options)
    check_available(request.metrics, setup, request.reference, backbone)  # LPIPS without AlexNet
    solver = load_solver(request.spec, request.checkpoint, backbone)  # bad name, NFE, checkpoint
    check_solver(request.metrics, setup.options, solver)  # diagnostics of a solver without parts


def solver_spec(request: EvalRequest) -> SolverSpec:
    """The spec that is evaluated: the checkpoint's own when one is given."""
    if request.checkpoint is None:
        return request.spec
    return SolverSpec.from_dict(read_checkpoint(request.checkpoint)["spec"])


@dataclass
class EvalReport:
    samples: SampleReport | None = None
    solver: list[Finished] = field(default_factory=list)  # the solver metrics' (diagnostics)
    seconds: float = 0.0
    run_id: str = ""

    def metrics(self) -> dict[str, float]:
        own = {k: v for f in self.solver for k, v in f.metrics.items()}
        return {**own, **(self.samples.metrics() if self.samples else {})}

    def params(self) -> dict[str, Any]:
        own = {k: v for f in self.solver for k, v in f.params.items()}
        return {**own, **(self.samples.params() if self.samples else {})}

    @property
    def files(self) -> list[Path]:
        sampled = list(self.samples.files) if self.samples else []
        return [path for f in self.solver for path in f.files] + sampled

    def lines(self) -> list[str]:
        """What the console says of the metrics, the solver's first."""
        sampled = list(self.samples.lines) if self.samples else []
        return [line for f in self.solver for line in f.lines] + sampled


def run_eval(
    request: EvalRequest, workdir: Path, address: str | None = None, num_cpus: int | None = None
) -> EvalReport:
    """The requested metrics of one solver: sample metrics on evaluator actors, the solver's own
    (diagnostics) in-process; then the MLflow run when `request.tracking` is set."""
    check_request(request)
    runs = open_tracking(request.tracking)
    start, report = time.perf_counter(), EvalReport()
    report.solver = solver_report(request, workdir / "eval")
    if chosen(request.metrics, request.setup.options, SampleMetric):
        report.samples = samples_on_actors(request, workdir, address, num_cpus)
    report.seconds = time.perf_counter() - start
    if runs is not None:
        report.run_id = record_run(runs, request, report)
    return report


def solver_report(request: EvalRequest, folder: Path) -> list[Finished]:
    """The solver metrics asked for, their files in `folder` named after the evaluated solver."""
    setup = request.setup
    backbone = load_backbone(setup.backbone, **setup.backbone_options)
    solver = load_solver(request.spec, request.checkpoint, backbone)
    name = f"{request.spec.label()}-nfe{solver.nfe}"
    return solver_metrics(request.metrics, setup.options, solver, backbone, folder, name)


def samples_on_actors(
    request: EvalRequest, workdir: Path, address: str | None, num_cpus: int | None
) -> SampleReport:
    start_ray(address, workdir, num_cpus)
    with evaluators_on_ray(request.setup, request.evaluators) as pool:
        return evaluate_samples(
            pool,
            request.spec,
            request.checkpoint,
            request.samples,
            request.metrics,
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
    return record_result(
        runs,
        result,
        run_name(spec),
        {**configuration_params(result), "checkpoint.sha256": checkpoint},
        command_tags("eval"),
        {**report.metrics(), "eval_seconds": report.seconds},
        [*report.files, *([request.checkpoint] if request.checkpoint else [])],
        report.params(),
    )
