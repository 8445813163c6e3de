"""The sweep's progress view: counting, best value per NFE, ETA and the lines, without Ray."""

import io
import logging
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spanlift.cli import parser
from spanlift.platform import ray_runtime
from spanlift.platform.sweep.config import load_sweep
from spanlift.platform.sweep.progress import (
    CLEAR_LINE,
    GRID_DONE,
    OPTUNA_SEARCH_LOGGER,
    QUIET_ENV,
    RAY_LOGGERS,
    Console,
    ProgressCallback,
    SpecLabel,
    SweepProgress,
    console_settings,
    error_reason,
    log_ray_to_file,
    quiet_console,
    restore_console,
)
from tests.cli_run import ROOT

GMM_SMOKE = ROOT / "sweeps" / "gmm_smoke.yaml"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeTrial:
    trial_id: str
    name: str = ""
    status: str = "RUNNING"
    last_result: dict[str, Any] = field(default_factory=dict)
    error_file: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name or self.trial_id


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def progress(total: int = 4, mode: str = "min", concurrency: int = 1) -> SweepProgress:
    return SweepProgress(total, "rmse", mode, concurrency, clock=Clock())


def test_counts_done_running_failed_and_reused() -> None:
    p = progress(total=5)
    for trial in "abcd":
        p.start(trial)
    p.finish("a", "euler nfe=3", {"rmse": 0.3, "nfe": 3, "reused": 0})
    p.finish("b", "heun nfe=3", {"rmse": 0.2, "nfe": 3, "reused": 1})
    p.fail("c", "dyweight nfe=3", "diverged")
    assert (p.done, p.reused, p.failed, len(p.running)) == (2, 1, 1, 1)
    assert p.status().startswith("sweep 3/5 · 1 running · 1 failed · 1 from MLflow · ")


@pytest.mark.parametrize(("mode", "best3"), [("min", 0.1), ("max", 0.5)])
def test_best_value_per_nfe_follows_the_mode(mode: str, best3: float) -> None:
    p = progress(total=6, mode=mode)
    results = [(3, 0.5), (4, 0.9), (3, 0.1), (4, 0.7), (3, 0.3)]
    for i, (nfe, value) in enumerate(results):
        p.start(str(i))
        p.finish(str(i), "s", {"rmse": value, "nfe": float(nfe)})
    assert p.best == {3: best3, 4: 0.7 if mode == "min" else 0.9}
    assert f"best rmse nfe=3 {best3:.4g}, nfe=4" in p.status()


def test_results_without_the_metric_or_nfe_do_not_count_as_best() -> None:
    p = progress()
    p.finish("a", "s", {"loss": 0.1, "nfe": 3})
    p.finish("b", "s", {"rmse": float("nan"), "nfe": None})
    assert p.best == {} and p.done == 2 and "best" not in p.status()


def test_finished_and_failed_lines() -> None:
    p = progress()
    p.start("a")
    p.clock.now += 12.34
    line = p.finish("a", "dyweight nfe=3", {"rmse": 0.16731, "nfe": 3, "fit_seconds": 3.52})
    assert line == "✓ dyweight nfe=3  rmse 0.1673  (12.3 s, fit 3.5 s)"
    p.start("b")
    assert p.finish("b", "ipndm nfe=3", {"rmse": 0.25, "nfe": 3, "fit_seconds": 0.0}) == (
        "✓ ipndm nfe=3  rmse 0.25  (0.0 s)"
    )
    reused = p.finish("c", "euler nfe=4", {"rmse": 0.5, "nfe": 4, "reused": 1})
    assert reused == "✓ euler nfe=4  rmse 0.5  (from MLflow)"
    assert p.fail("d", "heun nfe=5", "TrainingDivergedError: loss nan") == (
        "✗ heun nfe=5: TrainingDivergedError: loss nan"
    )


def test_eta_from_trials_that_ran_over_the_concurrency() -> None:
    p = progress(total=10, concurrency=2)
    p.start("a")
    assert p.eta() is None  # nothing has run yet
    p.clock.now += 10
    p.finish("a", "s", {"rmse": 1, "nfe": 3})
    p.start("r")
    p.finish("r", "s", {"rmse": 1, "nfe": 3, "reused": 1})  # instant: not a duration
    p.fail("f", "s", "bad")
    p.start("b")
    p.clock.now += 4
    # 6 waiting × 10 s + 6 s left of b, two at a time
    assert p.eta() == pytest.approx((6 * 10 + 6) / 2)
    assert p.status().endswith("eta ~33 s")


