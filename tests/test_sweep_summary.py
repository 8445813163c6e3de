"""The sweep's summary names every configuration that failed, with its reason, also when Tune's
result for it lacks the error: Tune writes a trial's error file on the driver and copies it to the
sweep's storage in the background, and its `ResultGrid` reads the copy."""

from pathlib import Path
from types import SimpleNamespace

from spanlift.platform.sweep.config import load_sweep
from spanlift.platform.sweep.progress import restore_console
from spanlift.platform.sweep.summary import SeenFailures, summarize
from tests.cli_run import ROOT

GMM_SMOKE = ROOT / "sweeps" / "gmm_smoke.yaml"  # trial 0: ipndm[order=3] nfe=3, 1: dyweight nfe=3
DIVERGED = "TrainingDivergedError: fit of dyweight diverged: loss is nan at iteration 1"


def result(trial: int, error: Exception | None = None, **metrics: float) -> SimpleNamespace:
    """A Tune `Result` as `summarize` reads it."""
    return SimpleNamespace(config={"trial": trial}, error=error, metrics=metrics)


def seen_failure(tmp_path: Path, trial: int) -> SeenFailures:
    """The callback after Tune's driver reported the trial's error (its error file on the
    driver)."""
    error_file = tmp_path / f"error-{trial}.txt"
    error_file.write_text(f"Failure # 1 (occurred at 2026-11-27)\n{DIVERGED}\n")
    seen = SeenFailures(load_sweep(GMM_SMOKE))
    failed = SimpleNamespace(config={"trial": trial}, error_file=str(error_file))
    seen.on_trial_error(3, [failed], failed)
    return seen


def test_a_failure_the_driver_saw_is_named_when_its_result_lacks_the_error(tmp_path) -> None:
    config = load_sweep(GMM_SMOKE)
    seen = seen_failure(tmp_path, 1)
    results = [result(0, val_rmse=0.3, rmse=0.31, nfe=3), result(1)]  # no error: not yet copied
    summary = summarize(config, tmp_path, "sqlite:///m.db", results, 0.0, 1, seen=seen.reasons)
    assert summary.failed == [f"dyweight nfe=3: {DIVERGED}"]
    assert summary.finished == 1 and summary.remaining == 0


def test_a_failure_is_named_once_and_a_retried_trial_that_finished_is_not_failed(tmp_path) -> None:
    config = load_sweep(GMM_SMOKE)
    seen = seen_failure(tmp_path, 1)
    with_error = [result(0, val_rmse=0.3, nfe=3), result(1, error=RuntimeError(DIVERGED))]
    summary = summarize(config, tmp_path, "sqlite:///m.db", with_error, 0.0, 1, seen=seen.reasons)
    assert summary.failed == [f"dyweight nfe=3: {DIVERGED}"]
    retried = [result(0, val_rmse=0.3, nfe=3), result(1, val_rmse=0.2, nfe=3)]
    summary = summarize(config, tmp_path, "sqlite:///m.db", retried, 0.0, 1, seen=seen.reasons)
    assert summary.failed == [] and summary.finished == 2


def test_a_resumed_sweep_records_its_failures_in_its_own_callback() -> None:
    """Tune restores the interrupted run's callbacks; the failures this run's summary reads are
    recorded by this run's `SeenFailures`, not a restored copy."""
    config = load_sweep(GMM_SMOKE)
    restored = SimpleNamespace(verbose=1, callbacks=["other", SeenFailures(config)])
    tuner = SimpleNamespace(_local_tuner=SimpleNamespace(get_run_config=lambda: restored))
    ours = SeenFailures(config)
    restore_console(tuner, {"verbose": 0, "callbacks": [ours]})
    assert restored.callbacks == ["other", ours] and restored.verbose == 0
