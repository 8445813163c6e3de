"""`spanlift nowcast synth | prepare | eval`: the precipitation-nowcasting suite (SEVIR)."""

import argparse
from pathlib import Path
from typing import Any

from spanlift.cli.options import (
    DEFAULT_CACHE,
    add_backbone_options,
    add_field_options,
    add_ray_options,
    add_tracking_options,
    command,
    field_values,
    parse_settings,
    positive,
)
from spanlift.cli.paths import FOLDER, INPUT, OUTPUT, path_option

NOWCAST_UNET = "spanlift/backbones/weights/nowcast_unet.pt"
ALEXNET_HINT = "~/.cache/torch/hub/checkpoints/alexnet-owt-7be5be79.pth"
PAPER_SOLVERS = "all six, spanlift+pooled and spanlift+observed"
FIT_OPTIONS = ("iterations", "batch_size", "lr", "seed")
NOWCAST_FIT = {"iterations": 200, "batch_size": 16}
"""The suite's fit settings where they differ from FitSettings' defaults."""
SPLIT_OPTIONS = ("split", "start", "end")


def add_commands(sub: Any) -> None:
    nowcast = sub.add_parser("nowcast", help="the precipitation-nowcasting suite (SEVIR)")
    steps = nowcast.add_subparsers(dest="nowcast", required=True)
    add_synth(steps)
    add_prepare(steps)
    add_eval(steps)


def add_synth(steps: Any) -> None:
    summary = "write synthetic storms in SEVIR's layout"
    command(steps, "synth", summary, cmd_synth, synth_options, kept=files_kept)


