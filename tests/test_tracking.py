"""MLflow tracking: one run per configuration key, a bad URI refused, the leaderboard query."""

import time
from pathlib import Path

import pandas as pd
import pytest

from spanlift.errors import SettingsError
from spanlift.platform.tracking.board_format import format_leaderboard, write_csv
from spanlift.platform.tracking.board_plot import plot_leaderboard
from spanlift.platform.tracking.leaderboard import leaderboard, rank
from spanlift.platform.tracking.runs import ConfigurationRuns, connect, experiment_id
from spanlift.platform.tracking.store_uri import absolute_uri
from tests.store_contact import open_store_at


@pytest.fixture
def store(tmp_path: Path) -> str:
    uri = absolute_uri(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id(connect(uri), "exp", create=True)
    return uri


def test_relative_sqlite_uri_becomes_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_uri("sqlite:///mlflow.db") == f"sqlite:///{tmp_path}/mlflow.db"
    assert absolute_uri("http://host:5000") == "http://host:5000"


def test_a_configuration_reopens_its_run_instead_of_starting_another(store: str) -> None:
    runs = ConfigurationRuns(store, "exp")
    first = runs.open("k1", "ipndm", {"nfe": 3}, {})
    assert runs.open("k1", "ipndm", {"nfe": 3}, {}) == first  # a retried trial
    runs.finish(first, {"rmse": 0.5}, [])
    found = runs.find("k1")
    assert (found.run_id, found.status, found.metrics) == (first, "FINISHED", {"rmse": 0.5})
    assert runs.find("k2") is None
    failed = runs.open("k2", "dyweight", {}, {})
    runs.fail(failed, "fit diverged: loss is nan")
    assert runs.find("k2").failure == "fit diverged: loss is nan"
    assert len(runs.client.search_runs([runs.experiment_id])) == 2


def test_unreachable_tracking_server_is_refused_quickly() -> None:
    start = time.perf_counter()
    with pytest.raises(
        SettingsError, match=r"tracking URI http://127\.0\.0\.1:9 cannot be reached"
    ):
        connect("http://127.0.0.1:9")
    assert time.perf_counter() - start < 30


def test_missing_experiment_is_named(store: str) -> None:
    with pytest.raises(SettingsError, match="no MLflow experiment named 'other'"):
        leaderboard(ConfigurationRuns(store, "exp").client, "other")


RUNS = [  # backbone, nfe, solver, configuration, rmse
    ("gmm", 3, "ipndm", "ipndm[order=3]", 0.30),
    ("gmm", 3, "ipndm", "ipndm[order=4]", 0.25),
    ("gmm", 3, "spanlift", "spanlift[k=3]", 0.10),
    ("gmm", 3, "spanlift", "spanlift[k=5]", 0.12),
    ("gmm", 3, "dyweight", "dyweight", 0.20),
    ("gmm", 4, "ipndm", "ipndm[order=3]", 0.15),
    ("digits", 3, "euler", "euler", 0.40),
]


def log_runs(store: str) -> ConfigurationRuns:
    runs = ConfigurationRuns(store, "exp")
    for i, (backbone, nfe, solver, configuration, rmse) in enumerate(RUNS):
        params = {
            "backbone": backbone,
            "nfe": nfe,
            "solver": solver,
            "configuration": configuration,
        }
        run = runs.open(f"key{i}", configuration, params, {})
        runs.finish(run, {"rmse": rmse}, [])
    unfinished = runs.open("key-running", "x", {"backbone": "gmm", "nfe": 3, "solver": "x"}, {})
    runs.client.log_metric(unfinished, "rmse", 0.0)  # a running run never ranks
    return runs


def test_leaderboard_ranks_the_best_configuration_of_each_solver(
    store: str, tmp_path: Path
) -> None:
    entries = leaderboard(log_runs(store).client, "exp", "rmse", "min")
    table = {
        (e.backbone, e.nfe, e.rank): (e.solver, e.configuration, e.value, e.runs) for e in entries
    }
    # the expectation, computed independently from RUNS with pandas
    frame = pd.DataFrame(RUNS, columns=["backbone", "nfe", "solver", "configuration", "rmse"])
    best = frame.loc[frame.groupby(["backbone", "nfe", "solver"])["rmse"].idxmin()]
    best = best.assign(rank=best.groupby(["backbone", "nfe"])["rmse"].rank(method="first"))
    counts = frame.groupby(["backbone", "nfe", "solver"]).size()
    expected = {
        (r.backbone, r.nfe, int(r.rank)): (
            r.solver,
            r.configuration,
            pytest.approx(r.rmse),
            counts[r.backbone, r.nfe, r.solver],
        )
        for r in best.itertuples()
    }
    assert table == expected
    text = format_leaderboard(entries, "rmse")
    assert text.index("spanlift[k=3]") < text.index("dyweight") < text.index("ipndm[order=4]")
    csv = pd.read_csv(write_csv(entries, tmp_path / "board.csv"))
    assert len(csv) == len(entries) and set(csv["solver"]) == set(frame["solver"])
    png = plot_leaderboard(entries, "rmse", tmp_path / "board.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mode_max_reverses_the_ranking() -> None:
    frame = pd.DataFrame(
        [("b", "", 3, "a", "a", 1.0, "r1"), ("b", "", 3, "c", "c", 2.0, "r2")],
        columns=["backbone", "scale", "nfe", "solver", "configuration", "value", "run_id"],
    )
    assert [e.solver for e in rank(frame, "max")] == ["c", "a"]
    assert [e.solver for e in rank(frame, "min")] == ["a", "c"]


def test_fids_from_different_detectors_are_never_ranked_together(store: str, tmp_path) -> None:
    runs = ConfigurationRuns(store, "exp")
    logged = [  # solver, detector, fid: inception FIDs are lower here, and must not win
        ("ipndm", "digits:aaaaaaaaaaaa", 40.0),
        ("spanlift", "digits:aaaaaaaaaaaa", 20.0),
        ("euler", "inception:bbbbbbbbbbbb", 5.0),
    ]
    for i, (solver, detector, fid) in enumerate(logged):
        params = {"backbone": "digits", "nfe": 3, "solver": solver, "configuration": solver}
        run = runs.open(f"fid{i}", solver, params, {})
        runs.finish(run, {"fid": fid}, [], {"fid.detector": detector, "fid.reference": "dataset"})
    entries = leaderboard(runs.client, "exp", "fid", "min")
    ranks = {(e.scale, e.solver): e.rank for e in entries}
    assert ranks == {
        ("fid.detector=digits:aaaaaaaaaaaa, fid.reference=dataset", "spanlift"): 1,
        ("fid.detector=digits:aaaaaaaaaaaa, fid.reference=dataset", "ipndm"): 2,
        ("fid.detector=inception:bbbbbbbbbbbb, fid.reference=dataset", "euler"): 1,
    }
    table = format_leaderboard(entries, "fid")
    assert "fid against fid.detector=digits:aaaaaaaaaaaa, fid.reference=dataset:" in table
    assert "fid against fid.detector=inception:bbbbbbbbbbbb, fid.reference=dataset:" in table
    plot = plot_leaderboard(entries, "fid", tmp_path / "fid.png")
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_processes_opening_a_new_store_at_once_all_get_it(tmp_path: Path) -> None:
    """MLflow creates and migrates a new SQLite store on first contact; two processes doing it at
    once each run the migration and all but one fail ("duplicate column", "out-of-date schema").
    Two sweeps started together in one folder, or a leaderboard opened as a sweep starts, must not."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    uri = absolute_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with context.Manager() as manager, context.Pool(3) as pool:
        start = manager.Barrier(3)
        seen = pool.starmap(open_store_at, [(uri, start)] * 3)
    assert seen == ["ok"] * 3
