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


def table(out: str) -> list[tuple[str, ...]]:
    """(solver, seed, val RMSE, test RMSE) of each row of the printed table."""
    rows = re.findall(r"^(dyweight\S*)\s+(\d+)\s+\d+\s+(\S+)\s+(\S+)", out, flags=re.M)
    assert len(rows) == 2
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