def test_status_drops_the_eta_when_every_trial_finished() -> None:
    p = progress(total=1)
    p.start("a")
    p.clock.now += 5
    p.finish("a", "s", {"rmse": 1, "nfe": 3})
    assert p.status() == "sweep 1/1 · best rmse nfe=3 1"


def callback(stream: io.StringIO, total: int = 3) -> ProgressCallback:
    return ProgressCallback(progress(total), console=Console(stream), refresh_seconds=1.0)


def test_callback_in_a_pipe_writes_a_line_per_finished_or_failed_trial(tmp_path: Path) -> None:
    out = io.StringIO()
    cb = callback(out)
    good = FakeTrial("a", "dyweight nfe=3", last_result={"rmse": 0.2, "nfe": 3, "reused": 1})
    error = tmp_path / "error.txt"
    error.write_text("Failure # 1\nTraceback ...\nTrainingDivergedError: loss nan\n\n")
    bad = FakeTrial("b", "spanlift nfe=3", error_file=str(error))
    cb.on_step_begin(0, [good, bad])
    for trial in (good, bad):
        cb.on_trial_start(0, [good, bad], trial)
    cb.on_step_begin(1, [good, bad])
    cb.on_trial_complete(2, [good, bad], good)
    cb.on_trial_error(3, [good, bad], bad)
    cb.on_experiment_end([good, bad])
    assert out.getvalue().splitlines() == [
        "✓ dyweight nfe=3  rmse 0.2  (from MLflow)",
        "  sweep 1/3 · 1 running · 1 from MLflow · best rmse nfe=3 0.2",
        "✗ spanlift nfe=3: TrainingDivergedError: loss nan",
        "  sweep 2/3 · 1 failed · 1 from MLflow · best rmse nfe=3 0.2",
    ]


def test_callback_on_a_terminal_redraws_one_status_line() -> None:
    out = Terminal()
    cb = callback(out, total=2)
    trial = FakeTrial("a", "euler nfe=3", last_result={"rmse": 0.5, "nfe": 3})
    cb.on_step_begin(0, [trial])
    cb.on_trial_start(0, [trial], trial)
    cb.progress.clock.now += 2
    cb.on_step_begin(1, [trial])  # due for a redraw, but nothing changed: not written again
    cb.on_trial_complete(1, [trial], trial)
    cb.on_experiment_end([trial])
    text = out.getvalue()
    assert text.count("\n") == 2  # the trial's line and the final status end lines
    assert text.startswith(f"{CLEAR_LINE}sweep 0/2{CLEAR_LINE}sweep 0/2 · 1 running")
    trial_line = f"{CLEAR_LINE}✓ euler nfe=3  rmse 0.5  (2.0 s)\n"
    assert f"{trial_line}sweep 1/2 · best rmse nfe=3 0.5" in text
    assert text.endswith(f"{CLEAR_LINE}sweep 1/2 · best rmse nfe=3 0.5 · eta ~2 s\n")


def test_a_resumed_sweep_counts_the_trials_it_had_finished() -> None:
    cb = callback(io.StringIO(), total=4)
    trials = [FakeTrial("a", status="TERMINATED"), FakeTrial("b", status="PENDING")]
    cb.on_step_begin(0, trials)
    cb.on_step_begin(1, trials)  # counted once
    assert cb.progress.status().startswith("sweep 1/4")


def test_a_resumed_sweep_keeps_the_best_values_found_before() -> None:
    cb = callback(io.StringIO(), total=4)
    done = [
        FakeTrial("a", status="TERMINATED", last_result={"rmse": 0.25, "nfe": 3}),
        FakeTrial("b", status="TERMINATED", last_result={"rmse": 0.125, "nfe": 3}),
        FakeTrial("c", status="TERMINATED", last_result={"rmse": 0.5, "nfe": 4}),
    ]
    cb.on_step_begin(0, [*done, FakeTrial("d", status="PENDING")])
    assert cb.progress.status() == "sweep 3/4 · best rmse nfe=3 0.125, nfe=4 0.5"


def test_a_retried_trial_is_not_running_until_it_starts_again() -> None:
    cb = callback(io.StringIO())
    trial = FakeTrial("a")
    cb.on_trial_start(0, [trial], trial)
    cb.on_trial_recover(1, [trial], trial)
    assert cb.progress.running == {}


def test_error_reason_is_the_error_files_last_line(tmp_path: Path) -> None:
    assert error_reason(FakeTrial("a")) == "error"
    path = tmp_path / "error.txt"
    path.write_text("Failure # 1\n  File x\nValueError: bad\n")
    assert error_reason(FakeTrial("a", error_file=str(path))) == "ValueError: bad"


