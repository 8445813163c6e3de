"""Sweep results that can be trusted and reused, on one sweep and its reruns.

The sweep (local Ray, the command line, the analytic Gaussian mixture) holds an analytic solver,
a DyWeight fit, a DyWeight fit that diverges (lr 1e30) and an AMED fit matched at its grid
points. The first run checks what a run leaves: the store users point at with
MLFLOW_TRACKING_URI, the failed configuration with its reason beside the finished ones, the
teacher states a trajectory solver fits on. The last test reruns it as a user's later sweeps
do, each step starting from what the step before left: what is cached is keyed by everything
that produced it and by the code version, a changed sweep file is never resumed, a rerun takes
finished configurations from MLflow without duplicating a run.
"""

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from spanlift.platform.tracking.runs import FAILURE_TAG
from tests.cli_run import spanlift
from tests.test_sweep import configuration_runs, summary, sweep_file

pytestmark = pytest.mark.e2e

SOLVERS = [
    {"name": "ipndm", "nfe": 3, "settings": {"order": 3}},
    {"name": "dyweight", "nfe": 3},
    {"name": "dyweight", "nfe": 3, "label": "DyWeight lr 1e30", "fit": {"lr": 1e30, "warmup": 0}},
    {"name": "amed", "nfe": 3, "settings": {"afs": True}, "fit": {"iterations": 10}},
]


def trust_sweep(folder: Path, iterations: int = 20) -> Path:
    return sweep_file(
        folder, "trust", solvers=SOLVERS, fit={"iterations": iterations, "batch_size": 16}
    )


class Sweeps:
    """The scenario's folder, sweep file and store (not the folder's default `mlflow.db`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "elsewhere").mkdir()
        self.store = f"sqlite:///{folder / 'elsewhere' / 'store.db'}"
        self.path = trust_sweep(folder)

    def run(self, *args: str, version: str = "v1") -> subprocess.CompletedProcess:
        env = {"MLFLOW_TRACKING_URI": self.store, "SPANLIFT_CODE_VERSION": version}
        return spanlift(self.folder, "sweep", str(self.path), *args, "--num-cpus", "2", env=env)

    def runs(self, query: str = "") -> list:
        return configuration_runs(self.store, "trust", query)


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> tuple[Sweeps, str]:
    sweeps = Sweeps(tmp_path_factory.mktemp("trust"))
    result = sweeps.run()
    assert result.returncode == 1, result.stdout + result.stderr  # schedulers and CI notice
    return sweeps, result.stdout


def test_the_store_named_by_mlflow_tracking_uri_is_used(first) -> None:
    sweeps, _ = first
    assert not (sweeps.folder / "mlflow.db").exists()  # the variable wins over the default store
    assert len(sweeps.runs()) == 4


def test_a_diverging_trial_fails_with_its_reason_and_the_sweep_goes_on(first) -> None:
    sweeps, output = first
    assert "3/4 distinct configurations finished" in output, output
    assert "failed: DyWeight lr 1e30 nfe=3" in output and "diverged" in output, output
    runs = {r.info.run_name: r for r in sweeps.runs()}
    assert runs["DyWeight lr 1e30 nfe=3"].info.status == "FAILED"
    assert "diverged" in runs["DyWeight lr 1e30 nfe=3"].data.tags[FAILURE_TAG]
    others = [run for name, run in runs.items() if name != "DyWeight lr 1e30 nfe=3"]
    assert [run.info.status for run in others] == ["FINISHED"] * 3


def test_a_diverged_fit_is_not_retried(first) -> None:
    """A fit that diverged diverges again: Tune does not retry its trial (each retry would start
    a process to read the failure from MLflow), as it retries a lost process or node."""
    sweeps, _ = first
    (error,) = (sweeps.folder / "runs" / "sweeps" / "trust" / "tune").glob("*/error.txt")
    failures = [line for line in error.read_text().splitlines() if line.startswith("Failure #")]
    assert len(failures) == 1 and "diverged" in error.read_text(), error.read_text()[-2000:]


def test_a_trajectory_solver_fits_on_teacher_states_prepared_by_the_sweep(first) -> None:
    """AMED is matched at its grid points: the sweep prepares two extra teacher entries with the
    states at that grid (training and validation seeds), the fit reads them, and its run logs
    the validation curve."""
    sweeps, _ = first
    entries = list((sweeps.folder / "runs" / "sweeps" / "trust" / "teacher").glob("teacher-*"))
    manifests = [json.loads((e / "manifest.json").read_text()) for e in entries]
    states = [m["state_sigmas"] for m in manifests if m["state_sigmas"]]
    assert len(entries) == 5 and len(states) == 2  # training and validation states
    assert all(len(s) == 2 for s in states)  # σ_1, σ_2 of 2 steps
    (run,) = sweeps.runs("params.solver = 'amed'")
    assert run.info.status == "FINISHED"
    history = MlflowClient(sweeps.store).get_metric_history(run.info.run_id, "val_loss")
    assert [m.step for m in history] == [0, 10]


def test_a_rerun_reuses_only_what_the_same_settings_and_code_produced(first) -> None:
    sweeps, _ = first
    (first_fit,) = sweeps.runs("params.solver = 'dyweight' and attributes.status = 'FINISHED'")

    # an earlier run is protected; --resume with a changed file is refused, naming the change,
    # before anything runs
    again = sweeps.run()
    assert again.returncode == 2 and "--resume" in again.stderr
    data = yaml.safe_load(sweeps.path.read_text())
    data["fit"]["lr"] = 0.001
    sweeps.path.write_text(yaml.safe_dump(data))
    resumed = sweeps.run("--resume")
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "fit.lr: 0.005 -> 0.001" in resumed.stderr and "--restart" in resumed.stderr
    assert "Traceback" not in resumed.stderr

    # a longer fit is fitted again, not served the 20-iteration weights; what did not change
    # (AMED's own 10 iterations) is taken from MLflow. The analytic solver is scored again: its
    # run carries the sweep's fit budget, as `leaderboard --by-fit` groups by it.
    trust_sweep(sweeps.folder, iterations=60)
    longer_sweep = sweeps.run("--restart")
    assert "(1 taken from MLflow)" in longer_sweep.stdout, longer_sweep.stdout
    longer = next(
        r
        for r in sweeps.runs("params.solver = 'dyweight'")
        if r.data.params["fit.iterations"] == "60"
    )
    assert longer.info.status == "FINISHED" and longer.data.metrics["fit_seconds"] > 0
    assert longer.data.metrics["rmse"] != first_fit.data.metrics["rmse"]
    fitted = sweeps.folder / "runs" / "sweeps" / "trust" / "fitted"
    assert len(list(fitted.glob("dyweight*.pt"))) == 2

    # other code: nothing reused, unless the user asks for it
    assert "(0 taken from MLflow)" in sweeps.run("--restart", version="v2").stdout
    reused = sweeps.run("--restart", "--reuse-across-versions", version="v3")
    assert reused.returncode == 1, reused.stdout + reused.stderr  # the diverged fit, again
    assert "3/4 distinct configurations finished (3 taken from MLflow)" in reused.stdout
    assert summary(sweeps.folder, "trust")["teacher_generations"] == 0

    # no duplicate runs: one per configuration and code version (v1: 4, then 3 with 60
    # iterations; v2: 4; v3 took all from MLflow, the diverged fit's failure too)
    keys = [
        (r.data.tags["spanlift.key"], r.data.tags["spanlift.code_version"]) for r in sweeps.runs()
    ]
    assert len(keys) == len(set(keys)) == 4 + 3 + 4
