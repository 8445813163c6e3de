"""`spanlift sweep FILE`: run a sweep YAML on local Ray or a Ray cluster, print its summary."""

import argparse
from typing import Any

from spanlift.cli.options import command
from spanlift.errors import SettingsError

SWEEP_TRACKING_DEFAULTS = "$MLFLOW_TRACKING_URI, else the sweep file's, else sqlite:///mlflow.db"

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
"""`spanlift sweep` exits 1 when a configuration failed, 130 (as after Ctrl-C) when interrupted
with configurations left to run, so schedulers and CI notice."""


def add_commands(sub: Any) -> None:
    summary = "run a sweep YAML on local Ray or a Ray cluster"
    command(sub, "sweep", summary, cmd_sweep, add_sweep_options)


def add_sweep_options(sweep: argparse.ArgumentParser) -> None:
    sweep.add_argument("file", help="sweep YAML, e.g. sweeps/digits_nfe.yaml")
    sweep.add_argument(
        "--address", help="Ray cluster to join (`auto`); default: $RAY_ADDRESS, else a local Ray"
    )
    sweep.add_argument("--resume", action="store_true", help="continue an interrupted sweep")
    sweep.add_argument(
        "--restart", action="store_true", help="run again; finished configurations are reused"
    )
    sweep.add_argument("--tracking-uri", help=f"MLflow store (default: {SWEEP_TRACKING_DEFAULTS})")
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


def cmd_sweep(args: argparse.Namespace) -> int:
    from spanlift.platform.sweep.driver import run_sweep

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
    print_next_step(summary)
    return EXIT_FAILED if summary.failed else 0


def print_next_step(summary: Any) -> None:
    """The best configuration, and the `spanlift leaderboard` command that ranks them all."""
    from spanlift.platform.tracking.runs import resolve_tracking_uri

    default_uri = resolve_tracking_uri()  # where `spanlift leaderboard` looks by itself
    if summary.best:
        print("best: " + ", ".join(f"{k} {v}" for k, v in summary.best.items()))
    print(f"rank them: spanlift leaderboard --experiment {summary.experiment}", end="")
    print(f" --tracking-uri {summary.tracking_uri}" if summary.tracking_uri != default_uri else "")