def test_spec_label_names_the_solver_and_nfe() -> None:
    label = SpecLabel(load_sweep(GMM_SMOKE))
    assert label(FakeTrial("a", config={"trial": 1})) == "dyweight nfe=3"
    assert label(FakeTrial("a", config={"trial": 0})) == "ipndm[order=3] nfe=3"


def test_console_settings_quiet_or_verbose() -> None:
    config = load_sweep(GMM_SMOKE)
    quiet = console_settings(False, config, total=2, concurrency=1)
    assert quiet["verbose"] == 0 and isinstance(quiet["callbacks"][0], ProgressCallback)
    assert quiet["callbacks"][0].progress.total == 2
    restored = pickle.loads(pickle.dumps(quiet["callbacks"][0]))  # Tune pickles its RunConfig
    assert restored.progress.metric == "val_rmse" and restored.console.stream is None
    assert console_settings(True, config, total=2, concurrency=1) == {"verbose": 1, "callbacks": []}


def test_restore_console_replaces_only_the_progress_view() -> None:
    @dataclass
    class RunConfig:
        verbose: int
        callbacks: list

    class Local:
        run_config = RunConfig(1, ["other", callback(io.StringIO())])

        def get_run_config(self) -> RunConfig:
            return self.run_config

    class Tuner:
        _local_tuner = Local()

    new = callback(io.StringIO())
    restore_console(Tuner(), {"verbose": 0, "callbacks": [new]})
    assert Local.run_config == RunConfig(0, ["other", new])


def record(message: object) -> logging.LogRecord:
    return logging.LogRecord("x", logging.WARNING, __file__, 1, message, None, None)


def test_quiet_console_keeps_what_the_user_set_and_warnings_but_the_grid_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TUNE_PRINT_ALL_TRIAL_ERRORS", "1")
    loggers = [logging.getLogger(name) for name in ("optuna", "mlflow")]
    levels = [logger.level for logger in loggers]
    search = logging.getLogger(OPTUNA_SEARCH_LOGGER)
    try:
        quiet_console()
        quiet_console()
        assert [logger.getEffectiveLevel() for logger in loggers] == [logging.WARNING] * 2
        assert len(search.filters) == 1
        grid_done = RuntimeError(f"{GRID_DONE} inside an objective function or a callback.")
        assert not search.filters[0].filter(record(grid_done))
        assert search.filters[0].filter(record("Received additional result for trial a"))
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        search.filters.clear()
    assert os.environ["RAY_AIR_NEW_OUTPUT"] == "0"
    assert os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] == "1"


def test_sweep_command_takes_verbose() -> None:
    assert parser().parse_args(["sweep", "x.yaml", "--verbose"]).verbose
    assert not parser().parse_args(["sweep", "x.yaml"]).verbose


@pytest.mark.parametrize(("verbose", "level"), [(False, logging.WARNING), (True, logging.INFO)])
def test_start_ray_keeps_worker_output_off_a_quiet_console(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, verbose: bool, level: int
) -> None:
    calls = []
    monkeypatch.setattr(ray_runtime.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_runtime.ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray_runtime, "ray_temp_dir", lambda workdir: tmp_path)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # start_ray sets it: undone after the test
    ray_runtime.start_ray(None, tmp_path, verbose=verbose)
    ray_runtime.start_ray("auto", tmp_path, verbose=verbose)
    assert [(c["log_to_driver"], c["logging_level"]) for c in calls] == [(verbose, level)] * 2
    assert calls[0]["include_dashboard"] is False  # a local Ray's dashboard: only when asked
    ray_runtime.start_ray(None, tmp_path, verbose=verbose, dashboard=True)
    assert calls[-1]["include_dashboard"] is True


def test_tunes_own_messages_go_to_the_sweep_log_not_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Tune's interrupt and restore advice contradicts spanlift's own; the full text is kept in
    the sweep folder's log."""
    names = [name for name in RAY_LOGGERS]
    saved = [(logging.getLogger(n).propagate, list(logging.getLogger(n).handlers)) for n in names]
    try:
        log = log_ray_to_file(tmp_path)
        log_ray_to_file(tmp_path)  # twice: one handler
        logging.getLogger("ray.tune.tune").warning("Resume experiment with: Tuner.restore(...)")
        for handler in logging.getLogger("ray.tune").handlers:
            handler.flush()
        assert "Tuner.restore" in log.read_text()
        assert "Tuner.restore" not in capsys.readouterr().err
        assert len(logging.getLogger("ray.tune").handlers) == 1
    finally:
        for name, (propagate, handlers) in zip(names, saved, strict=True):
            logger = logging.getLogger(name)
            for handler in logger.handlers:
                handler.close()
            logger.propagate, logger.handlers = propagate, handlers
