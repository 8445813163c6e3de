"""Ctrl-C during a sweep's stages, without Ray: `Stages` against interrupts that Python swallows.

Python ignores an exception raised inside a `__del__`, a weakref or a gc callback (it prints
`Exception ignored in: …` and goes on). A Ctrl-C that arrives while such a callback runs (in a
sweep: SQLAlchemy's `_collection_gced`, as Tune's experiment starts) makes the SIGINT handler
raise KeyboardInterrupt there, and it is lost. `TuneLike` installs and answers SIGINT as Ray
Tune's experiment does (`ray.tune.tune._setup_signal_catching`)."""

import contextlib
import io
import signal
import sys
import time
import weakref

import pytest

from spanlift.platform.sweep.stages import Stages

ATTEMPTS = 5


class TuneLike:
    """Tune's handler while its experiment runs: note the Ctrl-C (the experiment then ends with
    configurations remaining) and put back the handler it replaced."""

    def __init__(self) -> None:
        self.stopped = False
        self.replaced = signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum, frame) -> None:
        self.stopped = True
        signal.signal(signal.SIGINT, self.replaced)


def spin(seconds: float, until=lambda: False) -> None:
    """Plain Python code that checks no stage: a loop of short sleeps."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        time.sleep(0.005)


def lose_an_interrupt() -> None:
    """Ctrl-C while a weakref callback runs: the handler's KeyboardInterrupt is raised inside the
    callback, which Python reports as unraisable and ignores."""

    class Collected:
        pass

    def callback(_: object) -> None:
        signal.raise_signal(signal.SIGINT)
        for _ in range(100_000):  # the handler runs here, inside the callback
            pass

    collected = Collected()
    reference = weakref.ref(collected, callback)
    del collected
    assert reference() is None


def swallowed_by_a_library() -> None:
    """Ctrl-C inside code that catches BaseException (no callback: nothing Python reports)."""
    try:
        signal.raise_signal(signal.SIGINT)
        spin(1.0)
    except BaseException:
        pass


def test_a_ctrl_c_lost_in_a_callback_reaches_the_handler_in_place_next() -> None:
    """Lost just before Tune's experiment installs its handler: Tune gets the Ctrl-C."""
    for attempt in range(ATTEMPTS):
        with Stages(stream=io.StringIO()) as stages:
            lose_an_interrupt()
            assert stages.interrupted
            tune = TuneLike()
            spin(2.0, until=lambda tune=tune: tune.stopped)
            assert tune.stopped, f"attempt {attempt}: the Ctrl-C never reached Tune's handler"


def test_a_ctrl_c_lost_in_a_callback_is_raised_in_the_code_that_runs_next() -> None:
    for _ in range(ATTEMPTS):
        with Stages(stream=io.StringIO()), pytest.raises(KeyboardInterrupt):
            lose_an_interrupt()
            spin(2.0)


def test_a_lost_ctrl_c_prints_nothing_and_other_unraisable_errors_still_do(monkeypatch) -> None:
    printed = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    with Stages(stream=io.StringIO()), contextlib.suppress(KeyboardInterrupt):
        lose_an_interrupt()
        spin(2.0)
    assert printed == []

    class Failing:
        def __del__(self) -> None:
            raise ValueError("not an interrupt")

    with Stages(stream=io.StringIO()):
        Failing()
    assert [type(p.exc_value) for p in printed] == [ValueError]


def test_the_hand_over_to_tune_stops_on_a_ctrl_c_that_tune_never_got() -> None:
    started = []
    with Stages(stream=io.StringIO()) as stages:
        swallowed_by_a_library()
        with pytest.raises(KeyboardInterrupt), stages.handed_over():
            started.append("experiment")  # not reached: the sweep stops before Tune starts
    assert started == []

    def experiment_that_starts_late() -> None:
        swallowed_by_a_library()  # before Tune's handler is in place
        TuneLike()  # then Tune runs every configuration, its handler never called

    with Stages(stream=io.StringIO()) as stages:
        with pytest.raises(KeyboardInterrupt), stages.handed_over():
            experiment_that_starts_late()
        with pytest.raises(KeyboardInterrupt):  # and Ctrl-C is this handler's again
            signal.raise_signal(signal.SIGINT)
            spin(1.0)


def test_a_ctrl_c_that_tune_answered_is_left_to_its_summary() -> None:
    with Stages(stream=io.StringIO()) as stages:
        with stages.handed_over():
            tune = TuneLike()
            signal.raise_signal(signal.SIGINT)
            spin(1.0, until=lambda: tune.stopped)
            assert tune.stopped  # the experiment ends with configurations remaining
        assert not stages.interrupted
        with stages.handed_over():
            TuneLike()  # an experiment that ran to the end without a Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            spin(1.0)
        assert stages.interrupted


def test_outside_its_context_the_hand_over_leaves_sigint_alone() -> None:
    before = signal.getsignal(signal.SIGINT)
    try:
        with Stages(stream=io.StringIO()).handed_over():
            tune = TuneLike()
        assert signal.getsignal(signal.SIGINT) == tune.handle
    finally:
        signal.signal(signal.SIGINT, before)
