"""`spanlift leaderboard`: each solver's configuration chosen on validation seeds, ranked by its
test value with intervals and ties, from MLflow; as a table for the console or a paper, or, with
`--at-cost T`, ranked at the states the fits had kept after T seconds (`tracking/at_cost.py`)."""

import argparse
import sys
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
    path_option(
        board,
        "--plot",
        OUTPUT,
        nargs="+",
        metavar="[curves] F.png",
        help="also plot metric vs NFE per solver (PNG); `--plot curves F.png`: each learned "
        "row's validation loss against fit seconds, one panel per backbone and NFE",
    )
    board.add_argument(
        "--at-cost",
        type=float,
        metavar="SECONDS",
        help="rank every learned solver at the state its fit had kept after SECONDS of fit (a "
        "two-stage fit's base fit counted first), scored again on its test seeds (rmse), beside "
        "its rank at convergence",
    )
    path_option(
        board,
        "--samples",
        OUTPUT,
        help="also draw the same test seeds from the teacher and each ranked solver (PNG)",
    )


def plot_kind(plot: list | None) -> tuple[str, object] | None:
    """("board", F.png) for `--plot F.png`, ("curves", F.png) for `--plot curves F.png`."""
    from spanlift.errors import SettingsError

    if not plot:
        return None
    if len(plot) == 1:
        return "board", plot[0]
    if len(plot) == 2 and str(plot[0]) == "curves":
        return "curves", plot[1]
    raise SettingsError(f"--plot takes F.png or curves F.png, got {' '.join(map(str, plot))}")


def cmd_leaderboard(args: argparse.Namespace) -> None:
    from spanlift.platform.tracking import board_format
    from spanlift.platform.tracking.leaderboard import leaderboard
    from spanlift.platform.tracking.metrics import default_mode
    from spanlift.platform.tracking.runs import connect
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri

    plot = plot_kind(args.plot)
    mode = args.mode or default_mode(args.metric)
    if args.at_cost is not None:  # torch and the backbones load only for a ranking at a cost
        from spanlift.platform.tracking.at_cost import at_cost, check_at_cost

        check_at_cost(args.at_cost, args.metric)
    client = connect(resolve_tracking_uri(args.tracking_uri), read_only=True)
    columns = tuple(name.strip() for name in args.columns.split(",") if name.strip())
    entries = leaderboard(client, args.experiment, args.metric, mode, args.by_fit, columns)
    shown, heading = entries, ""
    if args.at_cost is not None:
        shown, left_out = at_cost(client, entries, args.at_cost, args.metric, mode)
        columns += ("rank_converged", f"{args.metric}_converged")
        heading = (
            f"at {args.at_cost:g} s of fit: each learned solver's chosen configuration at the "
            f"state its fit had kept by then, its {args.metric} scored again on the test seeds; "
            "analytic solvers as recorded; fit: what each fit had spent by then; beside each "
            "row its rank and value at convergence"
        )
        for line in left_out:
            print(line)
    print_table(args, shown, columns, mode, heading)
    if args.csv:
        print(f"csv: {board_format.write_csv(shown, args.csv)}")
    if plot and plot[0] == "board":
        from spanlift.platform.tracking.board_plot import plot_leaderboard

        print(f"plot: {plot_leaderboard(entries, args.metric, plot[1])}")
    if plot and plot[0] == "curves":
        from spanlift.platform.tracking.board_curves import plot_curves

        path, notes = plot_curves(client, entries, plot[1], args.at_cost)
        print("\n".join([*notes, f"plot: {path}"]))
    if args.samples:
        from spanlift.platform.tracking.board_samples import sample_figure

        print(f"samples: {sample_figure(client, entries, args.samples)}")


def print_table(
    args: argparse.Namespace, entries: list, columns: tuple[str, ...], mode: str, heading: str
) -> None:
    """The table in the asked format, headed by what it ranks (`heading`: an at-cost ranking)."""
    from spanlift.platform.tracking import board_format

    if args.format == "csv":
        board_format.write_csv(entries, sys.stdout)
        return
    if args.format == "text":
        better = "lower" if mode == "min" else "higher"
        print(
            f"{args.experiment}: each solver's configuration chosen on validation seeds, "
            f"ranked by {args.metric} on test seeds ({better} is better)"
            + (f"; {heading}" if heading else "")
        )
    if args.format == "markdown" and heading:
        print(f"**{heading[:1].upper() + heading[1:]}**\n")
    if args.format == "latex":
        label = f"tab:{args.experiment}" + (f"-at-{args.at_cost:g}s" if heading else "")
        table = board_format.latex(entries, args.metric, columns, label, heading)
    else:
        table = board_format.FORMATS[args.format](entries, args.metric, columns)
    print(table)