def files_kept(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves of a data set being written: files that may be incomplete."""
    return f"{args.out} may hold an incomplete data set; run the command again to write it whole"


def synth_options(synth: argparse.ArgumentParser) -> None:
    synth.add_argument("--events", type=int, default=64, help="storm events")
    synth.add_argument("--seed", type=int, default=0, help="seed of the storms")
    path_option(synth, "--out", FOLDER, default=Path("data/sevir_synth"), help="folder")


def add_prepare(steps: Any) -> None:
    summary = "SEVIR → SEVIR-LR windows in Zarr or NetCDF, once"
    command(steps, "prepare", summary, cmd_prepare, prepare_options, kept=files_kept)


def prepare_options(prepare: argparse.ArgumentParser) -> None:
    from spanlift.nowcasting.windows import STRIDE

    path_option(prepare, "--sevir-root", INPUT, required=True, help="folder with CATALOG.csv")
    path_option(prepare, "--out", OUTPUT, required=True, help="a .zarr or .nc path")
    prepare.add_argument(
        "--stride",
        type=int,
        default=STRIDE,
        help="frames between window starts (6: Earthformer's and PreDiff's SEVIR-LR configs)",
    )


def add_eval(steps: Any) -> None:
    summary = "the paper's nowcasting table: fit, score, record"
    command(steps, "eval", summary, cmd_eval, eval_options, kept=suite_kept)


def suite_kept(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves of the suite: no table or run; its fits and teacher sets, reused."""
    return (
        f"nothing was recorded; finished fits are kept in {args.out / 'fitted'} and teacher "
        f"sets in {args.cache}; the same command reuses them"
    )


def eval_options(ev: argparse.ArgumentParser) -> None:
    from spanlift.nowcasting.scores import CONVENTIONS
    from spanlift.nowcasting.windows import SplitSettings
    from spanlift.platform.fitting.fit import FitSettings

    ev.add_argument(  # a missing folder: the backbone says how to make synthetic storms there
        "--data", type=Path, default=Path("data/sevir_synth"), help="SEVIR folder or store"
    )
    ev.add_argument(
        "--solvers",
        default="ddim,dpm_solver_pp,spanlift",
        help="comma-separated of ddim, dpm_solver_pp, unipc, ipndm, dyweight, spanlift, each "
        "optionally +pooled (pooled-field loss) and/or +observed (fit to observed frames); "
        f"or 'paper' for {PAPER_SOLVERS}",
    )
    ev.add_argument("--nfe", type=int, default=5, help="steps of the few-step solvers")
    ev.add_argument("--teacher-nfe", type=int, default=100, help="DDIM teacher steps")
    ev.add_argument("--train-samples", type=int, default=256, help="teacher samples to fit on")
    ev.add_argument("--test-samples", type=int, default=0, help="0: every held-out window")
    add_field_options(ev, SplitSettings, SPLIT_OPTIONS)
    ev.add_argument(
        "--convention",
        choices=CONVENTIONS,
        default="exact",
        help="how skill is counted: the exact definitions, or earthformer to compare with "
        "Earthformer's and PreDiff's published tables (docs/nowcasting.md)",
    )
    add_field_options(ev, FitSettings, FIT_OPTIONS, defaults=NOWCAST_FIT)
    path_option(ev, "--weights", INPUT, help=f"denoiser weights (default {NOWCAST_UNET})")
    add_backbone_options(ev, default="nowcast")  # prediff: PreDiff's release, docs/nowcasting.md
    ev.add_argument("--evaluators", type=int, default=2, help="evaluator actors")
    path_option(ev, "--lpips-weights", INPUT, help=f"AlexNet weights (default {ALEXNET_HINT})")
    path_option(ev, "--cache", FOLDER, default=DEFAULT_CACHE, help="teacher cache folder")
    path_option(ev, "--out", FOLDER, default=Path("runs/nowcast"), help="results folder")
    ev.add_argument("--experiment", help="MLflow experiment (default: nowcast-<data folder>)")
    add_tracking_options(ev)
    add_ray_options(ev)


def cmd_synth(args: argparse.Namespace) -> None:
    from spanlift.nowcasting.synthetic import write_synthetic_sevir, written_with

    positive("--events", args.events)
    kept = written_with(Path(args.out)) is not None
    root = write_synthetic_sevir(args.out, events=args.events, seed=args.seed)
    done = "kept the" if kept else "wrote"
    print(f"{done} {args.events} synthetic storm events in SEVIR's layout in {root}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from spanlift.nowcasting.store import prepare_sevir_lr

    path = prepare_sevir_lr(args.sevir_root, args.out, stride=args.stride)
    print(f"wrote SEVIR-LR windows to {path}")


def cmd_eval(args: argparse.Namespace) -> None:
    from spanlift.platform.nowcast_suite import format_table, run_suite

    result = run_suite(suite_request(args), args.address, args.num_cpus)
    experiment = result_experiment(args)
    samples = next(iter(result.reports.values())).samples
    print(
        f"\nskill on {samples} held-out windows of {args.data} (VIL ≥ threshold, counts summed, "
        f"{args.convention} convention)"
    )
    print(format_table(result))
    for reason in next(iter(result.reports.values())).unavailable.values():
        print(reason)
    print("wrote " + ", ".join(str(f) for f in result.files))
    if result.run_ids:
        found = (
            f" ({len(result.found)} of them recorded by an earlier nowcast eval with the same "
            "settings: found, not recorded again)"
            if result.found
            else ""
        )
        print(f"MLflow: {len(result.run_ids)} runs in experiment {experiment!r}{found}; rank them:")
        print(f"  spanlift leaderboard --experiment {experiment} --metric csi16")


def result_experiment(args: argparse.Namespace) -> str:
    """The MLflow experiment: --experiment, else nowcast-<data folder>."""
    return args.experiment or f"nowcast-{Path(args.data).name.replace('_', '-')}"


def suite_request(args: argparse.Namespace) -> Any:
    """The suite the options ask for; counts below 1 refused."""
    from spanlift.nowcasting.windows import SplitSettings
    from spanlift.platform.fitting.fit import FitSettings
    from spanlift.platform.nowcast_suite import SuiteRequest, parse_solvers
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri
    from spanlift.solvers import SolverSpec

    for name in ("train_samples", "evaluators", "teacher_nfe", "nfe"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    fit = FitSettings(**field_values(args, FitSettings, FIT_OPTIONS))
    split = SplitSettings(**field_values(args, SplitSettings, SPLIT_OPTIONS))
    return SuiteRequest(
        data=args.data,
        rows=tuple(parse_solvers(args.solvers, args.nfe, fit)),
        teacher=SolverSpec("euler", args.teacher_nfe),
        train_samples=args.train_samples,
        test_samples=args.test_samples,
        evaluators=args.evaluators,
        cache=args.cache,
        out=args.out,
        weights=args.weights,
        backbone=args.backbone,
        backbone_options=parse_settings(args.backbone_option),
        lpips_weights=args.lpips_weights,
        tracking_uri=None if args.no_tracking else resolve_tracking_uri(args.tracking_uri),
        experiment=result_experiment(args),
        split=split,
        convention=args.convention,
    )
