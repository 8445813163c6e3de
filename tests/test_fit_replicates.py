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
