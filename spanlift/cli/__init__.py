"""The `spanlift` command line.

    spanlift solvers                      list solvers and their settings
    spanlift backbones                    list backbones and what each needs
    spanlift fit --backbone gmm --solver spanlift --nfe 3 --set kernel_size=5
    spanlift demo                         fit and compare solvers on the digits backbone
    spanlift sweep sweeps/digits_nfe.yaml [--address auto] [--resume | --restart]
    spanlift eval --backbone digits --solver ipndm --nfe 3 --metrics fid --samples 10000
    spanlift leaderboard --experiment digits-nfe [--format markdown] [--samples F] [--plot F]
    spanlift rerun RUN_ID                 fit and score a recorded run again, compare the values
    spanlift export RUN_ID --to diffusers DIR     the run's solver as a diffusers scheduler
    spanlift nowcast synth --events 64 --out data/sevir_synth     synthetic storms, SEVIR layout
    spanlift nowcast prepare --sevir-root /data/sevir --out data/sevir_lr.zarr
    spanlift nowcast eval --data data/sevir_synth --solvers paper --nfe 5 --teacher-nfe 100
    spanlift analyze halvorsen|ratio|out-of-span   the paper's analyses (PNG, CSV, MLflow run)
    spanlift train-digits                 retrain the embedded digits denoiser
    spanlift train-nowcast                retrain the embedded nowcasting denoiser
    spanlift train-digits-detector [--detector digits_eval]   retrain a digits FID detector
    spanlift doctor [sweeps/edm_cifar10.yaml] [--address auto] [--device cpu]   ready to sweep?

One module per group of commands, each adding its commands with `add_commands`; their options
come from the typed settings (`spanlift.cli.options`). Every command ends the same way
(`spanlift.cli.endings`): the paths its options name are checked before its work starts
(`spanlift.cli.paths`); a user error, an unusable path or a missing package prints one line and
exits with status 2; Ctrl-C at any moment prints one line saying what was kept and exits with
status 130; bugs keep their traceback.
"""

import argparse
import atexit
import os
import sys
import threading
import warnings
from collections.abc import Sequence

from spanlift.cli import (
    analyze,
    doctor,
    evaluate,
    export,
    fit,
    leaderboard,
    listing,
    nowcast,
    rerun,
    sweep,
    train,
)
from spanlift.cli.endings import EXIT_INTERRUPTED, ending, stop_ray, uninterruptible
from spanlift.cli.options import CommandParser, OneLineErrors
from spanlift.cli.paths import check_paths
from spanlift.platform.fitting.resolution import ResolutionWarning
from spanlift.platform.sweep.stages import Stages

COMMAND_GROUPS = (
    listing,
    fit,
    sweep,
    evaluate,
    nowcast,
    analyze,
    leaderboard,
    rerun,
    export,
    train,
    doctor,
)


def parser() -> argparse.ArgumentParser:
    """The `spanlift` parser: each command group adds its subcommands."""
    root = OneLineErrors(prog="spanlift", description=__doc__.split("\n")[0])
    sub = root.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    return root


def one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A warning about the user's settings (`ResolutionWarning`) as `spanlift: warning: …`;
    any other warning as Python formats it."""
    if issubclass(category, ResolutionWarning):
        return f"spanlift: warning: {message}\n"
    return PYTHON_FORMAT(message, category, filename, lineno, line)


PYTHON_FORMAT = warnings.formatwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` names; its exit status (`spanlift.cli.endings`)."""
    warnings.formatwarning = one_line_warning
    args = argparse.Namespace()
    with Stages() as guard:  # Ctrl-C noted even where the code it interrupts swallows it
        try:
            args = parser().parse_args(argv)  # imports the command's registries: interruptible
            check_paths(args)
            return args.run(args) or 0
        except BaseException as exc:
            end = ending(exc, args, guard.interrupted)
            if end is None:
                raise
    if end.status == EXIT_INTERRUPTED:
        with uninterruptible():
            stop_ray()
    print(end.line, file=sys.stderr)
    return end.status


def run() -> None:
    """The `spanlift` command (`python -m spanlift.cli` too): `main`, then `exit_now`. When the
    reader of its output leaves early (`spanlift solvers | head`), it stops quietly with status
    1, as Python's documentation of SIGPIPE advises."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        code = 1
    exit_now(code)


def exit_now(code: int) -> None:
    """Exit with `code` once the exit handlers have run (Ray's shutdown of a local cluster,
    logging's flush, temporary folders) and the streams are flushed, without the interpreter's
    teardown of every module: after torch, Ray and MLflow are imported that teardown takes
    1.5 s (2.3 s after a sweep) and is not needed. While another non-daemon thread runs, the
    interpreter's own exit waits for it as usual."""
    if any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
