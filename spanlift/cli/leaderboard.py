"""`spanlift leaderboard`: the best configuration per solver of an experiment, from MLflow."""

import argparse
from pathlib import Path
from typing import Any

from spanlift.cli.options import TRACKING_DEFAULTS, command


def add_commands(sub: Any) -> None:
    summary = "rank solvers of an experiment from MLflow"
    command(sub, "leaderboard", summary, cmd_leaderboard, add_leaderboard_options)


def add_leaderboard_options(board: argparse.ArgumentParser) -> None:
    board.add_argument("--experiment", required=True, help="MLflow experiment (the sweep's)")
    board.add_argument("--metric", default="rmse", help="metric to rank by")
    board.add_argument("--mode", choices=["min", "max"], help="default: by metric")
    board.add_argument("--tracking-uri", help=f"MLflow store (default: {TRACKING_DEFAULTS})")
    board.add_argument("--by-fit", action="store_true", help="rank fits of one budget together")
    board.add_argument("--csv", type=Path, help="also write the table as CSV")
    board.add_argument("--plot", type=Path, help="also plot metric vs NFE per solver (PNG)")


def cmd_leaderboard(args: argparse.Namespace) -> None:
    from spanlift.platform.tracking import leaderboard as board
    from spanlift.platform.tracking.metrics import default_mode
    from spanlift.platform.tracking.runs import connect, resolve_tracking_uri

    client = connect(resolve_tracking_uri(args.tracking_uri), read_only=True)
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
