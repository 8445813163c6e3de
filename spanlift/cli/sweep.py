"""`spanlift sweep FILE`: run a sweep YAML on local Ray or a Ray cluster, print its summary."""

import argparse
from typing import Any

from spanlift.cli.endings import stop_ray
from spanlift.cli.options import add_tracking_uri, command
from spanlift.cli.paths import FOLDER, INPUT, path_option
from spanlift.errors import SettingsError
from spanlift.platform.sweep.stages import Stages

SWEEP_TRACKING_DEFAULTS = "$MLFLOW_TRACKING_URI, else the sweep file's, else sqlite:///mlflow.db"

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
"""`spanlift sweep` exits 1 when a configuration failed, 130 (as after Ctrl-C) when interrupted
with configurations left to run, so schedulers and CI notice."""


def add_commands(sub: Any) -> None:
    summary = "run a sweep YAML on local Ray or a Ray cluster"
    command(sub, "sweep", summary, cmd_sweep, add_sweep_options, kept=sweep_kept)


def sweep_kept(args: argparse.Namespace) -> str:
    """What Ctrl-C outside the sweep's own handling (`cmd_sweep`) leaves."""
    return (
        f"finished configurations are recorded in MLflow; spanlift sweep {args.file} --resume "
        "continues"
    )


def add_sweep_options(sweep: argparse.ArgumentParser) -> None:
    path_option(sweep, "file", INPUT, type=str, help="sweep YAML, e.g. sweeps/digits_nfe.yaml")
    sweep.add_argument(
        "--address", help="Ray cluster to join (`auto`); default: $RAY_ADDRESS, else a local Ray"
    )
    sweep.add_argument("--resume", action="store_true", help="continue an interrupted sweep")
    sweep.add_argument(
        "--restart", action="store_true", help="run again; finished configurations are reused"
    )
    add_tracking_uri(sweep, SWEEP_TRACKING_DEFAULTS)
    sweep.add_argument(
        "--reuse-across-versions",
        action="store_true",
        help="reuse finished runs and fitted weights made by another version of the code",
    )
    path_option(
        sweep,
        "--storage",
        FOLDER,
        type=str,
        help="results folder, or a bucket: s3://bucket/prefix, gs://… (default: the YAML's storage)",
    )
    sweep.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    sweep.add_argument(
        "--verbose",
        action="store_true",
        help="Ray's and Tune's full console output instead of the progress view",
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.resume and args.restart:
        raise SettingsError("--resume and --restart exclude each other")
    with Stages() as stages:
        try:
            stages.begin("loading Ray, Tune and torch")
            from spanlift.platform.sweep.config import load_sweep

            config = load_sweep(args.file)  # a bad file is answered before Ray and Tune load
            store = opened_storage(config, args.storage, stages)  # so is an unusable bucket
            from spanlift.platform.sweep.driver import run_sweep

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
                stages=stages,
                config=config,
                store=store,
            )
        except BaseException:
            if not stages.interrupted:
                raise
            print_interrupted(args.file, stages)
            stop_ray()
            return EXIT_INTERRUPTED
    answered = (
        f"; {summary.answered} proposals of configurations already measured answered from their "
        "values"
        if summary.answered
        else ""
    )
    print(
        f"\nsweep {summary.experiment}: {summary.finished}/{summary.configurations} distinct "
        f"configurations finished ({summary.reused} taken from MLflow) in "
        f"{summary.wall_seconds:.0f} s; teacher generations: {summary.teacher_generations}; "
        f"model loads: {summary.model_loads}{answered}"
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
    stop_ray()  # now, not in Ray's exit handler, which first waits 0.5 s for log lines
    return EXIT_FAILED if summary.failed else 0


def opened_storage(config: Any, storage: str | None, stages: Stages) -> Any:
    """The sweep's storage (`sweep_storage`); a bucket's check, bounded by the storage timeout,
    is a stage of its own."""
    from spanlift.platform.storage import is_uri
    from spanlift.platform.sweep.config import sweep_storage

    where = storage or config.storage
    if is_uri(where):
        stages.begin(f"checking the storage {where}")
    return sweep_storage(config, storage)


def print_interrupted(file: str, stages: Stages) -> None:
    """What an interrupt before or between the sweep's configurations left, and how to go on."""
    total = stages.configurations
    remain = f"all {total} configurations remain" if total else "no configuration ran"
    again = f"spanlift sweep {file} --resume" if stages.resumable else f"spanlift sweep {file}"
    print(f"\ninterrupted while {stages.current}: {remain}; continue with:\n  {again}")


def print_next_step(summary: Any) -> None:
    """The best configuration, the `spanlift leaderboard` command that ranks them all, and where
    MLflow's UI shows the sweep's runs."""
    from spanlift.platform.tracking.runs import runs_page
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri

    default_uri = resolve_tracking_uri()  # where `spanlift leaderboard` looks by itself
    if summary.best:
        name, *values = summary.best.items()
        print("best: " + ", ".join([name[1], *(f"{k} {v:.4g}" for k, v in values)]))
    print(f"rank them: spanlift leaderboard --experiment {summary.experiment}", end="")
    print(f" --tracking-uri {summary.tracking_uri}" if summary.tracking_uri != default_uri else "")
    server, page = runs_page(summary.tracking_uri, summary.experiment, summary.metric, summary.mode)
    if server:
        print(f"see them: {server}, then open {page}")
    else:
        print(f"see them: {page}")
