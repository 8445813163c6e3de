"""`spanlift leaderboard`: each solver's configuration chosen on validation seeds, ranked by its
test value with intervals and ties, from MLflow; as a table for the console or a paper."""

import argparse
from typing import Any

from spanlift.cli.options import add_tracking_uri, command
from spanlift.cli.paths import OUTPUT, path_option

FORMATS = ("text", "markdown", "latex", "csv")


def add_commands(sub: Any) -> None:
    summary = "rank solvers of an experiment from MLflow"
    kept = "the leaderboard only reads the MLflow store: nothing changed"
    command(sub, "leaderboard", summary, cmd_leaderboard, add_leaderboard_options, kept=kept)


def add_leaderboard_options(board: argparse.ArgumentParser) -> None:
    board.add_argument("--experiment", required=True, help="MLflow experiment (the sweep's)")
    board.add_argument("--metric", default="rmse", help="metric to rank by")
    board.add_argument("--mode", choices=["min", "max"], help="default: by metric")
    add_tracking_uri(board)
    board.add_argument("--by-fit", action="store_true", help="rank fits of one budget together")
    board.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="the table printed: text, markdown or latex (with the protocol footer), or csv",
    )
    board.add_argument(
        "--columns",
        default="",
        help="other metrics to show, comma-separated, e.g. error_median,error_p90; run_id: the "
        "run id of each row (its first replicate's), for spanlift rerun; configuration: its "
        "configuration key (LaTeX shows display names only, unless asked)",
    )
    path_option(board, "--csv", OUTPUT, help="also write the table as CSV")
    path_option(board, "--plot", OUTPUT, help="also plot metric vs NFE per solver (PNG)")
    path_option(
        board,
        "--samples",
        OUTPUT,
        help="also draw the same test seeds from the teacher and each ranked solver (PNG)",
    )


def cmd_leaderboard(args: argparse.Namespace) -> None:
    import sys

    from spanlift.platform.tracking import board_format
    from spanlift.platform.tracking.board_plot import plot_leaderboard
    from spanlift.platform.tracking.board_samples import sample_figure
    from spanlift.platform.tracking.leaderboard import leaderboard
    from spanlift.platform.tracking.metrics import default_mode
    from spanlift.platform.tracking.runs import connect, resolve_tracking_uri

    client = connect(resolve_tracking_uri(args.tracking_uri), read_only=True)
    mode = args.mode or default_mode(args.metric)
    columns = tuple(name.strip() for name in args.columns.split(",") if name.strip())
    entries = leaderboard(client, args.experiment, args.metric, mode, args.by_fit, columns)
    if args.format == "csv":
        board_format.write_csv(entries, sys.stdout)
    else:
        if args.format == "text":
            better = "lower" if mode == "min" else "higher"
            print(
                f"{args.experiment}: each solver's configuration chosen on validation seeds, "
                f"ranked by {args.metric} on test seeds ({better} is better)"
            )
        if args.format == "latex":
            table = board_format.latex(entries, args.metric, columns, f"tab:{args.experiment}")
        else:
            table = board_format.FORMATS[args.format](entries, args.metric, columns)
        print(table)
    if args.csv:
        print(f"csv: {board_format.write_csv(entries, args.csv)}")
    if args.plot:
        print(f"plot: {plot_leaderboard(entries, args.metric, args.plot)}")
    if args.samples:
        print(f"samples: {sample_figure(client, entries, args.samples)}")
