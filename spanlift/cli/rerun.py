"""`spanlift rerun RUN_ID`: fit and score a recorded run's configuration again from the store
alone, and print the recorded and the new values side by side (docs/evaluation.md, "Reproducing a
row"). Exit 0 when every value agrees within `--tolerance`, 1 when one does not."""

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

from spanlift.cli.options import DEFAULT_CACHE, add_tracking_uri, command
from spanlift.cli.paths import FOLDER, path_option

COMPARED = ("rmse", "val_rmse", "error_median", "error_p90", "nfe")
TOLERANCE = 1e-6
"""Relative difference within which a value counts as reproduced: on the machine, code and thread
count the run recorded, the values come out equal; another thread count or device changes float
rounding (docs/evaluation.md)."""


def add_commands(sub: Any) -> None:
    summary = "fit and score a recorded run again and compare with what it recorded"
    command(sub, "rerun", summary, cmd_rerun, add_rerun_options, kept=rerun_kept)


def rerun_kept(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves: a rerun records nothing; its teacher sets stay cached."""
    return f"a rerun records nothing; teacher sets are kept in {args.cache}"


def add_rerun_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="an MLflow run id (a leaderboard row's run_id)")
    add_tracking_uri(parser)
    path_option(parser, "--cache", FOLDER, default=DEFAULT_CACHE, help="teacher cache folder")
    parser.add_argument(
        "--tolerance", type=float, default=TOLERANCE, help="largest relative difference accepted"
    )


def cmd_rerun(args: argparse.Namespace) -> int:
    from spanlift.errors import SettingsError
    from spanlift.platform.fitting.rerun import rerun
    from spanlift.platform.results.provenance import git_state
    from spanlift.platform.tracking.run_files import resolved_of
    from spanlift.platform.tracking.runs import connect
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri

    client = connect(resolve_tracking_uri(args.tracking_uri), read_only=True)
    try:
        run = client.get_run(args.run_id)
    except Exception:  # MLflow raises its own exception types for an unknown id
        raise SettingsError(f"no run {args.run_id!r} at {client.tracking_uri}") from None
    with tempfile.TemporaryDirectory() as folder:
        resolved = resolved_of(client, args.run_id, Path(folder))
        print(f"rerun of {run.info.run_name} ({args.run_id}), {resolved.threads} thread(s)")
        warn_if_elsewhere(run.data.params, git_state())
        new = rerun(resolved, args.cache, Path(folder) / "fit")
    return report(run.data.metrics, new, args.tolerance)


def warn_if_elsewhere(params: dict[str, str], here: tuple[str, bool]) -> None:
    """Say when the code here is not the code the run recorded (its numbers may then differ)."""
    commit, modified = here
    recorded = params.get("env.commit", "")
    if recorded and (recorded != commit or params.get("env.modified") == "true" or modified):
        print(
            f"note: the run was recorded by commit {recorded[:12]}"
            f"{' (modified)' if params.get('env.modified') == 'true' else ''}; this is "
            f"{commit[:12] or 'not a git checkout'}{' (modified)' if modified else ''}"
        )


def report(recorded: dict[str, float], new: dict[str, float], tolerance: float) -> int:
    """The side-by-side table; 1 when a value differs by more than `tolerance` (relative)."""
    print(f"{'metric':<14}{'recorded':>16}{'rerun':>16}{'relative diff':>15}")
    worst = 0.0
    for name in COMPARED:
        if name not in recorded or name not in new:
            continue
        old, now = recorded[name], new[name]
        relative = abs(now - old) / max(abs(old), 1e-300)
        worst = max(worst, relative)
        print(f"{name:<14}{old:>16.10g}{now:>16.10g}{relative:>15.2e}")
    agreed = worst <= tolerance or math.isclose(worst, 0.0)
    verdict = "reproduced" if agreed else "NOT reproduced"
    print(f"{verdict}: largest relative difference {worst:.2e} (tolerance {tolerance:g})")
    return 0 if agreed else 1
