"""The `spanlift` command line.

    spanlift solvers                      list solvers and their settings
    spanlift backbones                    list backbones
    spanlift fit --backbone gmm --solver spanlift --nfe 3 --set kernel_size=5
    spanlift demo                         fit and compare solvers on the digits backbone
    spanlift sweep sweeps/digits_nfe.yaml [--address auto] [--resume | --restart]
    spanlift eval --backbone digits --solver ipndm --nfe 3 --metrics fid --samples 10000
    spanlift leaderboard --experiment digits-nfe [--metric rmse] [--by-fit] [--csv F] [--plot F]
    spanlift train-digits                 retrain the embedded digits denoiser
    spanlift train-digits-detector        retrain the digits FID detector

User errors print one line and exit with status 2; bugs keep their traceback.
"""

import argparse
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from spanlift.errors import SettingsError, SpanliftError

DEFAULT_CACHE = Path(".spanlift") / "cache"
TRACKING_DEFAULTS = "$MLFLOW_TRACKING_URI, else the sweep file's, else sqlite:///mlflow.db"


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs into a dict; values are read as YAML (3 → int, true → bool, {..} → dict)."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SettingsError(f"--set expects key=value, got {pair!r}")
        settings[key] = yaml.safe_load(value)
    return settings


def cmd_solvers(args: argparse.Namespace) -> None:
    from spanlift.solvers import SOLVERS, solver_settings

    for name, cls in SOLVERS:
        summary = inspect.getdoc(cls).splitlines()[0]
        settings = ", ".join(f"{k}={v!r}" for k, v in solver_settings(cls).items())
        print(f"{name:<14} {summary}\n{'':<14} settings: {settings or '-'}")


def cmd_backbones(args: argparse.Namespace) -> None:
    from spanlift.backbones import BACKBONES

    for name, cls in BACKBONES:
        print(f"{name:<10} {inspect.getdoc(cls).splitlines()[0]}")


def teacher_sets(args: argparse.Namespace, backbone: Any) -> tuple[Any, Any]:
    from spanlift.platform.fitting.teacher import load_or_generate

    train = load_or_generate(args.cache, backbone, range(args.train_samples))
    test_seeds = range(10**9, 10**9 + args.test_samples)  # disjoint from training seeds
    return train, load_or_generate(args.cache, backbone, test_seeds)


def fit_settings(args: argparse.Namespace) -> Any:
    from spanlift.platform.fitting.fit import FitSettings

    if args.train_samples < 1 or args.test_samples < 1:
        raise SettingsError(
            f"--train-samples and --test-samples must be positive, got {args.train_samples} and {args.test_samples}"
        )
    return FitSettings(
        iterations=args.iterations,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        loss=args.loss,
    )


def cmd_fit(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import compare, format_table
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.loading import build

    spec = SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set))
    settings = fit_settings(args)
    backbone = load_backbone(args.backbone)
    build(spec, backbone)  # reject a bad spec before generating the teacher
    train, test = teacher_sets(args, backbone)
    rows = compare([spec], backbone, train, test, settings, args.out)
    print(format_table(rows))
    if rows[0].checkpoint:
        print(f"checkpoint: {rows[0].checkpoint}")


DEMO_SOLVERS = [
    ("euler", {}),
    ("heun", {}),
    ("ipndm", {"order": 3}),
    ("dpm_solver_pp", {"order": 3}),
    ("unipc", {"order": 3}),
    ("dyweight", {"order": 3}),
    ("spanlift", {"base": "dyweight", "operator": "spatial", "kernel_size": 3}),
]


