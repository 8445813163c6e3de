"""The sweep's console: one live progress view in place of Ray's and Tune's own output.

    SweepProgress     pure bookkeeping: trials done / running / failed / taken from MLflow, the best
                      value of the search metric per NFE, an ETA, and the lines that say so
    Console           where the lines go: a status line redrawn in place on a terminal, plain
                      lines in a pipe or CI log
    ProgressCallback  the Ray Tune callback that feeds both
    quiet_console()   the settings that keep the rest quiet; Ray's full logs stay in the run
                      folder (`ray-logs`, and Tune's driver-side messages in `sweep.log`), and
                      `spanlift sweep --verbose` brings the old view back

A finished trial reads `✓ dyweight nfe=3  val_rmse 0.2301 · rmse 0.2368  (57.3 s, fit 0.4 s)`
(with `× 3 seeds` when it has replicates: their means), a failed one
`✗ dyweight nfe=3: TrainingDivergedError: ...`, and the status
`sweep 3/23 · 2 running · 1 from MLflow · best val_rmse nfe=3 0.2301, nfe=4 0.1190 · eta ~4 min`:
the best is chosen on validation seeds, as the searcher chooses.
"""

import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ray.tune import Callback

from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.trial import trial_name

QUIET_ENV = {
    "RAY_AIR_NEW_OUTPUT": "0",  # Tune's new output prints its tables even at verbose=0
    "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",  # a failure's traceback stays in the trial's error.txt
}
RAY_LOGGERS = ("ray.tune", "ray.train", "ray.air")
CLEAR_LINE = "\r\x1b[K"
OPTUNA_SEARCH_LOGGER = "ray.tune.search.optuna.optuna_search"
GRID_DONE = "`Study.stop` is supposed to be invoked"
"""Optuna's GridSampler stops the study once every configuration was suggested, outside an
objective, and Ray's OptunaSearch logs the complaint as a warning: benign, at the end of every
grid sweep."""


@dataclass(frozen=True)
class DropMessage(logging.Filter):
    """A logging filter that drops records whose message contains `text`."""

    text: str

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def quiet_console() -> None:
    """Keep Tune, Optuna and MLflow from writing to the console of this process (the driver).

    Ray's own INFO logging and the workers' output are switched off in `start_ray`; Tune's
    reporting by `verbose=0` in the sweep's RunConfig. Variables a user set are kept."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    logging.getLogger("optuna").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    search = logging.getLogger(OPTUNA_SEARCH_LOGGER)
    if DropMessage(GRID_DONE) not in search.filters:
        search.addFilter(DropMessage(GRID_DONE))


def log_ray_to_file(folder: Path) -> Path:
    """Send Ray Tune's and Train's driver-side log records to `folder/sweep.log` instead of the
    console: their interrupt notices and `Tuner.restore(...)` advice would contradict spanlift's
    own lines (`--resume`). Idempotent; returns the log's path."""
    path = folder / "sweep.log"
    folder.mkdir(parents=True, exist_ok=True)
    for name in RAY_LOGGERS:
        logger = logging.getLogger(name)
        logger.propagate = False
        if not any(getattr(h, "baseFilename", None) == str(path) for h in logger.handlers):
            handler = logging.FileHandler(path)
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
            logger.addHandler(handler)
    return path


