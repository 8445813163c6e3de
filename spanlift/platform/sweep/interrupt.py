"""Ctrl-C during Tune's experiment ends the running trials at once.

Tune answers Ctrl-C by ending its loop, saving its experiment state and then asking each trial's
process to stop. A trial whose fit runs in its own process reports once, at its end, so that
process never takes the request: Tune waits about 10 s and then kills it anyway. Nothing is
gained by the wait: a fit saves its state every `checkpoint_every` steps (a resumed sweep
continues from there) and a finished configuration is in MLflow before its trial reports. So
once the loop has ended (Tune's state saved with the trial still running, which `--resume`
restarts), the trials' processes are killed, and the command ends in about a second.
"""

import signal
import threading
from typing import Any

import ray
from ray.tune import Callback
from ray.tune.experiment import Trial


class StopTrialsOnInterrupt(Callback):
    """Kills the running trials' processes after the step of Tune's loop in which Ctrl-C came
    (the loop's last: Tune processes no more of the trials' events, so their killing is not
    recorded as a failure)."""

    def __init__(self) -> None:
        self.interrupted = False

    def setup(self, **info: Any) -> None:
        """Put a handler in front of Tune's (installed by now): it notes the Ctrl-C and hands it
        on. Tune's handler then puts back the one that was there before Tune's."""
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread takes signals; Tune caught none either
        tunes = signal.getsignal(signal.SIGINT)
        if not callable(tunes):
            return

        def noted(signum: int, frame: Any) -> None:
            self.interrupted = True
            tunes(signum, frame)

        signal.signal(signal.SIGINT, noted)

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if not self.interrupted:
            return
        self.interrupted = False
        for trial in trials:
            actor = trial.temporary_state.ray_actor
            if trial.status == Trial.RUNNING and actor is not None:
                ray.kill(actor, no_restart=True)