def cmd_demo(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import compare, format_table
    from spanlift.solvers import SolverSpec

    settings = fit_settings(args)
    backbone = load_backbone(args.backbone)
    train, test = teacher_sets(args, backbone)
    specs = [
        SolverSpec(name, nfe, args.schedule, settings_)
        for nfe in args.nfe
        for name, settings_ in DEMO_SOLVERS
        if name != "heun" or nfe % 2 == 1  # Heun spends 2N − 1 evaluations
    ]
    grid = args.out / "samples.png"
    rows = compare(specs, backbone, train, test, settings, args.out, grid=grid)
    print(
        f"\nEndpoint RMSE against the teacher (ipndm order 4, NFE 35) on {len(test)} held-out seeds:"
    )
    print(format_table(rows))
    print(f"samples (teacher first, same seeds per column): {grid}")


EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
"""`spanlift sweep` exits 1 when a configuration failed, 130 (as after Ctrl-C) when interrupted
with configurations left to run, so schedulers and CI notice."""


def cmd_sweep(args: argparse.Namespace) -> int:
    from spanlift.platform.sweep.driver import run_sweep
    from spanlift.platform.tracking.runs import resolve_tracking_uri

    if args.resume and args.restart:
        raise SettingsError("--resume and --restart exclude each other")
    summary = run_sweep(
        args.file,
        address=args.address,
        resume=args.resume,
        restart=args.restart,
        tracking_uri=args.tracking_uri,
        storage=args.storage,
        num_cpus=args.num_cpus,
        reuse_across_versions=args.reuse_across_versions,
        verbose=args.verbose,
    )
    print(
        f"\nsweep {summary.experiment}: {summary.finished}/{summary.configurations} "
        f"configurations finished ({summary.reused} taken from MLflow) in "
        f"{summary.wall_seconds:.0f} s; teacher generations: {summary.teacher_generations}; "
        f"model loads: {summary.model_loads}"
    )
    for failure in summary.failed:
        print(f"failed: {failure}")
    if summary.remaining:
        print(
            f"interrupted: {summary.remaining} of {summary.configurations} configurations "
            "remain; continue with:\n"
            f"  spanlift sweep {args.file} --resume"
        )
        return EXIT_INTERRUPTED
    default_uri = resolve_tracking_uri()  # where `spanlift leaderboard` looks by itself
    if summary.best:
        print("best: " + ", ".join(f"{k} {v}" for k, v in summary.best.items()))
    print(f"rank them: spanlift leaderboard --experiment {summary.experiment}", end="")
    print(f" --tracking-uri {summary.tracking_uri}" if summary.tracking_uri != default_uri else "")
    return EXIT_FAILED if summary.failed else 0


def cmd_leaderboard(args: argparse.Namespace) -> None:
    from spanlift.platform.tracking import leaderboard as board
    from spanlift.platform.tracking.metrics import default_mode
    from spanlift.platform.tracking.runs import connect, resolve_tracking_uri

    client = connect(resolve_tracking_uri(args.tracking_uri))
    mode = args.mode or default_mode(args.metric)
    entries = board.leaderboard(client, args.experiment, args.metric, mode, args.by_fit)
    better = "lower" if mode == "min" else "higher"
    print(
        f"{args.experiment}: best configuration per solver, ranked by {args.metric} ({better} is better)"
    )
    print(board.format_leaderboard(entries, args.metric))
    if args.csv:
        print(f"csv: {board.write_csv(entries, args.csv)}")
    if args.plot:
        print(f"plot: {board.plot_leaderboard(entries, args.metric, args.plot)}")


DIGITS_UNET = "spanlift/backbones/weights/digits_unet.pt"
DETECTOR = "spanlift/platform/evaluation/weights/digits_detector.pt"
ALEXNET_HINT = "~/.cache/torch/hub/checkpoints/alexnet-owt-7be5be79.pth"


def cmd_eval(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.evaluation.evaluator import EvaluatorSetup
    from spanlift.platform.evaluation.reference import ReferenceSet
    from spanlift.platform.evaluation.run_eval import EvalRequest, Tracking, run_eval
    from spanlift.platform.tracking.runs import resolve_tracking_uri
    from spanlift.solvers import SolverSpec

    detector = args.detector or load_backbone(args.backbone).fid_detector
    experiment = args.experiment or f"eval-{args.backbone}"
    request = EvalRequest(
        setup=EvaluatorSetup(
            args.backbone,
            detector,
            args.cache_dir,
            detector_weights=args.detector_weights,
            lpips_weights=args.lpips_weights,
            image_reward_weights=args.image_reward_weights,
        ),
        spec=SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set)),
        checkpoint=args.checkpoint,
        metrics=tuple(m.strip() for m in args.metrics.split(",") if m.strip()),
        samples=args.samples,
        evaluators=args.evaluators,
        reference=ReferenceSet(args.reference, args.reference_samples),
        tracking=None
        if args.no_tracking
        else Tracking(resolve_tracking_uri(args.tracking_uri), experiment),
    )
    report = run_eval(request, Path("runs"), args.address, args.num_cpus)
    if report.diagnostics is not None:
        print(report.diagnostics.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print("wrote " + ", ".join(str(f) for f in report.files))
    if report.samples is not None:
        print_sample_report(report.samples, args.evaluators)
    print(f"evaluated in {report.seconds:.0f} s")
    if report.run_id:
        print(f"MLflow run {report.run_id} in experiment {experiment!r} at {request.tracking.uri}")


def print_sample_report(samples: Any, evaluators: int) -> None:
    if samples.fid is not None:
        fid = samples.fid
        print(
            f"fid {fid.fid:.4f}  ({fid.samples} samples against {fid.reference}; "
            f"detector {fid.detector})"
        )
    for name, value in samples.means.items():
        against = samples.measures.get(f"{name}.reference")
        print(f"{name} {value:.4f}" + (f"  (against {against})" if against else ""))
    for name, reason in samples.unavailable.items():
        print(f"{name} unavailable: {reason}")
    print(
        f"sampling: {samples.latency_ms_per_image:.3f} ms/image per evaluator, "
        f"{samples.throughput_images_per_s:.1f} images/s over {evaluators} evaluators "
        f"on {samples.device}"
    )


def cmd_train_digits(args: argparse.Namespace) -> None:
    from spanlift.backbones.train_digits import train_digits

    print(f"wrote {train_digits(args.out, steps=args.steps, seed=args.seed)}")


def cmd_train_digits_detector(args: argparse.Namespace) -> None:
    from spanlift.platform.evaluation.train_digits_detector import train_digits_detector

    path, accuracy = train_digits_detector(args.out, steps=args.steps, seed=args.seed)
    print(f"wrote {path} (held-out accuracy {accuracy:.4f})")


def add_fit_options(p: argparse.ArgumentParser, out: str, nfe: Any, backbone: str) -> None:
    p.add_argument(
        "--backbone", default=backbone, help="registered backbone (see `spanlift backbones`)"
    )
    p.add_argument("--schedule", default="edm", help="edm, logsnr or time")
    p.add_argument("--iterations", type=int, default=300, help="fit iterations (default 300)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--loss", default="mse", help="endpoint loss: mse, inception or digits (detector features)"
    )
    p.add_argument("--train-samples", type=int, default=1024, help="teacher endpoints to fit on")
    p.add_argument("--test-samples", type=int, default=256, help="held-out endpoints to score on")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="teacher cache folder")
    p.add_argument("--out", type=Path, default=Path(out), help="folder for checkpoints")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="spanlift", description=__doc__.split("\n")[0])
    sub = root.add_subparsers(dest="command", required=True)
    sub.add_parser("solvers", help="list solvers and their settings").set_defaults(run=cmd_solvers)
    sub.add_parser("backbones", help="list backbones").set_defaults(run=cmd_backbones)

    fit = sub.add_parser("fit", help="fit one solver by endpoint teacher matching and score it")
    fit.add_argument("--solver", required=True, help="registered solver (see `spanlift solvers`)")
    fit.add_argument("--nfe", type=int, required=True, help="model evaluations the solver spends")
    fit.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="solver setting"
    )
    add_fit_options(fit, out="runs/fit", nfe=None, backbone="digits")
    fit.set_defaults(run=cmd_fit)

    demo = sub.add_parser("demo", help="fit and compare solvers on the embedded digits backbone")
    demo.add_argument("--nfe", type=int, nargs="+", default=[3], help="NFE budgets (default 3)")
    add_fit_options(demo, out="runs/demo", nfe=[3], backbone="digits")
    demo.set_defaults(run=cmd_demo)

    sweep = sub.add_parser("sweep", help="run a sweep YAML on local Ray or a Ray cluster")
    sweep.add_argument("file", help="sweep YAML, e.g. sweeps/digits_nfe.yaml")
    sweep.add_argument(
        "--address", help="Ray cluster to join (`auto`); default: $RAY_ADDRESS, else a local Ray"
    )
    sweep.add_argument("--resume", action="store_true", help="continue an interrupted sweep")
    sweep.add_argument(
        "--restart", action="store_true", help="run again; finished configurations are reused"
    )
    sweep.add_argument("--tracking-uri", help=f"MLflow store (default: {TRACKING_DEFAULTS})")
    sweep.add_argument(
        "--reuse-across-versions",
        action="store_true",
        help="reuse finished runs and fitted weights made by another version of the code",
    )
    sweep.add_argument("--storage", help="results folder (default: the YAML's storage)")
    sweep.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    sweep.add_argument(
        "--verbose",
        action="store_true",
        help="Ray's and Tune's full console output instead of the progress view",
    )
    sweep.set_defaults(run=cmd_sweep)

    ev = sub.add_parser("eval", help="score one solver on parallel Ray evaluator actors")
    ev.add_argument("--backbone", default="digits", help="registered backbone (default digits)")
    ev.add_argument("--solver", required=True, help="registered solver (see `spanlift solvers`)")
    ev.add_argument("--nfe", type=int, required=True, help="model evaluations the solver spends")
    ev.add_argument("--schedule", default="edm", help="edm, logsnr or time")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--checkpoint", type=Path, help="fitted solver (spanlift fit / sweep output)")
    ev.add_argument(
        "--metrics",
        default="fid",
        help="comma-separated, of fid, lpips, image_reward, latency, diagnostics (default fid)",
    )
    ev.add_argument("--samples", type=int, default=10_000, help="samples scored (default 10000)")
    ev.add_argument("--evaluators", type=int, default=2, help="evaluator actors (default 2)")
    ev.add_argument("--detector", help="FID detector: digits or inception (default: backbone's)")
    ev.add_argument("--detector-weights", type=Path, help="detector weights file")
    ev.add_argument("--reference", default="dataset", choices=["dataset", "teacher"])
    ev.add_argument("--reference-samples", type=int, default=10_000, help="teacher reference size")
    ev.add_argument("--cache-dir", type=Path, default=Path("runs/eval-cache"))
    ev.add_argument(
        "--lpips-weights",
        type=Path,
        help=f"AlexNet weights for LPIPS (default: torch hub cache, {ALEXNET_HINT})",
    )
    ev.add_argument(
        "--image-reward-weights",
        type=Path,
        help="folder with ImageReward.pt and med_config.json (default ~/.cache/ImageReward)",
    )
    ev.add_argument("--experiment", help="MLflow experiment (default: eval-<backbone>)")
    ev.add_argument("--tracking-uri", help=f"MLflow store (default: {TRACKING_DEFAULTS})")
    ev.add_argument("--no-tracking", action="store_true", help="do not record an MLflow run")
    ev.add_argument("--address", help="Ray cluster address (default: a local Ray)")
    ev.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    ev.set_defaults(run=cmd_eval)

    board = sub.add_parser("leaderboard", help="rank solvers of an experiment from MLflow")
    board.add_argument("--experiment", required=True, help="MLflow experiment (the sweep's)")
    board.add_argument("--metric", default="rmse", help="metric to rank by (default rmse)")
    board.add_argument("--mode", choices=["min", "max"], help="default: by metric")
    board.add_argument("--tracking-uri", help=f"MLflow store (default: {TRACKING_DEFAULTS})")
    board.add_argument("--by-fit", action="store_true", help="rank fits of one budget together")
    board.add_argument("--csv", type=Path, help="also write the table as CSV")
    board.add_argument("--plot", type=Path, help="also plot metric vs NFE per solver (PNG)")
    board.set_defaults(run=cmd_leaderboard)

    trainings = [
        ("train-digits", "the embedded digits denoiser", 4000, DIGITS_UNET, cmd_train_digits),
        (
            "train-digits-detector",
            "the digits FID detector",
            1500,
            DETECTOR,
            cmd_train_digits_detector,
        ),
    ]
    for name, what, steps, out, run in trainings:
        train = sub.add_parser(name, help=f"retrain {what}")
        train.add_argument("--steps", type=int, default=steps)
        train.add_argument("--seed", type=int, default=0)
        train.add_argument("--out", type=Path, default=Path(out), help=f"default: {out}")
        train.set_defaults(run=run)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except SpanliftError as exc:
        print(f"spanlift: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
