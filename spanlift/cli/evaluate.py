"""`spanlift eval`: score one solver on parallel Ray evaluator actors (every registered metric:
FID, LPIPS, ImageReward, latency, SpanLift diagnostics, …) and record an MLflow run."""

import argparse
from pathlib import Path
from typing import Any

from spanlift.cli.options import (
    add_backbone_options,
    add_field_options,
    add_ray_options,
    add_solver_options,
    add_tracking_options,
    among,
    command,
    parse_settings,
)
from spanlift.cli.paths import FOLDER, INPUT, path_option
from spanlift.seeds import FID_FIRST_SEED

REFERENCE_OPTIONS = ("reference", "reference_samples")


def add_commands(sub: Any) -> None:
    summary = "score one solver on parallel Ray evaluator actors"
    command(sub, "eval", summary, cmd_eval, add_eval_options, kept=eval_kept)


def eval_kept(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves: no result; the FID reference statistics once computed."""
    return (
        "nothing was recorded; FID reference statistics already computed stay cached in "
        f"{args.cache_dir}"
    )


def add_eval_options(ev: argparse.ArgumentParser) -> None:
    from spanlift.platform.detectors.registry import DETECTORS
    from spanlift.platform.evaluation.metrics import METRICS
    from spanlift.platform.run_eval import SAMPLES_CPU, SAMPLES_GPU
    from spanlift.platform.sweep.config import EvaluationConfig

    add_backbone_options(ev)
    add_solver_options(ev)
    path_option(ev, "--checkpoint", INPUT, help="fitted solver (spanlift fit / sweep output)")
    default = ",".join(name for name, metric in METRICS if metric.default)
    ev.add_argument("--metrics", default=default, help=f"comma-separated, of {among(METRICS)}")
    ev.add_argument(
        "--samples",
        type=int,
        help=f"samples scored (default {SAMPLES_GPU} with CUDA, the papers' FID protocol; "
        f"{SAMPLES_CPU} without)",
    )
    ev.add_argument(
        "--seed-offset",
        type=int,
        default=FID_FIRST_SEED,
        help="seed of the first sample; sample i has seed offset + i",
    )
    add_field_options(ev, EvaluationConfig, ("evaluators",), defaults={"evaluators": 2})
    ev.add_argument(
        "--detector",
        help=f"FID detector ({among(DETECTORS)}; digits is the digits feature loss's own); "
        "default: the backbone's (digits: digits_eval)",
    )
    path_option(ev, "--detector-weights", INPUT, help="detector weights file")
    ev.add_argument(
        "--batch-size",
        type=batch_size,
        default="auto",
        help="samples drawn, decoded and scored at once: a number, or auto (the most, up to "
        "256, that a pass is predicted to hold in the evaluator device's free memory)",
    )
    add_field_options(ev, EvaluationConfig, REFERENCE_OPTIONS)
    add_metric_options(ev)
    path_option(ev, "--cache-dir", FOLDER, default=Path("runs/eval-cache"), help="cache folder")
    ev.add_argument("--experiment", help="MLflow experiment (default: eval-<backbone>)")
    add_tracking_options(ev)
    add_ray_options(ev)


def add_metric_options(ev: argparse.ArgumentParser) -> None:
    """Each metric's options (`evaluation/metrics/`), as a sweep's evaluation section has them:
    `--lpips-weights`, `--skill-convention`, …; an option that is a path must exist."""
    from spanlift.platform.evaluation.metrics import METRICS, path_fields

    for _, metric in METRICS:
        paths = {name: INPUT for name in path_fields(metric.Options)}
        add_field_options(ev, metric.Options, metric.option_names(), paths=paths)


def metric_options(args: argparse.Namespace) -> dict[str, Any]:
    """The values of every metric's options (`add_metric_options`), by key."""
    from spanlift.platform.evaluation.metrics import METRICS

    return {name: getattr(args, name) for _, metric in METRICS for name in metric.option_names()}


def batch_size(value: str) -> int | str:
    """`--batch-size`: a positive integer, or auto."""
    if value == "auto":
        return value
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {value!r}")
    return int(value)


def cmd_eval(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.evaluation.evaluator import EvaluatorSetup
    from spanlift.platform.evaluation.metrics.reference import ReferenceSet
    from spanlift.platform.run_eval import EvalRequest, Tracking, default_samples, run_eval
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri
    from spanlift.solvers import SolverSpec

    backbone_options = parse_settings(args.backbone_option)
    detector = args.detector or load_backbone(args.backbone, **backbone_options).fid_detector
    experiment = args.experiment or f"eval-{args.backbone}"
    request = EvalRequest(
        setup=EvaluatorSetup(
            args.backbone,
            detector,
            args.cache_dir,
            backbone_options=backbone_options,
            detector_weights=args.detector_weights,
            batch_size=args.batch_size,
            options=metric_options(args),
        ),
        spec=SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set)),
        checkpoint=args.checkpoint,
        metrics=tuple(m.strip() for m in args.metrics.split(",") if m.strip()),
        samples=default_samples() if args.samples is None else args.samples,
        evaluators=args.evaluators,
        reference=ReferenceSet.from_setting(args.reference, args.reference_samples),
        tracking=None
        if args.no_tracking
        else Tracking(resolve_tracking_uri(args.tracking_uri), experiment),
        first_seed=args.seed_offset,
    )
    report = run_eval(request, Path("runs"), args.address, args.num_cpus)
    for line in report.lines():
        print(line)
    for name, reason in (report.samples.unavailable if report.samples else {}).items():
        print(f"{name} unavailable: {reason}")
    print(f"evaluated in {report.seconds:.0f} s")
    if report.run_id:
        print(f"MLflow run {report.run_id} in experiment {experiment!r} at {request.tracking.uri}")