def duration(seconds: float) -> str:
    """`45 s`, `12 min` or `2.3 h`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class SweepProgress:
    """Counts, best value per NFE and ETA of a sweep of `total` trials, fed trial by trial.

    `mode` is `min` or `max`; `concurrency` trials run at once; `clock` gives seconds."""

    total: int
    metric: str
    """The search metric on validation seeds, `val_<metric>`: what "best" reads."""
    mode: str = "min"
    concurrency: int = 1
    clock: Callable[[], float] = time.monotonic
    done: int = 0
    failed: int = 0
    reused: int = 0
    running: dict[str, float] = field(default_factory=dict)
    best: dict[int, float] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)

    def start(self, trial_id: str) -> None:
        self.running[trial_id] = self.clock()

    def pause(self, trial_id: str) -> None:
        """A trial waiting to be retried: not running until it starts again."""
        self.running.pop(trial_id, None)

    def restored(self, results: list[Mapping[str, Any]]) -> None:
        """The last results of the trials that finished before the sweep was resumed: counted,
        and their best values kept."""
        self.done += len(results)
        for result in results:
            self._keep_best(result)

    def finish(self, trial_id: str, label: str, result: Mapping[str, Any]) -> str:
        """Count a finished trial with its last result; returns its line."""
        seconds = self._stop(trial_id)
        self.done += 1
        if result.get("reused"):
            self.reused += 1
        elif seconds is not None:
            self.durations.append(seconds)
        self._keep_best(result)
        return self.finished_line(label, result, seconds)

    def fail(self, trial_id: str, label: str, reason: str) -> str:
        """Count a failed trial; returns its line."""
        self._stop(trial_id)
        self.failed += 1
        return f"✗ {label}: {reason}"

    def _stop(self, trial_id: str) -> float | None:
        started = self.running.pop(trial_id, None)
        return None if started is None else self.clock() - started

    def _keep_best(self, result: Mapping[str, Any]) -> None:
        value, nfe = result.get(self.metric), result.get("nfe")
        if not (is_number(value) and is_number(nfe)):
            return
        best = self.best.get(int(nfe))
        better = min if self.mode == "min" else max
        self.best[int(nfe)] = value if best is None else better(best, value)

    def finished_line(self, label: str, result: Mapping[str, Any], seconds: float | None) -> str:
        """`✓ dyweight nfe=3  val_rmse 0.2301 · rmse 0.2368  (57.3 s, fit 0.4 s)`."""
        score = " · ".join(
            f"{name} {value:.4g}" if is_number(value) else f"{name} ?"
            for name, value in self.values(result)
        )
        replicates = result.get("replicates", 1)
        if is_number(replicates) and replicates > 1:
            score += f"  × {replicates:.0f} seeds"
        if result.get("reused"):
            return f"✓ {label}  {score}  (from MLflow)"
        times = [f"{seconds:.1f} s"] if seconds is not None else []
        fit = result.get("fit_seconds")
        times += [f"fit {fit:.1f} s"] if is_number(fit) and fit > 0 else []
        return f"✓ {label}  {score}" + (f"  ({', '.join(times)})" if times else "")

    def values(self, result: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The search metric on validation seeds, then on test seeds when reported."""
        test = self.metric.removeprefix("val_")
        shown = [(self.metric, result.get(self.metric))]
        return shown + ([(test, result[test])] if test in result and test != self.metric else [])

    def eta(self) -> float | None:
        """Seconds left: the mean duration of trials that ran (not those taken from MLflow) for
        each waiting trial, what is left of it for each running one, over `concurrency`; None
        before any trial ran."""
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        now = self.clock()
        waiting = max(0, self.total - self.done - self.failed - len(self.running))
        running = sum(max(0.0, mean - (now - start)) for start in self.running.values())
        return (waiting * mean + running) / max(1, self.concurrency)

    def status(self) -> str:
        """E.g. `sweep 3/23 · 2 running · 1 failed · best rmse nfe=3 0.2368 · eta ~4 min`: the
        trials finished (done or failed) of all, counts other than 0, the ETA while any is left."""
        parts = [f"sweep {self.done + self.failed}/{self.total}"]
        counts = [
            (len(self.running), "running"),
            (self.failed, "failed"),
            (self.reused, "from MLflow"),
        ]
        parts += [f"{count} {what}" for count, what in counts if count]
        if self.best:
            values = ", ".join(f"nfe={nfe} {v:.4g}" for nfe, v in sorted(self.best.items()))
            parts.append(f"best {self.metric} {values}")
        eta = self.eta()
        if eta is not None and self.done + self.failed < self.total:
            parts.append(f"eta ~{duration(eta)}")
        return " · ".join(parts)


