"""The callback that ends a sweep's running trials on Ctrl-C (`platform/sweep/interrupt.py`), on
its own: Tune's handler still gets the signal, and only running trials are killed, once."""

import signal
import threading
from types import SimpleNamespace

from ray.tune.experiment import Trial

from spanlift.platform.sweep import interrupt
from spanlift.platform.sweep.interrupt import StopTrialsOnInterrupt


def trial(status: str, actor: object | None) -> SimpleNamespace:
    return SimpleNamespace(status=status, temporary_state=SimpleNamespace(ray_actor=actor))


def test_ctrl_c_reaches_tunes_handler_and_then_the_running_trials_are_killed(monkeypatch):
    tunes, killed = [], []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: tunes.append(signum))
    monkeypatch.setattr(interrupt.ray, "kill", lambda actor, no_restart: killed.append(actor))
    callback = StopTrialsOnInterrupt()
    trials = [trial(Trial.RUNNING, "a"), trial(Trial.TERMINATED, "b"), trial(Trial.PENDING, None)]
    try:
        callback.setup()
        callback.on_step_end(0, trials)
        assert killed == []  # no Ctrl-C yet
        signal.raise_signal(signal.SIGINT)
        assert tunes == [signal.SIGINT]
        callback.on_step_end(1, trials)
        callback.on_step_end(2, trials)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert killed == ["a"]


def test_set_up_on_another_thread_it_leaves_the_handlers_alone():
    errors = []
    before = signal.getsignal(signal.SIGINT)

    def set_up() -> None:
        try:
            StopTrialsOnInterrupt().setup()
        except Exception as exc:  # signal.signal raises ValueError off the main thread
            errors.append(exc)

    thread = threading.Thread(target=set_up)
    thread.start()
    thread.join()
    assert errors == [] and signal.getsignal(signal.SIGINT) is before
