"""One check's outcome, and running a check so that its failure is reported, not raised."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from spanlift.errors import SpanliftError

Status = Literal["pass", "FAIL", "skip"]


@dataclass(frozen=True)
class Outcome:
    status: Status
    name: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:<5} {self.name}" + (f"  {self.detail}" if self.detail else "")


class Skipped(Exception):
    """Raised by a check that cannot run here; its message says why."""


def checked(name: str, body: Callable[[], str | None]) -> Outcome:
    """Run `body`: pass with the detail it returns, skip on `Skipped`, FAIL with what any other
    error says (a check reports its failure and the others still run)."""
    try:
        return Outcome("pass", name, body() or "")
    except Skipped as reason:
        return Outcome("skip", name, str(reason))
    except Exception as error:
        return Outcome("FAIL", name, failure(error))


def failure(error: Exception) -> str:
    """A user error's own message, as every command prints it (what failed, what to do); any
    other error's message after its class name, without the module path."""
    if isinstance(error, SpanliftError):
        return str(error)
    return f"{type(error).__name__}: {error}"
