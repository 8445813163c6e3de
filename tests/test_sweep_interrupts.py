"""Interrupting `spanlift sweep`: Ctrl-C in every stage, a killed trial process, `--resume`.

Each test runs the command line in its own folder, as a user would, interrupts it as a terminal
or a crash would, and checks that the continued sweep redoes nothing that had finished.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.cli_run import spanlift, start_spanlift
from tests.test_sweep import runs_of, sweep_file

pytestmark = pytest.mark.e2e


def wait_for(condition, timeout: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"sweep ended early:\n{process.stdout.read()[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("timed out waiting for the sweep")
        time.sleep(0.5)


def test_interrupted_sweep_resumes_without_redoing_finished_trials(tmp_path: Path) -> None:
    solvers = [
        {"name": "euler", "nfe": 3},
        {"name": "ipndm", "nfe": 3, "settings": {"order": 3}},
        {"name": "dyweight", "nfe": 3, "fit": {"iterations": 200}},  # about a second
        {"name": "dyweight", "nfe": 4},  # 9-18 s: still fitting when the sweep has stopped
    ]
    # Ctrl-C kills the running trials once Tune's loop has ended (about a second later): the
    # 4000-iteration fit (9 s on an idle 2-core machine) is cut and resumes from its last state
    fit = {"iterations": 4000, "batch_size": 64, "checkpoint_every": 100}
    path = sweep_file(tmp_path, "resume", solvers=solvers, fit=fit)
    process = start_spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")

    def finished() -> list:
        return [r for r in runs_of(tmp_path, "resume") if r.info.status == "FINISHED"]

    wait_for(lambda: len(finished()) >= 1, 300, process)
    process.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output[-3000:]
    assert "interrupted" in output and "configurations remain" in output
    assert f"spanlift sweep {path} --resume" in output
    leaks = ("Tuner.restore", "Stop signal", "Failed to fetch metrics")
    assert not [text for text in leaks if text in output]  # spanlift's message only
    assert "Tuner.restore" in (tmp_path / "runs" / "sweeps" / "resume" / "sweep.log").read_text()
    before = {r.info.run_id: r.info.end_time for r in finished()}
    assert 1 <= len(before) < 4, "the interruption came too late to test anything"

    result = spanlift(tmp_path, "sweep", str(path), "--resume", "--num-cpus", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [text for text in leaks if text in result.stdout + result.stderr]
    runs = runs_of(tmp_path, "resume")
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    assert len({r.data.tags["spanlift.key"] for r in runs}) == 4
    after = {r.info.run_id: r.info.end_time for r in runs}
    assert all(after[run] == end for run, end in before.items())  # not redone
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("resume").experiment_id
    (parent,) = client.search_runs([experiment], "tags.`spanlift.command` = 'sweep'")
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    # one parent per sweep, reopened by --resume, holding every configuration and the best
    assert parent.info.status == "FINISHED"
    chosen = min(runs, key=lambda r: r.data.metrics["val_rmse"])  # on validation seeds
    assert parent.data.metrics["best_val_rmse"] == chosen.data.metrics["val_rmse"]
    assert parent.data.metrics["best_rmse"] == chosen.data.metrics["rmse"]


def read_until(process: subprocess.Popen, text: str, timeout: float = 300) -> list[str]:
    """The lines `process` printed up to the first that contains `text`."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while not lines or text not in lines[-1]:
        line = process.stdout.readline()
        if not line or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no line with {text!r}:\n{''.join(lines)[-3000:]}")
        lines.append(line)
    return lines


@pytest.mark.parametrize("stage", ["starting a local Ray", "preparing the teacher"])
def test_ctrl_c_before_the_first_configuration_stops_the_sweep(tmp_path: Path, stage: str) -> None:
    """Each stage is said as it starts, the first at once; Ctrl-C in any of them ends the sweep
    with exit 130 and the command that continues it, which then runs the sweep."""
    path = sweep_file(tmp_path, "early", solvers=[{"name": "euler", "nfe": 3}])
    process = start_spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    first = process.stdout.readline()
    assert first.startswith("· loading Ray, Tune and torch"), first
    read_until(process, f"· {stage}")
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output[-3000:]
    assert f"interrupted while {stage}: all 1 configurations remain" in output
    assert f"spanlift sweep {path} --resume" in output
    assert "Traceback" not in output and "Tuner.restore" not in output
    assert runs_of(tmp_path, "early") == []
    if stage == "preparing the teacher":
        result = spanlift(tmp_path, "sweep", str(path), "--resume", "--num-cpus", "2")
        assert result.returncode == 0, result.stdout + result.stderr
        assert [r.info.status for r in runs_of(tmp_path, "early")] == ["FINISHED"]


