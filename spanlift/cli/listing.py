"""`spanlift solvers` and `spanlift backbones`: what is registered, with its settings."""

import argparse
import inspect
from typing import Any

from spanlift.cli.options import command


def add_commands(sub: Any) -> None:
    command(sub, "solvers", "list solvers and their settings", cmd_solvers)
    command(sub, "backbones", "list backbones and what each needs", cmd_backbones)


def summary(cls: type) -> str:
    """The first line of a class's docstring."""
    return inspect.getdoc(cls).splitlines()[0]


def settings_line(cls: type) -> str:
    """The solver's settings and defaults, or why they cannot be read here (a peer solver whose
    library is not installed)."""
    from spanlift.errors import SpanliftError
    from spanlift.solvers import solver_settings

    try:
        return ", ".join(f"{k}={v!r}" for k, v in solver_settings(cls).items()) or "-"
    except SpanliftError as exc:
        return f"({exc})"


def cmd_solvers(args: argparse.Namespace) -> None:
    from spanlift.solvers import SOLVERS

    for name, cls in SOLVERS:
        print(f"{name:<14} {summary(cls)}\n{'':<14} settings: {settings_line(cls)}")
        for label, value in (("cites", cls.citation), ("reference", cls.reference)):
            if value:
                print(f"{'':<14} {label}: {value}")


def cmd_backbones(args: argparse.Namespace) -> None:
    from spanlift.backbones import BACKBONES, backbone_options

    for name, cls in BACKBONES:
        options = ", ".join(f"{k}={v!r}" for k, v in backbone_options(cls).items())
        print(f"{name:<14} {summary(cls)}")
        print(f"{'':<14} needs: {cls.needs}")
        print(f"{'':<14} options: {options or '-'}")
