"""Ctrl-C during any command: status 130, one line saying what was kept, no traceback, and Ray's
processes (the evaluator actors with them) gone."""

import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spanlift.cli import main
from tests.cli_run import command_environment, spanlift

PROGRESS = re.compile(r"\d+%\||it/s\]|img/s\]|\?it/s|\?img/s")
"""A progress bar's line: drawn on standard error while the work runs, not a message."""


def messages(err: str) -> list[str]:
    """The lines of standard error that are not progress bars."""
    parts = (part.strip() for part in re.split(r"[\r\n]", err))
    return [part for part in parts if part and not PROGRESS.search(part)]


def interrupt_after(seconds: float) -> threading.Timer:
    """SIGINT to this process in `seconds`, as Ctrl-C in its terminal would send it."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def commands() -> list[tuple[str, ...]]:
    """Every command, as (group module, command function, words)."""
    return [
        ("fit", "cmd_fit", "fit"),
        ("fit", "cmd_demo", "demo"),
        ("sweep", "cmd_sweep", "sweep"),
        ("evaluate", "cmd_eval", "eval"),
        ("nowcast", "cmd_synth", "nowcast synth"),
        ("nowcast", "cmd_prepare", "nowcast prepare"),
        ("nowcast", "cmd_eval", "nowcast eval"),
        ("analyze", "cmd_halvorsen", "analyze halvorsen"),
        ("analyze", "cmd_ratio", "analyze ratio"),
        ("analyze", "cmd_out_of_span", "analyze out-of-span"),
        ("leaderboard", "cmd_leaderboard", "leaderboard"),
        ("rerun", "cmd_rerun", "rerun"),
        ("train", "cmd_train_digits", "train-digits"),
        ("train", "cmd_train_digits_detector", "train-digits-detector"),
        ("train", "cmd_train_nowcast", "train-nowcast"),
        ("doctor", "cmd_doctor", "doctor"),
        ("listing", "cmd_solvers", "solvers"),
    ]


ARGS = {
    "sweep": ["sweeps/gmm_smoke.yaml"],
    "nowcast prepare": ["--sevir-root", ".", "--out", "lr.zarr"],
    "nowcast eval": ["--data", "."],
    "analyze ratio": ["--checkpoint", "a.pt"],
    "leaderboard": ["--experiment", "e"],
    "rerun": ["0123"],
    "train-nowcast": ["--data", "."],
    "eval": ["--solver", "euler", "--nfe", "3"],
    "fit": ["--solver", "euler", "--nfe", "3"],
}


@pytest.mark.parametrize(("group", "function", "words"), commands(), ids=lambda v: str(v))
def test_every_command_answers_ctrl_c_with_status_130_and_one_line(
    tmp_path, monkeypatch, capsys, group, function, words
):
    """Whatever a command is doing when Ctrl-C comes, the command line answers it in one place."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.pt").touch()
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "gmm_smoke.yaml").touch()

    def working(args):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the interrupt arrives during this
        raise AssertionError("not interrupted")

    module = importlib.import_module(f"spanlift.cli.{group}")
    monkeypatch.setattr(module, function, working)
    try:
        code = main([*words.split(), *ARGS.get(words, [])])
    except KeyboardInterrupt:
        pytest.fail("the interrupt reached the caller")
    err = capsys.readouterr().err
    assert code == 130, err
    (line,) = messages(err)
    assert line.startswith("spanlift: interrupted"), line


def test_ctrl_c_during_a_fit_stops_it_and_says_what_is_kept(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--backbone", "gmm", "--solver", "dyweight", "--nfe", "3"]
    argv += ["--iterations", "100000", "--train-samples", "64", "--test-samples", "16"]
    timer = interrupt_after(3.0)
    try:
        code = main([*argv, "--no-tracking"])
    except KeyboardInterrupt:
        pytest.fail("the interrupt reached the caller")
    finally:
        timer.cancel()
    err = capsys.readouterr().err
    assert code == 130, err
    (line,) = messages(err)
    assert "interrupted" in line and "runs/fit" in line, line


def descendants(pid: int) -> set[int]:
    """The processes `pid` started, and theirs (Ray's head processes, their workers)."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for child, parent in (map(int, line.split()) for line in table.splitlines()):
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running (not exited, not a zombie)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.add(pid)
    return running


def interrupted(folder: Path, args: list[str], ready: str) -> tuple[Any, set[int]]:
    """`spanlift ARGS`, sent SIGINT a second after `ready` appears on its standard error (its
    work has begun): its result, its standard error from that moment on in `stderr`, and the
    processes it had started by then."""
    process = subprocess.Popen(
        [sys.executable, "-m", "spanlift.cli", *args],
        cwd=folder,
        env=command_environment(folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: process.stderr.read(1), "")))
    reader.start()
    deadline = time.monotonic() + 240
    while ready not in "".join(err) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    started = descendants(process.pid)
    before = len(err)
    process.send_signal(signal.SIGINT)
    out = process.stdout.read()
    process.wait(timeout=120)
    reader.join(timeout=10)
    return subprocess.CompletedProcess(
        args, process.returncode, out, "".join(err[before:])
    ), started


def assert_clean_interrupt(result: subprocess.CompletedProcess, started: set[int]) -> str:
    """Status 130, one line, no traceback, and every process the command started gone."""
    assert result.returncode == 130, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    (line,) = messages(result.stderr)
    assert line.startswith("spanlift: interrupted"), line
    assert started, "the command had started no process (Ray) yet"
    deadline = time.monotonic() + 20
    while alive(started) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(started), "processes left running"
    return line


@pytest.mark.e2e
def test_ctrl_c_during_eval_stops_its_actors_and_ray(tmp_path):
    args = ["eval", "--solver", "euler", "--nfe", "3", "--metrics", "fid", "--samples", "200000"]
    args += ["--evaluators", "1", "--num-cpus", "2", "--no-tracking"]
    line = assert_clean_interrupt(*interrupted(tmp_path, args, "euler nfe=3"))
    assert "nothing" in line and "recorded" in line, line


@pytest.mark.e2e
def test_ctrl_c_during_nowcast_eval_stops_its_actors_and_ray(tmp_path):
    made = spanlift(tmp_path, "nowcast", "synth", "--events", "8", "--out", "storms")
    assert made.returncode == 0, made.stderr
    args = ["nowcast", "eval", "--data", "storms", "--solvers", "ddim,dyweight"]
    args += ["--train-samples", "8", "--test-samples", "4", "--teacher-nfe", "4"]
    args += ["--iterations", "100000", "--evaluators", "1"]
    args += ["--num-cpus", "2", "--no-tracking"]
    line = assert_clean_interrupt(*interrupted(tmp_path, args, "fit dyweight"))
    assert "runs/nowcast" in line, line
