"""The `spanlift` command line.

    spanlift solvers                      list solvers and their settings
    spanlift backbones                    list backbones and what each needs
    spanlift fit --backbone gmm --solver spanlift --nfe 3 --set kernel_size=5
    spanlift demo                         fit and compare solvers on the digits backbone
    spanlift sweep sweeps/digits_nfe.yaml [--address auto] [--resume | --restart]
    spanlift eval --backbone digits --solver ipndm --nfe 3 --metrics fid --samples 10000
    spanlift leaderboard --experiment digits-nfe [--metric rmse] [--by-fit] [--csv F] [--plot F]
    spanlift nowcast synth --events 64 --out data/sevir_synth     synthetic storms, SEVIR layout
    spanlift nowcast prepare --sevir-root /data/sevir --out data/sevir_lr.zarr
    spanlift nowcast eval --data data/sevir_synth --solvers paper --nfe 5 --teacher-nfe 100
    spanlift analyze halvorsen|ratio|out-of-span   the paper's analyses (PNG, CSV, MLflow run)
    spanlift train-digits                 retrain the embedded digits denoiser
    spanlift train-nowcast                retrain the embedded nowcasting denoiser
    spanlift train-digits-detector [--detector digits_eval]   retrain a digits FID detector

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
from spanlift.platform.analysis.commands import add_analyze_commands

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
    from spanlift.backbones import BACKBONES, backbone_options

    for name, cls in BACKBONES:
        options = ", ".join(f"{k}={v!r}" for k, v in backbone_options(cls).items())
        print(f"{name:<14} {inspect.getdoc(cls).splitlines()[0]}")
        print(f"{'':<14} needs: {cls.needs}")
        print(f"{'':<14} options: {options or '-'}")


def teacher_sets(args: argparse.Namespace, backbone: Any) -> tuple[Any, Any]:
    from spanlift.platform.sampling.teacher import load_or_generate
    from spanlift.seeds import TEST_SEED_OFFSET

    train = load_or_generate(args.cache, backbone, range(args.train_samples))
    test_seeds = range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + args.test_samples)
    return train, load_or_generate(args.cache, backbone, test_seeds)


def fit_settings(args: argparse.Namespace) -> Any:
    from spanlift.platform.fitting.fit import FitSettings

    if args.train_samples < 1 or args.test_samples < 1:
        raise SettingsError(
            f"--train-samples and --test-samples must be positive, got {args.train_samples} and {args.test_samples}"
        )
    for pair in args.loss_option:
        if not pair.partition("=")[0] or "=" not in pair:
            raise SettingsError(f"--loss-option expects key=value, got {pair!r}")
    return FitSettings(
        iterations=args.iterations,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        loss=args.loss,
        loss_options=parse_settings(args.loss_option),
        weight_decay=args.weight_decay,
        validation=args.validation,
    )


def cmd_fit(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import compare, format_table
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.loading import build

    spec = SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set))
    settings = fit_settings(args)
    backbone = load_backbone(args.backbone, **parse_settings(args.backbone_option))
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
    backbone = load_backbone(args.backbone, **parse_settings(args.backbone_option))
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
NOWCAST_UNET = "spanlift/backbones/weights/nowcast_unet.pt"
PAPER_SOLVERS = "all six, spanlift+pooled and spanlift+observed"
DETECTOR = "spanlift/platform/detectors/weights/<detector>_detector.pt"
ALEXNET_HINT = "~/.cache/torch/hub/checkpoints/alexnet-owt-7be5be79.pth"


def cmd_eval(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.evaluation.evaluator import EvaluatorSetup
    from spanlift.platform.evaluation.reference import ReferenceSet
    from spanlift.platform.evaluation.run_eval import (
        EvalRequest,
        Tracking,
        default_samples,
        run_eval,
    )
    from spanlift.platform.tracking.runs import resolve_tracking_uri
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
            lpips_weights=args.lpips_weights,
            image_reward_weights=args.image_reward_weights,
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


def cmd_nowcast_synth(args: argparse.Namespace) -> None:
    from spanlift.nowcasting.synthetic import write_synthetic_sevir

    if args.events < 1:
        raise SettingsError(f"--events: expected a positive number, got {args.events}")
    root = write_synthetic_sevir(args.out, events=args.events, seed=args.seed)
    print(f"wrote {args.events} synthetic storm events in SEVIR's layout to {root}")


def cmd_nowcast_prepare(args: argparse.Namespace) -> None:
    from spanlift.nowcasting.store import prepare_sevir_lr

    path = prepare_sevir_lr(args.sevir_root, args.out, stride=args.stride)
    print(f"wrote SEVIR-LR windows to {path}")


def cmd_nowcast_eval(args: argparse.Namespace) -> None:
    from spanlift.platform.fitting.fit import FitSettings
    from spanlift.platform.nowcast_suite import (
        SuiteRequest,
        format_table,
        parse_solvers,
        run_suite,
    )
    from spanlift.platform.tracking.runs import resolve_tracking_uri
    from spanlift.solvers import SolverSpec

    for name in ("train_samples", "evaluators", "teacher_nfe", "nfe"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise SettingsError(f"{flag}: expected a positive number, got {getattr(args, name)}")
    fit = FitSettings(
        iterations=args.iterations, batch_size=args.batch_size, lr=args.lr, seed=args.seed
    )
    experiment = args.experiment or f"nowcast-{Path(args.data).name.replace('_', '-')}"
    request = SuiteRequest(
        data=args.data,
        rows=tuple(parse_solvers(args.solvers, args.nfe, fit)),
        teacher=SolverSpec("euler", args.teacher_nfe),
        train_samples=args.train_samples,
        test_samples=args.test_samples,
        evaluators=args.evaluators,
        cache=args.cache,
        out=args.out,
        weights=args.weights,
        lpips_weights=args.lpips_weights,
        tracking_uri=None if args.no_tracking else resolve_tracking_uri(args.tracking_uri),
        experiment=experiment,
    )
    result = run_suite(request, args.address, args.num_cpus)
    samples = next(iter(result.reports.values())).samples
    print(f"\nskill on {samples} held-out windows of {args.data} (VIL ≥ threshold, counts summed)")
    print(format_table(result))
    for reason in next(iter(result.reports.values())).unavailable.values():
        print(reason)
    print("wrote " + ", ".join(str(f) for f in result.files))
    if result.run_ids:
        print(f"MLflow: {len(result.run_ids)} runs in experiment {experiment!r}; rank them:")
        print(f"  spanlift leaderboard --experiment {experiment} --metric csi16")


def cmd_train_nowcast(args: argparse.Namespace) -> None:
    from spanlift.backbones.train_nowcast import train_nowcast

    print(f"wrote {train_nowcast(args.data, args.out, steps=args.steps, seed=args.seed)}")


def cmd_train_digits(args: argparse.Namespace) -> None:
    from spanlift.backbones.train_digits import train_digits

    print(f"wrote {train_digits(args.out, steps=args.steps, seed=args.seed)}")


def cmd_train_digits_detector(args: argparse.Namespace) -> None:
    from spanlift.platform.detectors.registry import DIGITS_SPECS
    from spanlift.platform.detectors.train_digits_detector import train_digits_detector

    spec = DIGITS_SPECS[args.detector]
    out = args.out or spec.weights
    path, accuracy = train_digits_detector(spec, out, steps=args.steps, seed=args.seed)
    print(f"wrote {path} (held-out accuracy {accuracy:.4f})")


BACKBONE_OPTION_HELP = "backbone option, e.g. weights=model.pkl (see `spanlift backbones`)"


def add_fit_options(p: argparse.ArgumentParser, out: str, nfe: Any, backbone: str) -> None:
    p.add_argument(
        "--backbone", default=backbone, help="registered backbone (see `spanlift backbones`)"
    )
    p.add_argument(
        "--backbone-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=BACKBONE_OPTION_HELP,
    )
    p.add_argument(
        "--schedule",
        default="edm",
        help="σ grid: edm, logsnr, time or edm_to_zero (EDM's own protocol)",
    )
    p.add_argument("--iterations", type=int, default=300, help="fit iterations (default 300)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (0: Adam)")
    p.add_argument(
        "--validation",
        type=float,
        default=0.1,
        help="fraction of the training teacher set held out; the fit keeps the state with the "
        "lowest loss on it, its starting state included (0: keep the last state)",
    )
    p.add_argument(
        "--loss",
        default="mse",
        help="endpoint loss: mse, inception or digits (detector features), pooled, or latent "
        "(latent MSE + DINOv2 features; needs --loss-option dinov2_path=FOLDER)",
    )
    p.add_argument(
        "--loss-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="loss option, e.g. dinov2_path=models/dinov2-base or c=0.1 (values read as YAML)",
    )
    p.add_argument("--train-samples", type=int, default=1024, help="teacher endpoints to fit on")
    p.add_argument("--test-samples", type=int, default=256, help="held-out endpoints to score on")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="teacher cache folder")
    p.add_argument("--out", type=Path, default=Path(out), help="folder for checkpoints")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="spanlift", description=__doc__.split("\n")[0])
    sub = root.add_subparsers(dest="command", required=True)
    sub.add_parser("solvers", help="list solvers and their settings").set_defaults(run=cmd_solvers)
    sub.add_parser("backbones", help="list backbones and what each needs").set_defaults(
        run=cmd_backbones
    )

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
    ev.add_argument(
        "--backbone-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=BACKBONE_OPTION_HELP,
    )
    ev.add_argument("--solver", required=True, help="registered solver (see `spanlift solvers`)")
    ev.add_argument("--nfe", type=int, required=True, help="model evaluations the solver spends")
    ev.add_argument(
        "--schedule",
        default="edm",
        help="σ grid: edm, logsnr, time or edm_to_zero (EDM's own protocol)",
    )
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--checkpoint", type=Path, help="fitted solver (spanlift fit / sweep output)")
    ev.add_argument(
        "--metrics",
        default="fid",
        help="comma-separated, of fid, lpips, image_reward, latency, diagnostics (default fid)",
    )
    ev.add_argument(
        "--samples",
        type=int,
        help="samples scored (default 50000 with CUDA, the papers' FID protocol; 10000 without)",
    )
    ev.add_argument("--evaluators", type=int, default=2, help="evaluator actors (default 2)")
    ev.add_argument(
        "--detector",
        help="FID detector: inception, digits_eval or digits (the digits feature loss's own); "
        "default: the backbone's (digits: digits_eval)",
    )
    ev.add_argument("--detector-weights", type=Path, help="detector weights file")
    ev.add_argument(
        "--reference",
        default="dataset",
        help="FID reference: dataset, teacher, or a statistics .npz such as NVlabs' "
        "cifar10-32x32.npz (default dataset)",
    )
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

    add_nowcast_commands(sub)
    add_analyze_commands(sub)

    board = sub.add_parser("leaderboard", help="rank solvers of an experiment from MLflow")
    board.add_argument("--experiment", required=True, help="MLflow experiment (the sweep's)")
    board.add_argument("--metric", default="rmse", help="metric to rank by (default rmse)")
    board.add_argument("--mode", choices=["min", "max"], help="default: by metric")
    board.add_argument("--tracking-uri", help=f"MLflow store (default: {TRACKING_DEFAULTS})")
    board.add_argument("--by-fit", action="store_true", help="rank fits of one budget together")
    board.add_argument("--csv", type=Path, help="also write the table as CSV")
    board.add_argument("--plot", type=Path, help="also plot metric vs NFE per solver (PNG)")
    board.set_defaults(run=cmd_leaderboard)

    train = sub.add_parser("train-digits", help="retrain the embedded digits denoiser")
    train.add_argument("--steps", type=int, default=4000)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--out", type=Path, default=Path(DIGITS_UNET), help=f"default: {DIGITS_UNET}"
    )
    train.set_defaults(run=cmd_train_digits)
    train = sub.add_parser("train-digits-detector", help="retrain a digits FID detector")
    train.add_argument(
        "--detector",
        choices=["digits", "digits_eval"],
        default="digits",
        help="digits: the feature loss's detector; digits_eval: the evaluation one (default digits)",
    )
    train.add_argument("--steps", type=int, default=1500)
    train.add_argument("--seed", type=int, help="default: the detector's (digits 0, digits_eval 1)")
    train.add_argument("--out", type=Path, help=f"default: its committed weights, {DETECTOR}")
    train.set_defaults(run=cmd_train_digits_detector)
    train = sub.add_parser("train-nowcast", help="retrain the embedded nowcasting denoiser")
    train.add_argument("--data", type=Path, default=Path("data/sevir_train"), help="SEVIR folder")
    train.add_argument("--steps", type=int, default=3000)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--out", type=Path, default=Path(NOWCAST_UNET), help=f"default: {NOWCAST_UNET}"
    )
    train.set_defaults(run=cmd_train_nowcast)
    return root


def add_nowcast_commands(sub: Any) -> None:
    """`spanlift nowcast synth | prepare | eval`."""
    nowcast = sub.add_parser("nowcast", help="the precipitation-nowcasting suite (SEVIR)")
    steps = nowcast.add_subparsers(dest="nowcast", required=True)
    synth = steps.add_parser("synth", help="write synthetic storms in SEVIR's layout")
    synth.add_argument("--events", type=int, default=64, help="storm events (default 64)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--out", type=Path, default=Path("data/sevir_synth"))
    synth.set_defaults(run=cmd_nowcast_synth)

    prepare = steps.add_parser("prepare", help="SEVIR → SEVIR-LR windows in Zarr or NetCDF, once")
    prepare.add_argument("--sevir-root", type=Path, required=True, help="folder with CATALOG.csv")
    prepare.add_argument("--out", type=Path, required=True, help="a .zarr or .nc path")
    prepare.add_argument("--stride", type=int, default=12, help="frames between windows")
    prepare.set_defaults(run=cmd_nowcast_prepare)

    ev = steps.add_parser("eval", help="the paper's nowcasting table: fit, score, record")
    ev.add_argument(
        "--data", type=Path, default=Path("data/sevir_synth"), help="SEVIR folder or store"
    )
    ev.add_argument(
        "--solvers",
        default="ddim,dpm_solver_pp,spanlift",
        help="comma-separated of ddim, dpm_solver_pp, unipc, ipndm, dyweight, spanlift, each "
        "optionally +pooled (pooled-field loss) and/or +observed (fit to observed frames); "
        f"or 'paper' for {PAPER_SOLVERS}",
    )
    ev.add_argument("--nfe", type=int, default=5, help="steps of the few-step solvers (default 5)")
    ev.add_argument("--teacher-nfe", type=int, default=100, help="DDIM teacher steps (default 100)")
    ev.add_argument("--train-samples", type=int, default=256, help="teacher samples to fit on")
    ev.add_argument("--test-samples", type=int, default=0, help="default: every held-out window")
    ev.add_argument("--iterations", type=int, default=200, help="fit iterations (default 200)")
    ev.add_argument("--batch-size", type=int, default=16)
    ev.add_argument("--lr", type=float, default=5e-3)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--weights", type=Path, help=f"denoiser weights (default {NOWCAST_UNET})")
    ev.add_argument("--evaluators", type=int, default=2, help="evaluator actors (default 2)")
    ev.add_argument("--lpips-weights", type=Path, help=f"AlexNet weights (default {ALEXNET_HINT})")
    ev.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="teacher cache folder")
    ev.add_argument("--out", type=Path, default=Path("runs/nowcast"), help="results folder")
    ev.add_argument("--experiment", help="MLflow experiment (default: nowcast-<data folder>)")
    ev.add_argument("--tracking-uri", help=f"MLflow store (default: {TRACKING_DEFAULTS})")
    ev.add_argument("--no-tracking", action="store_true", help="do not record MLflow runs")
    ev.add_argument("--address", help="Ray cluster address (default: a local Ray)")
    ev.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    ev.set_defaults(run=cmd_nowcast_eval)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except SpanliftError as exc:
        print(f"spanlift: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
