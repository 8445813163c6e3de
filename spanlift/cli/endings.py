"""How a command that did not finish ends: its exit status and one line on standard error.

    Ctrl-C, at any moment            130   `spanlift: interrupted; <what the command kept>`
    a user error (SpanliftError)       2   `spanlift: error: <what, and what to do>`
    an OSError on a path an option     2   `spanlift: error: --out /x: <what failed> …`
      named
    a missing optional package         2   `spanlift: error: … pip install …`
    a full disk                        1   `spanlift: failed: …`

Anything else is a bug and keeps its traceback. An exception raised in a Ray task or actor is
judged by its cause. After Ctrl-C, Ray (and with it any actor an interrupted `with` block did not
stop) is shut down with further Ctrl-C ignored, so the cleanup itself is not cut short.
"""

import argparse
import errno
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, requires

from spanlift.cli.paths import option_of
from spanlift.errors import SpanliftError

EXIT_FAILED, EXIT_USER, EXIT_INTERRUPTED = 1, 2, 130
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Ending:
    status: int
    line: str


def cause_of(exc: BaseException) -> BaseException:
    """The exception itself, or for one Ray re-raised from a task or actor, the original."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def user_error(exc: SpanliftError, args: argparse.Namespace) -> Ending:
    return Ending(EXIT_USER, f"spanlift: error: {exc}")


def os_error(exc: OSError, args: argparse.Namespace) -> Ending | None:
    """On a path an option named: that option and what failed; a full disk: a failure."""
    option = option_of(args, exc.filename)
    if option is not None:
        reason = f"{exc.strerror or exc}: {exc.filename}"
        return Ending(EXIT_USER, f"spanlift: error: {option}: {reason}; choose another path")
    if exc.errno in FULL_DISK:
        return Ending(EXIT_FAILED, f"spanlift: failed: {exc.strerror}: {exc.filename or ''}")
    return None


def normalized(name: str) -> str:
    return re.sub(r"[-_.]", "", name).lower()


def install_hint(module: str) -> str:
    """`pip install 'spanlift[extra]'` for a package one of spanlift's extras brings, else
    `pip install <package>`."""
    try:
        requirements = requires("spanlift") or []
    except PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        extra = re.search(r"extra == ['\"]([^'\"]+)['\"]", requirement)
        if normalized(name) == normalized(module):
            return f"pip install 'spanlift[{extra.group(1)}]'" if extra else f"pip install {name}"
    return f"pip install {module}"


def missing_package(exc: ModuleNotFoundError, args: argparse.Namespace) -> Ending | None:
    """A package that is not installed; one of spanlift's own modules missing is a bug."""
    module = (exc.name or "").split(".")[0]
    if not module or module == "spanlift":
        return None
    return Ending(
        EXIT_USER,
        f"spanlift: error: this needs the Python package {module}, which is not installed: "
        f"{install_hint(module)}",
    )


ANSWERS: tuple[tuple[type[BaseException], Callable[..., Ending | None]], ...] = (
    (SpanliftError, user_error),
    (ModuleNotFoundError, missing_package),
    (OSError, os_error),
)
"""What each kind of exception ends a command with, the first that applies."""


def interrupted(args: argparse.Namespace) -> Ending:
    kept = getattr(args, "kept", None) or "nothing was written"
    return Ending(
        EXIT_INTERRUPTED, f"spanlift: interrupted; {kept(args) if callable(kept) else kept}"
    )


def ending(exc: BaseException, args: argparse.Namespace, was_interrupted: bool) -> Ending | None:
    """How the command ends after `exc` (Ctrl-C came first when `was_interrupted`, whatever
    exception the code then raised); None: a bug, raised again with its traceback."""
    if was_interrupted or isinstance(exc, KeyboardInterrupt):
        return interrupted(args)
    cause = cause_of(exc)
    return next((answer(cause, args) for kind, answer in ANSWERS if isinstance(cause, kind)), None)


@contextmanager
def uninterruptible() -> Iterator[None]:
    """Ctrl-C ignored for the duration (the cleanup after one)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_ray() -> None:
    """Shut down the Ray this process started or joined, if any: a local Ray's processes (and the
    actors on it) end with it."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
