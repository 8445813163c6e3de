"""`spanlift sweep` end to end on local Ray: real Tune trials, fits in the trials' processes and
on Ray Train workers, an MLflow store.

Each test runs the command line in its own folder, as a user would, and inspects what it left:
the MLflow runs, the sweep summary, the fits' saved states. Reruns, a diverging fit and a
trajectory solver: `test_sweep_trust.py`; interruptions: `test_sweep_interrupts.py`.
"""

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from spanlift.platform.tracking.runs import connect
from spanlift.platform.tracking.store_uri import local_store
from tests.cli_run import ROOT, spanlift

pytestmark = pytest.mark.e2e

GMM_SMOKE = ROOT / "sweeps" / "gmm_smoke.yaml"


def sweep_file(folder: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load(GMM_SMOKE.read_text())
    data.update(experiment=name, resources={"workers": 1, "max_failures": 1})
    data.update(**changes)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def configuration_runs(uri: str, experiment: str, query: str = "") -> list:
    """The experiment's runs of configurations (not the sweep's parent run); none while the sweep
    has not yet created its store (polling must not create it beside the sweep)."""
    store = local_store(uri)
    if store is not None and not store.exists():
        return []
    client = connect(uri)  # waits while a starting sweep creates the store
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], query) if found else []
    return [r for r in runs if r.data.tags.get("spanlift.command") != "sweep"]


def runs_of(folder: Path, experiment: str) -> list:
    return configuration_runs(f"sqlite:///{folder / 'mlflow.db'}", experiment)


def summary(folder: Path, experiment: str) -> dict:
    return json.loads((folder / "runs" / "sweeps" / experiment / "summary.json").read_text())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("smoke")
    result = spanlift(folder, "sweep", str(GMM_SMOKE), "--num-cpus", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, result


def test_smoke_sweep_records_one_finished_run_per_configuration(smoke) -> None:
    folder, result = smoke
    assert "2/2 distinct configurations finished" in result.stdout
    runs = {r.data.params["solver"]: r for r in runs_of(folder, "gmm-smoke")}
    assert set(runs) == {"ipndm", "dyweight"}
    assert all(r.info.status == "FINISHED" for r in runs.values())
    fitted, analytic = runs["dyweight"], runs["ipndm"]
    assert fitted.data.params["nfe"] == "3" and fitted.data.params["backbone"] == "gmm"
    assert fitted.data.params["teacher"] == "ipndm[order=4] nfe=35"
    assert fitted.data.params["fit.workers"] == "2"  # a DDP fit over two Ray Train workers
    assert 0 < fitted.data.metrics["rmse"] < analytic.data.metrics["rmse"]  # the fit helped
    assert fitted.data.metrics["fit_seconds"] > 0 == analytic.data.metrics["fit_seconds"]
    assert fitted.data.metrics["ms_per_image"] > 0
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(fitted.info.run_id)}
    assert "samples.png" in names and any(n.endswith(".pt") for n in names)
    analytic_files = {a.path for a in client.list_artifacts(analytic.info.run_id)}
    assert analytic_files == {"samples.png", "errors.parquet", "configuration.json"}
    metrics = fitted.data.metrics
    best = f"best: dyweight nfe=3, val_rmse {metrics['val_rmse']:.4g}, rmse {metrics['rmse']:.4g}"
    assert best in result.stdout.splitlines()  # 4 significant digits, as every other line
    experiment = client.get_experiment_by_name("gmm-smoke").experiment_id
    page = (
        f"http://127.0.0.1:5000/#/experiments/{experiment}/runs?workflowType=machine_learning"
        "&orderByKey=metrics.%60rmse%60&orderByAsc=true"
    )
    assert f"see them: mlflow ui --backend-store-uri sqlite:///{folder / 'mlflow.db'}" in (
        result.stdout
    )
    assert result.stdout.rstrip().endswith(f"then open {page}")


def test_ray_train_finds_the_state_api_it_queries(smoke) -> None:
    """The dashboard, which serves Ray's state API, starts with a sweep of Ray Train fits: its
    controller's monitor would otherwise log a failed query every few seconds."""
    folder, _ = smoke
    logs = folder / "runs" / "sweeps" / "gmm-smoke" / "ray-logs" / "session_latest" / "logs"
    assert (logs / "dashboard_StateHead.log").is_file()
    assert not [f for f in logs.glob("worker-*.err") if "State API" in f.read_text()]


def test_runs_follow_mlflow_conventions(smoke) -> None:
    folder, _ = smoke
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("gmm-smoke")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("spanlift.command") == "sweep"]
    assert parent.info.run_name == "sweep gmm-smoke" and parent.info.status == "FINISHED"
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {
        "sweep.yaml",
        "summary.json",
    }
    children = {r.info.run_name: r for r in runs if r is not parent}
    assert set(children) == {"ipndm[order=3] nfe=3", "dyweight nfe=3"}
    for child in children.values():
        tags = child.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["spanlift.sweep"] == "gmm-smoke" and tags["spanlift.trial_id"]
        assert tags["mlflow.source.name"].startswith("spanlift sweep")
        assert len(tags["spanlift.code_version"]) == 12
    losses = client.get_metric_history(children["dyweight nfe=3"].info.run_id, "loss")
    assert [m.step for m in losses] == list(range(60))  # one point per fit iteration
    assert losses[-1].value < losses[0].value


