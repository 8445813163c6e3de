"""`spanlift fit --seeds …` fits its replicates side by side, one torch thread each: the numbers
of the same replicates fitted one after another with `--threads 1`."""

import os
import re

import pytest

from spanlift.cli import main

ARGS = [
    "fit", "--solver", "dyweight", "--nfe", "4", "--backbone", "gmm", "--train-samples", "64",
    "--validation-samples", "32", "--test-samples", "16", "--iterations", "6", "--batch-size",
    "8", "--seeds", "0", "1", "--no-tracking",
]  # fmt: skip


def table(out: str, solver: str = "dyweight", count: int = 2) -> list[tuple[str, ...]]:
    """(solver, seed, val RMSE, test RMSE) of each row of the printed table."""
    pattern = rf"^({solver}\S*)\s+(\d+)\s+\d+\s+(\S+)\s+(\S+)"
    rows = re.findall(pattern, out, flags=re.M)
    assert len(rows) == count
    return rows


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_side_by_side_replicates_equal_one_thread_in_turn(tmp_path, capsys):
    cache = ["--cache", str(tmp_path / "cache")]
    assert main([*ARGS, *cache, "--out", str(tmp_path / "a")]) == 0
    parallel = capsys.readouterr().out
    assert "2 side by side, one torch thread each" in parallel
    assert main([*ARGS, *cache, "--out", str(tmp_path / "b"), "--threads", "1"]) == 0
    in_turn = capsys.readouterr().out
    assert "side by side" not in in_turn
    assert table(parallel) == table(in_turn)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_two_stage_replicates_fit_each_base_once_with_the_numbers_of_one_thread(tmp_path, capsys):
    """Three SpanLift replicates on two processes are handed out stage by stage (every base,
    then the solvers on them): each base is fitted once, and the rows are those of `--threads 1`."""
    two_stage = [*ARGS[: ARGS.index("--seeds")], "--seeds", "0", "1", "2", "--no-tracking"]
    two_stage[two_stage.index("dyweight")] = "spanlift"
    cache = ["--cache", str(tmp_path / "cache")]
    assert main([*two_stage, *cache, "--out", str(tmp_path / "a")]) == 0
    parallel = capsys.readouterr().out
    assert main([*two_stage, *cache, "--out", str(tmp_path / "b"), "--threads", "1"]) == 0
    in_turn = capsys.readouterr().out
    assert table(parallel, "spanlift", 3) == table(in_turn, "spanlift", 3)
    for folder in ("a", "b"):
        assert len(list((tmp_path / folder).glob("dyweight-*.pt"))) == 3
        assert len(list((tmp_path / folder).glob("spanlift-*.pt"))) == 3


def test_a_fit_says_what_it_will_take_from_the_work_left(tmp_path, capsys, monkeypatch):
    """Any estimate above ANNOUNCED is printed before the work: the teacher and fits counted
    on an empty cache; nothing left to do once both are cached."""
    import spanlift.cli.fit as fit_command

    monkeypatch.setattr(fit_command, "ANNOUNCED", 1e-9)
    where = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "a"), "--threads", "1"]
    assert main([*ARGS, *where]) == 0
    first = capsys.readouterr().out
    assert re.search(r"this will take about \d+ s here: 112 teacher seeds at NFE 35, 2 fits", first)
    assert main([*ARGS, *where]) == 0
    assert "this will take" not in capsys.readouterr().out
