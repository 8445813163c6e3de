"""What a sweep is doing, said as each stage starts, and Ctrl-C answered at any moment.

    with Stages() as stages:              # Ctrl-C now raises KeyboardInterrupt, noted
        stages.begin("starting a local Ray (2 CPUs)")     # `· starting a local Ray (2 CPUs)`
        ...
        with stages.handed_over():        # Tune's experiment, with its own SIGINT handler
            tuner.fit()
    stages.interrupted                    # True once Ctrl-C arrived, whatever caught it

Ray Tune installs its own SIGINT handler while its experiment runs; interrupted there, the
experiment ends with configurations remaining and Tune puts this handler back. A KeyboardInterrupt
that code in between swallows (a library catching BaseException, an import turning it into an
ImportError) cannot hide the interrupt: `interrupted` stays set, and the next stage, or the
hand-over to Tune, raises again. One raised inside a callback Python ignores exceptions from (a
`__del__`, a weakref or gc callback, e.g. SQLAlchemy's as Tune starts) reaches
`sys.unraisablehook`: there it is taken off the console and the signal sent again, once the
callback is over, to whichever handler is then in place (this one, or Tune's).
"""

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

SEND_AGAIN_AFTER = 0.05
"""Seconds between a Ctrl-C lost in a callback and sending it again: the callback is over."""


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
    _again: threading.Timer | None = field(default=None, repr=False)
    _entered: bool = field(default=False, repr=False)

    def __enter__(self) -> "Stages":
        self._entered = True
        self._previous = signal.signal(signal.SIGINT, self._interrupt)
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cancel_sending_again()
        sys.unraisablehook = self._previous_hook
        signal.signal(signal.SIGINT, self._previous)
        self._entered = False

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        self._cancel_sending_again()  # this one is raised now
        raise KeyboardInterrupt

    def _unraisable(self, unraisable: Any) -> None:
        """The exception Python ignores: a Ctrl-C of this handler's is sent again, silently;
        anything else goes to the previous hook (which prints it)."""
        if self.interrupted and issubclass(unraisable.exc_type, KeyboardInterrupt):
            self._send_again()
        else:
            self._previous_hook(unraisable)

    def _send_again(self) -> None:
        """SIGINT to the main thread in SEND_AGAIN_AFTER seconds, as from the terminal."""
        self._cancel_sending_again()
        main = threading.main_thread().ident
        self._again = threading.Timer(SEND_AGAIN_AFTER, signal.pthread_kill, (main, signal.SIGINT))
        self._again.daemon = True
        self._again.start()

    def _cancel_sending_again(self) -> None:
        if self._again is not None:
            self._again.cancel()
            self._again = None

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C came and was swallowed."""
        if self.interrupted:
            self._cancel_sending_again()  # raised here instead
            raise KeyboardInterrupt

    def begin(self, what: str, detail: str = "") -> None:
        """Say that `what` starts now (`· what; detail`); raise KeyboardInterrupt if Ctrl-C came
        and was swallowed."""
        self.check()
        self.current = what
        out = self.stream or sys.stdout
        out.write(f"· {what}" + (f"; {detail}" if detail else "") + "\n")
        out.flush()

    @contextmanager
    def handed_over(self) -> Iterator[None]:
        """Around code that installs its own SIGINT handler and, answering a Ctrl-C, puts this
        one back (Tune's experiment). A swallowed Ctrl-C stops before it starts; after it, this
        handler is in place again, and a swallowed Ctrl-C that its handler never got (that
        handler is still installed) raises KeyboardInterrupt. One it got is its to report.
        Outside `with Stages()` (no handler of this one's to restore) it only checks."""
        self.check()
        if not self._entered:
            yield
            return
        try:
            yield
        finally:
            never_got_one = signal.getsignal(signal.SIGINT) != self._interrupt
            signal.signal(signal.SIGINT, self._interrupt)
        if never_got_one:
            self.check()
