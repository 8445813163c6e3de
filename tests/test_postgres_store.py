"""The run store in a real PostgreSQL server (tests/postgres_server.py; e2e: a server is started):
fits recorded there rank as they do from SQLite, processes opening a new database at once all
get it; and a missing driver or a server that does not answer is one line with status 2 on every
command."""

import importlib.util
import multiprocessing
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanlift.cli import main
from tests.cli_run import ROOT
from tests.postgres_server import PostgresServer, free_port, postgres_server, unavailable
from tests.store_contact import open_store_at

FIT = ["fit", "--backbone", "gmm", "--solver", "dyweight", "--nfe", "3", "--iterations", "20"]
FIT += ["--train-samples", "64", "--validation-samples", "32", "--test-samples", "64"]
FIT += ["--seeds", "0", "1", "--threads", "1", "--experiment", "pg"]
PROCESSES = 3


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_server() as running:
        yield running


@pytest.fixture(scope="module")
def opened_at_once(server: PostgresServer) -> tuple[str, list[str]]:
    """A new database that PROCESSES processes opened at once (`connect`): its URI, and what each
    process saw. The processes fork from one that has imported the store code."""
    uri = server.create_database("opened_at_once")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.store_contact"])
    with context.Manager() as manager, context.Pool(PROCESSES) as pool:
        start = manager.Barrier(PROCESSES)
        seen = pool.starmap(open_store_at, [(uri, start)] * PROCESSES)
    return uri, seen


@pytest.mark.e2e
def test_processes_opening_a_new_postgresql_store_at_once_all_get_it(
    opened_at_once: tuple[str, list[str]],
) -> None:
    """MLflow creates the tables of an empty database on first contact; processes doing it at
    once each run CREATE TABLE and all but one fail ("duplicate key value violates unique
    constraint"). Trials on several nodes opening one database must not."""
    assert opened_at_once[1] == ["ok"] * PROCESSES


def fit_and_rank(uri: str, folder: Path, capsys: pytest.CaptureFixture) -> str:
    """`spanlift fit` of two DyWeight replicates on the mixture recorded at `uri`, then
    `spanlift leaderboard` of them, the fits' wall times (which differ run to run) cut."""
    folder.mkdir()
    out = ["--cache", str(folder / "cache"), "--out", str(folder / "fitted")]
    assert main([*FIT, *out, "--tracking-uri", uri]) == 0
    assert f"at {uri}" in capsys.readouterr().out
    assert main(["leaderboard", "--experiment", "pg", "--tracking-uri", uri]) == 0
    return re.sub(r" · [\d.]+ s", "", capsys.readouterr().out)


@pytest.mark.e2e
def test_fits_recorded_in_postgresql_rank_as_from_sqlite(
    opened_at_once: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The same two fits recorded into the PostgreSQL database and into SQLite: the leaderboard
    reads the same table from both. (MLflow puts a database store's artifacts in `mlruns/` of
    the working folder.)"""
    monkeypatch.chdir(tmp_path)
    table = fit_and_rank(opened_at_once[0], tmp_path / "pg", capsys)
    assert "gmm         3  1 dyweight" in table and "   2    2 " in table  # 2 runs, 2 seeds
    assert table == fit_and_rank(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "sq", capsys)


COMMANDS = [
    ["leaderboard", "--experiment", "e"],
    ["rerun", "0123abcd"],
    ["fit", "--backbone", "gmm", "--solver", "dyweight", "--nfe", "3"],
    ["sweep", str(ROOT / "sweeps" / "gmm_smoke.yaml")],
    ["eval", "--solver", "euler", "--nfe", "3", "--samples", "8"],
    ["analyze", "halvorsen", "--train-states", "8"],
    ["doctor", "--device", "none"],
]


def one_line(capsys: pytest.CaptureFixture) -> str:
    """What the command wrote: one line on standard error (standard output may hold the stages
    it began), both together."""
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.out, captured
    return captured.err + captured.out


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_missing_driver_is_one_line_naming_the_extra(
    command: list[str], tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture
) -> None:
    """psycopg made unimportable (as where the `cluster` extra is not installed)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    uri = f"postgresql+psycopg://spanlift@127.0.0.1:{free_port()}/mlflow"
    assert main([*command, "--tracking-uri", uri]) == 2
    line = one_line(capsys)
    assert "driver psycopg" in line and "pip install 'spanlift[cluster]'" in line


def test_a_missing_driver_named_by_the_environment_is_one_line(
    tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture
) -> None:
    """The store from $MLFLOW_TRACKING_URI, opened where the command first reaches it; a driver
    SQLAlchemy knows that is not installed here."""
    if importlib.util.find_spec("pg8000") is not None:
        pytest.skip("pg8000 is installed here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql+pg8000://spanlift:secret@db/mlflow")
    assert main(["leaderboard", "--experiment", "e"]) == 2
    line = one_line(capsys)
    assert "driver pg8000" in line and "spanlift[cluster]" in line and "postgresql+psycopg" in line
    assert "secret" not in line


@pytest.mark.parametrize("command", COMMANDS[:4], ids=lambda c: c[0])
def test_a_server_that_does_not_answer_is_one_line(
    command: list[str], tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture
) -> None:
    """A port nothing listens on: host, port and what to check, at once rather than after
    MLflow's 100 s of retries."""
    pytest.importorskip(
        "psycopg", reason="psycopg is not installed (pip install 'spanlift[cluster]')"
    )
    monkeypatch.chdir(tmp_path)
    port = free_port()
    uri = f"postgresql+psycopg://spanlift:secret@127.0.0.1:{port}/mlflow"
    assert main([*command, "--tracking-uri", uri]) == 2
    written = one_line(capsys)
    assert f"PostgreSQL at 127.0.0.1:{port}" in written and "Connection refused" in written
    assert f"pg_isready -h 127.0.0.1 -p {port}" in written and "secret" not in written
