"""The paths a command line names, checked before the command starts its work.

A command declares each path option with `path_option(parser, flag, role)`: an `OUTPUT` (a file
it will write: the nearest existing folder must take a new file), a `FOLDER` (an output folder:
the same, and not an existing file), an `INPUT` (a file or folder it reads: it must exist) or a
`STORE` (an MLflow tracking URI: a local store's folder must exist, so a mistyped URI is not made
a new store). `check_paths` runs every declared check on the parsed arguments, writing nothing.
`option_of` names the option an OSError's file came from, so an error met later still says which
option to change.
"""

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spanlift.errors import SettingsError
from spanlift.files import check_writable

CHECKS = "path_checks"
"""The parsed arguments' (flag, destination, check) of each declared path option (flag "": a
positional argument)."""

Check = Callable[[str, Any], None]


def named(shown: str, value: Any) -> str:
    """`--out runs/x`, or the value alone for a positional argument."""
    return f"{shown} {value}".lstrip()


def writable(shown: str, path: Any) -> None:
    """`path` can be written (a bucket URI is left to the storage layer)."""
    if "://" in str(path):
        return
    try:
        check_writable(Path(path))
    except OSError as exc:
        raise SettingsError(
            f"{named(shown, path)}: cannot write in {exc.filename} ({exc.strerror}); choose a "
            "folder you can write"
        ) from None


def writable_folder(shown: str, path: Any) -> None:
    """`path` is a folder that can be written, or can be made one."""
    if "://" not in str(path) and Path(path).exists() and not Path(path).is_dir():
        raise SettingsError(f"{named(shown, path)}: is a file, not a folder; choose a folder")
    writable(shown, path)


def existing(shown: str, path: Any) -> None:
    """`path` exists."""
    if not Path(path).exists():
        raise SettingsError(f"{named(shown, path)}: no such file or folder")


def store(shown: str, uri: Any) -> None:
    """A local MLflow store at `uri` is made only in a folder that exists; a database store's
    driver is installed."""
    from spanlift.platform.tracking.store_uri import check_store

    check_store(str(uri))


OUTPUT, FOLDER, INPUT, STORE = writable, writable_folder, existing, store


def declare(parser: argparse.ArgumentParser, action: argparse.Action, role: Check) -> None:
    """The option `action` of `parser` is checked by `role` before the command runs."""
    shown = action.option_strings[0] if action.option_strings else ""
    declared = parser.get_default(CHECKS) or ()
    parser.set_defaults(**{CHECKS: (*declared, (shown, action.dest, role))})


def path_option(parser: argparse.ArgumentParser, flag: str, role: Check, **kwargs: Any) -> None:
    """`parser.add_argument(flag, **kwargs)`, its value checked by `role` before the command
    runs (`check_paths`); `type` defaults to Path."""
    declare(parser, parser.add_argument(flag, **{"type": Path, **kwargs}), role)


def given(value: Any) -> list[Any]:
    """The values an option was given: none, one, or those of a repeated option."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def check_paths(args: argparse.Namespace) -> None:
    """Every declared path option's check, in the order the options were declared."""
    for shown, dest, role in getattr(args, CHECKS, ()):
        for value in given(getattr(args, dest, None)):
            role(shown, value)


def option_of(args: argparse.Namespace, filename: Any) -> str | None:
    """`--flag value` of the declared path option whose value `filename` is, or lies in; None
    when no option named it."""
    if filename is None or "://" in str(filename):
        return None
    target = Path(filename).absolute()
    for shown, dest, _ in getattr(args, CHECKS, ()):
        for value in given(getattr(args, dest, None)):
            path = Path(value).absolute()
            if target == path or path in target.parents:
                return named(shown, value)
    return None
