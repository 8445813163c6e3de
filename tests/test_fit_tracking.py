"""`spanlift fit` records each replicate as an MLflow run, as a sweep's trial does: the
leaderboard ranks it (its text table shows run ids on request) and `spanlift rerun` repeats it."""

import pytest
import torch
from mlflow.tracking import MlflowClient

from spanlift.cli import main

FIT = ["fit", "--backbone", "gmm", "--nfe", "3", "--iterations", "3", "--threads", "1"]
FIT += ["--train-samples", "16", "--validation-samples", "8", "--test-samples", "8"]


@pytest.fixture
def threads():
    """`spanlift rerun` runs torch on the recorded threads: this process's are put back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def runs_of(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def test_fit_runs_rank_on_the_leaderboard_and_rerun(tmp_path, monkeypatch, capsys, uri, threads):
    monkeypatch.chdir(tmp_path)
    learned = [*FIT, "--solver", "dyweight", "--seeds", "0", "1", "--tracking-uri", uri]
    assert main(learned) == 0
    assert main([*FIT, "--solver", "euler", "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    runs = runs_of(uri, "fit")
    assert len(runs) == 3 and all(run.info.run_id in printed for run in runs)
    replicates = [run for run in runs if run.data.params["solver"] == "dyweight"]
    assert sorted(run.data.params["fit.seed"] for run in replicates) == ["0", "1"]
    assert len({run.data.params["configuration.key"] for run in replicates}) == 1
    for run in runs:
        assert {"rmse", "val_rmse", "error_median", "error_p90", "nfe"} <= set(run.data.metrics)
        assert run.data.tags["spanlift.command"] == "fit"
        files = {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)}
        assert {"configuration.json", "errors.parquet"} <= files
    assert any(path.endswith(".pt") for path in files_of(uri, replicates[0].info.run_id))

    assert (
        main(["leaderboard", "--experiment", "fit", "--tracking-uri", uri, "--columns", "run_id"])
        == 0
    )
    board = capsys.readouterr().out
    assert "dyweight" in board and "euler" in board and "†" not in board
    shown = next(line for line in board.splitlines() if " dyweight " in line)
    assert any(run.info.run_id in shown for run in replicates), shown

    assert main(learned) == 0  # the same fits again: their runs are found, not recorded twice
    assert len(runs_of(uri, "fit")) == 3

    assert main(["rerun", replicates[0].info.run_id, "--tracking-uri", uri]) == 0
    assert "reproduced" in capsys.readouterr().out


def files_of(uri: str, run_id: str) -> set[str]:
    return {a.path for a in MlflowClient(uri).list_artifacts(run_id)}


def test_no_tracking_records_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*FIT, "--solver", "euler", "--no-tracking"]) == 0
    assert not (tmp_path / "mlflow.db").exists()
