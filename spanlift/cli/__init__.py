"""The `spanlift` command line.

    spanlift solvers                      list solvers and their settings
    spanlift backbones                    list backbones and what each needs
    spanlift fit --backbone gmm --solver spanlift --nfe 3 --set kernel_size=5
    spanlift demo                         fit and compare solvers on the digits backbone
    spanlift sweep sweeps/digits_nfe.yaml [--address auto] [--resume | --restart]
    spanlift eval --backbone digits --solver ipndm --nfe 3 --metrics fid --samples 10000
    spanlift leaderboard --experiment digits-nfe [--format markdown] [--samples F] [--plot F]
    spanlift rerun RUN_ID                 fit and score a recorded run again, compare the values
    spanlift nowcast synth --events 64 --out data/sevir_synth     synthetic storms, SEVIR layout
    spanlift nowcast prepare --sevir-root /data/sevir --out data/sevir_lr.zarr
    spanlift nowcast eval --data data/sevir_synth --solvers paper --nfe 5 --teacher-nfe 100
    spanlift analyze halvorsen|ratio|out-of-span   the paper's analyses (PNG, CSV, MLflow run)
    spanlift train-digits                 retrain the embedded digits denoiser
    spanlift train-nowcast                retrain the embedded nowcasting denoiser
    spanlift train-digits-detector [--detector digits_eval]   retrain a digits FID detector
    spanlift doctor [sweeps/edm_cifar10.yaml] [--address auto] [--device cpu]   ready to sweep?

One module per group of commands, each adding its commands with `add_commands`; their options
come from the typed settings (`spanlift.cli.options`). User errors print one line and exit with
status 2; bugs keep their traceback.
"""

import argparse
import sys
from collections.abc import Sequence

from spanlift.cli import (
    analyze,
    doctor,
    evaluate,
    fit,
    leaderboard,
    listing,
    nowcast,
    rerun,
    sweep,
    train,
)
from spanlift.cli.options import CommandParser
from spanlift.errors import SpanliftError

COMMAND_GROUPS = (
    listing,
    fit,
    sweep,
    evaluate,
    nowcast,
    analyze,
    leaderboard,
    rerun,
    train,
    doctor,
)


def parser() -> argparse.ArgumentParser:
    """The `spanlift` parser: each command group adds its subcommands."""
    root = argparse.ArgumentParser(prog="spanlift", description=__doc__.split("\n")[0])
    sub = root.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except SpanliftError as exc:
        print(f"spanlift: error: {exc}", file=sys.stderr)
        return 2