@dataclass
class Console:
    """Writes trial lines and the status: on a terminal the status is one line redrawn in place
    under the trial lines; elsewhere (a pipe, CI) each status follows its trial line once."""

    stream: TextIO | None = None
    last_status: str = ""

    @property
    def out(self) -> TextIO:
        return self.stream or sys.stdout

    @property
    def tty(self) -> bool:
        return self.out.isatty()

    def fit(self, text: str) -> str:
        """On a terminal, `text` cut to its width: a wrapped line cannot be redrawn."""
        width = shutil.get_terminal_size((100, 24)).columns - 1
        return text if len(text) <= width else text[: width - 1] + "…"

    def event(self, line: str, status: str) -> None:
        """A finished or failed trial's line, then the status."""
        if self.tty:
            self._write(f"{CLEAR_LINE}{line}\n{self.fit(status)}")
        else:
            self._write(f"{line}\n  {status}\n")
        self.last_status = status

    def refresh(self, status: str) -> None:
        """Redraw the status on a terminal (running counts, ETA); nothing elsewhere."""
        if self.tty and status != self.last_status:
            self._write(CLEAR_LINE + self.fit(status))
            self.last_status = status

    def close(self, status: str) -> None:
        """The final status, ending its line."""
        if self.tty:
            self._write(f"{CLEAR_LINE}{self.fit(status)}\n")
        elif status != self.last_status:
            self._write(f"  {status}\n")
        self.last_status = status

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


@dataclass(frozen=True)
class SpecLabel:
    """`dyweight nfe=3`: the solver (or its entry's label) and NFE a trial's configuration stands
    for."""

    config: SweepConfig

    def __call__(self, trial: Any) -> str:
        return trial_name(trial.config, self.config)


def error_reason(trial: Any) -> str:
    """The last line of the trial's error file (the exception), or `error` without one."""
    path = getattr(trial, "error_file", None)
    if not path or not Path(path).exists():
        return "error"
    lines = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "error"


class ProgressCallback(Callback):
    """The Tune callback of the progress view: feeds `SweepProgress`, writes to a `Console`.

    Tune pickles it with the Tuner's state, so it holds no open stream of its own."""

    def __init__(
        self,
        progress: SweepProgress,
        label: Callable[[Any], str] = str,
        console: Console | None = None,
        refresh_seconds: float = 1.0,
    ) -> None:
        self.progress = progress
        self.label = label
        self.console = console or Console()
        self.refresh_seconds = refresh_seconds
        self._drawn_at: float | None = None

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._drawn_at is None:  # the first step: count what a resumed sweep had finished
            self.progress.restored(
                [t.last_result or {} for t in trials if t.status == "TERMINATED"]
            )
        now = self.progress.clock()
        if self._drawn_at is None or now - self._drawn_at >= self.refresh_seconds:
            self.console.refresh(self.progress.status())
            self._drawn_at = now

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.start(trial.trial_id)
        self.console.refresh(self.progress.status())

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.pause(trial.trial_id)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        result = trial.last_result or {}
        line = self.progress.finish(trial.trial_id, self.label(trial), result)
        self.console.event(line, self.progress.status())

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        line = self.progress.fail(trial.trial_id, self.label(trial), error_reason(trial))
        self.console.event(line, self.progress.status())

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.console.close(self.progress.status())


def console_settings(
    verbose: bool, config: SweepConfig, total: int, concurrency: int
) -> dict[str, Any]:
    """The `tune.RunConfig` fields of the console: Tune's default reporting (`--verbose`), or
    none and the progress view."""
    if verbose:
        return {"verbose": 1, "callbacks": []}
    progress = SweepProgress(total, config.search_metric, config.mode, concurrency)
    return {"verbose": 0, "callbacks": [ProgressCallback(progress, SpecLabel(config))]}


def restore_console(tuner: Any, settings: dict[str, Any]) -> None:
    """Give a restored Tuner this run's console `settings`.

    Tune restores the RunConfig of the interrupted run, whose verbosity and progress view may
    not be this run's: its progress view, and its callbacks of the kinds `settings` brings, are
    replaced; others are kept. Through Tune's internal Tuner (Ray 2.60); a
    Ray Client Tuner has none and keeps the settings it had."""
    local = getattr(tuner, "_local_tuner", None)
    if local is None:
        return
    run_config = local.get_run_config()
    replaced = (ProgressCallback, *(type(c) for c in settings["callbacks"]))
    kept = [c for c in run_config.callbacks or [] if not isinstance(c, replaced)]
    run_config.verbose = settings["verbose"]
    run_config.callbacks = kept + settings["callbacks"]