def process_parents() -> dict[int, int]:
    """Each process's parent, from /proc/<pid>/stat (the field after the state)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(proc.name)] = int(stat[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def trial_pids(root: int) -> list[int]:
    """The processes of Tune's trials (a one-worker fit runs in its trial's process) of the sweep
    whose process is `root`: its local Ray's raylet starts them. Trials of other sweeps on the
    machine, another test's or a user's, are not among them."""
    parents = process_parents()

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == root:
                return True
        return False

    pids = []
    for pid in parents:
        try:
            if b"ImplicitFunc" in Path(f"/proc/{pid}/cmdline").read_bytes() and descends(pid):
                pids.append(pid)
        except OSError:
            continue
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_the_trial_processes_a_test_kills_are_its_own_sweeps() -> None:
    """`ours` stands for a sweep's process, whose trial is its child; `theirs` for a trial of
    another sweep (each is named as Ray names a trial's process)."""
    sleep = "import time; time.sleep(60)"
    start_trial = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {sleep!r}, 'Implicit' + 'Func'])"
    ours = subprocess.Popen([sys.executable, "-c", start_trial])
    theirs = subprocess.Popen([sys.executable, "-c", sleep, "ImplicitFunc"])
    try:
        deadline = time.monotonic() + 30
        while not trial_pids(ours.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        (own,) = trial_pids(ours.pid)
        assert process_parents()[own] == ours.pid and theirs.pid not in trial_pids(ours.pid)
    finally:
        for pid in trial_pids(os.getpid()):  # both sleepers, while `ours` still holds its own
            os.kill(pid, signal.SIGKILL)
        for process in (ours, theirs):
            process.kill()
            process.wait()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the trial's process through /proc")
def test_a_trial_killed_mid_fit_resumes_from_its_saved_state(tmp_path: Path) -> None:
    fit = {"iterations": 3000, "batch_size": 64, "checkpoint_every": 100, "log_every": 100}
    path = sweep_file(tmp_path, "kill", solvers=[{"name": "dyweight", "nfe": 3}], fit=fit)
    process = start_spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    train = tmp_path / "runs" / "sweeps" / "kill" / "train"
    wait_for(lambda: list(train.glob("*.state.pt")) and trial_pids(process.pid), 300, process)
    time.sleep(1)  # a state or two later
    for pid in trial_pids(process.pid):
        os.kill(pid, signal.SIGKILL)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]
    (run,) = runs_of(tmp_path, "kill")  # the retry reopened its run: no second one
    assert run.info.status == "FINISHED"
    assert run.data.metrics["fit_resumed_from"] >= 100  # continued, not restarted from zero
    assert not list(train.glob("*.state.pt"))  # removed once the fit was kept


STORE_THREAD_BLOCKED = """
import threading, sys
from spanlift.cli import exit_now
from spanlift.platform.sweep import driver

release = threading.Event()
driver.experiment_id = lambda *args, **kwargs: release.wait()  # the store never opens
driver.sweep_experiment(sys.argv[1], "blocked")
exit_now(130)  # the command ends (Ctrl-C) while the store is still opening
"""


def test_a_sweep_ends_without_waiting_for_a_store_still_opening(tmp_path):
    """The local store opens on a thread beside Ray's start; a sweep interrupted meanwhile exits
    at once, whatever that thread is doing (an import it was in can hold it forever)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ended = subprocess.run(
        [sys.executable, "-c", STORE_THREAD_BLOCKED, uri], capture_output=True, timeout=60
    )
    assert ended.returncode == 130, ended.stderr
