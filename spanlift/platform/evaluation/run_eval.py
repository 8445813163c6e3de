"""`spanlift eval`: start Ray and the evaluator actors, compute the requested metrics, stop them."""

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import ray

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.compare import load_solver
from spanlift.platform.evaluation import pool
from spanlift.platform.evaluation.detectors import DETECTORS
from spanlift.platform.evaluation.diagnostics import write_diagnostics
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.fid import FidResult, evaluate_fid
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.ray_runtime import start_ray
from spanlift.solvers import SolverSpec
from spanlift.solvers.spanlift import SpanLift

METRICS = ("fid", "diagnostics")


@dataclass(frozen=True)
class EvalRequest:
    setup: EvaluatorSetup
    spec: SolverSpec
    checkpoint: Path | None
    metrics: tuple[str, ...]
    samples: int
    evaluators: int
    reference: ReferenceSet


def check_request(request: EvalRequest) -> None:
    """Reject bad input before Ray starts: unknown metrics, counts, the solver itself."""
    unknown = [m for m in request.metrics if m not in METRICS]
    if unknown:
        raise SettingsError(f"--metrics: unknown {', '.join(unknown)}; expected some of {METRICS}")
    if request.samples < 2:
        raise SettingsError(f"--samples: expected at least 2, got {request.samples}")
    if request.evaluators < 1:
        raise SettingsError(f"--evaluators: expected at least 1, got {request.evaluators}")
    DETECTORS.get(request.setup.detector)  # an unknown name lists the known ones
    if request.reference.kind not in ("dataset", "teacher"):
        raise SettingsError(
            f"reference: expected dataset or teacher, got {request.reference.kind!r}"
        )
    backbone = load_backbone(request.setup.backbone, **request.setup.backbone_options)
    solver = load_solver(request.spec, request.checkpoint, backbone)  # bad name, NFE, checkpoint
    if "diagnostics" in request.metrics and not isinstance(solver, SpanLift):
        raise SettingsError(f"--metrics diagnostics: needs a SpanLift solver, got {solver.name}")


@dataclass
class EvalReport:
    fid: FidResult | None = None
    diagnostics: pd.DataFrame | None = None
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def run_eval(
    request: EvalRequest, workdir: Path, address: str | None = None, num_cpus: int | None = None
) -> EvalReport:
    """The requested metrics of one solver: FID on evaluator actors, diagnostics in-process."""
    check_request(request)
    start, report = time.perf_counter(), EvalReport()
    if "diagnostics" in request.metrics:
        report.diagnostics, report.files = solver_diagnostics(request, workdir / "eval")
    if "fid" in request.metrics:
        report.fid = fid_on_actors(request, workdir, address, num_cpus)
    report.seconds = time.perf_counter() - start
    return report


def solver_diagnostics(request: EvalRequest, folder: Path) -> tuple[pd.DataFrame, list[Path]]:
    setup = request.setup
    backbone = load_backbone(setup.backbone, **setup.backbone_options)
    solver = load_solver(request.spec, request.checkpoint, backbone)
    return write_diagnostics(solver, backbone, folder, f"{request.spec.label()}-nfe{solver.nfe}")


def fid_on_actors(
    request: EvalRequest, workdir: Path, address: str | None, num_cpus: int | None
) -> FidResult:
    start_ray(address, workdir, num_cpus)
    cpus = ray.available_resources().get("CPU", 1) / request.evaluators
    gpus = 1 if ray.available_resources().get("GPU", 0) >= request.evaluators else 0
    setup = replace(request.setup, threads=max(1, math.floor(cpus)))
    with pool.running_evaluators(setup, request.evaluators, cpus=cpus, gpus=gpus) as actors:
        return evaluate_fid(
            actors, setup, request.spec, request.checkpoint, request.samples, request.reference
        )
