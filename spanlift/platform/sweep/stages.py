"""What a sweep is doing, said as each stage starts, and Ctrl-C answered at any moment.

    with Stages() as stages:              # Ctrl-C now raises KeyboardInterrupt, noted
        stages.begin("starting a local Ray (2 CPUs)")     # `· starting a local Ray (2 CPUs)`
        ...
    stages.interrupted                    # True once Ctrl-C arrived, whatever caught it

Ray Tune installs its own SIGINT handler while its experiment runs and restores this one after;
interrupted there, the experiment ends with configurations remaining. A KeyboardInterrupt that
code in between swallows (a library catching BaseException, an import turning it into an
ImportError) cannot hide the interrupt: `interrupted` stays set, and the next stage raises again.
"""

import signal
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO


@dataclass
class Stages:
    """The sweep's stage lines and its SIGINT handler (installed while used as a context).

    `resumable`: the sweep's state is stored, so `--resume` continues it; `configurations`: how
    many the sweep runs, once known."""

    stream: TextIO | None = None
    current: str = "starting"
    interrupted: bool = False
    resumable: bool = False
    configurations: int | None = None

    def __enter__(self) -> "Stages":
        self._previous = signal.signal(signal.SIGINT, self._interrupt)
        return self

    def __exit__(self, *exc: Any) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        raise KeyboardInterrupt

    def begin(self, what: str, detail: str = "") -> None:
        """Say that `what` starts now (`· what; detail`); raise KeyboardInterrupt if Ctrl-C came
        and was swallowed."""
        if self.interrupted:
            raise KeyboardInterrupt
        self.current = what
        out = self.stream or sys.stdout
        out.write(f"· {what}" + (f"; {detail}" if detail else "") + "\n")
        out.flush()