def test_teacher_is_generated_once_and_shared(smoke) -> None:
    folder, _ = smoke
    assert summary(folder, "gmm-smoke")["teacher_generations"] == 1
    entries = list((folder / "runs" / "sweeps" / "gmm-smoke" / "teacher").glob("teacher-*"))
    assert len(entries) == 3  # the training, validation and test seeds
    assert all((e / "manifest.json").is_file() for e in entries)


def test_leaderboard_command_ranks_the_sweep(smoke) -> None:
    folder, _ = smoke
    result = spanlift(
        folder, "leaderboard", "--experiment", "gmm-smoke", "--csv", "b.csv", "--plot", "b.png"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("gmm "))
    assert lines[first].split()[2:4] == ["1", "dyweight"]
    assert lines[first + 1].split()[2:4] == ["2", "ipndm"]
    assert (folder / "b.csv").read_text().count("\n") == 3
    assert (folder / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_tpe_sweep_samples_the_define_by_run_space(tmp_path: Path) -> None:
    solvers = [{"name": "ipndm", "nfe": [3, 4], "search": {"order": [1, 2, 3]}}]
    search = {"algorithm": "tpe", "num_samples": 3, "metric": "rmse", "mode": "min"}
    path = sweep_file(tmp_path, "tpe", solvers=solvers, search=search)
    result = spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3/3 distinct configurations finished" in result.stdout
    runs = runs_of(tmp_path, "tpe")
    assert len(runs) == 3  # a configuration TPE proposes again is answered, not run again
    for run in runs:
        assert run.data.params["solver"] == "ipndm" and run.data.params["nfe"] in {"3", "4"}
        assert run.data.params["configuration"] in {f"ipndm[order={k}]" for k in (1, 2, 3)}
        assert run.info.status == "FINISHED"


def test_digits_sweep_logs_fid_and_the_leaderboard_ranks_by_it(tmp_path: Path) -> None:
    path = sweep_file(
        tmp_path,
        "fid",
        backbone="digits",
        teacher={"train_samples": 32, "validation_samples": 32, "test_samples": 32},
        solvers=[
            {"name": "euler", "nfe": 3},
            {"name": "ipndm", "nfe": 3, "settings": {"order": 3}},
            {"name": "spanlift", "nfe": 3, "settings": {"base": "ipndm", "hidden_dim": 8}},
        ],
        search={"algorithm": "grid", "metric": "fid", "mode": "min"},
        fit={"iterations": 10, "batch_size": 8},
        evaluation={"metrics": ["fid", "diagnostics"], "samples": 100, "evaluators": 1},
    )
    result = spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    runs = {r.data.params["solver"]: r for r in runs_of(tmp_path, "fid")}
    for run in runs.values():
        assert run.data.metrics["fid"] > 0 and run.data.params["fid.samples"] == "100"
        assert run.data.params["fid.detector"].startswith("digits_eval:")  # the default
        assert run.data.params["fid.reference"] == "dataset"
    assert runs["ipndm"].data.metrics["fid"] < runs["euler"].data.metrics["fid"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(runs["spanlift"].info.run_id)}
    assert {"spanlift-diagnostics.csv", "spanlift-diagnostics.png"} <= artifacts
    assert "spanlift-diagnostics.csv" not in {
        a.path for a in client.list_artifacts(runs["ipndm"].info.run_id)
    }
    assert len(list((tmp_path / "runs" / "sweeps" / "fid" / "eval-cache").glob("reference-*"))) == 1
    outcome = summary(tmp_path, "fid")
    best = outcome["best"]  # the searcher saw every trial's FID
    assert best["fid"] == min(r.data.metrics["fid"] for r in runs.values())
    # The sweep's one evaluator actor loads the backbone once for all scoring and FID; a trial
    # process (reused by Tune) loads it at most once more.
    loads = [r.data.metrics["model_loads"] for r in runs.values()]
    assert outcome["model_loads"] == sum(loads) <= 1 + len(runs)
    board = spanlift(tmp_path, "leaderboard", "--experiment", "fid", "--metric", "fid")
    assert board.returncode == 0, board.stderr
    assert "fid against fid.detector=digits_eval:" in board.stdout


def test_impossible_resources_are_refused_before_any_trial(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, "big", resources={"workers": 4, "worker_cpu": 1})
    result = spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    assert result.returncode == 2
    assert "resources: a trial cannot be placed: 4.1 CPUs per trial" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "sweeps" / "big" / "tune").exists()


def test_unreachable_tracking_uri_is_refused_before_ray_starts(tmp_path: Path) -> None:
    start = time.perf_counter()
    result = spanlift(tmp_path, "sweep", str(GMM_SMOKE), "--tracking-uri", "http://127.0.0.1:9")
    assert result.returncode == 2
    assert "tracking URI http://127.0.0.1:9 cannot be reached" in result.stderr
    assert not (tmp_path / "runs").exists()
    assert time.perf_counter() - start < 60
