"""Sweep results that can be trusted and reused: what is cached is keyed by everything that
produced it and by the code version, a changed sweep file is never resumed, and the MLflow store
users point at with MLFLOW_TRACKING_URI is the one used.

One scenario on local Ray, through the command line, on the analytic Gaussian mixture: each
step starts from what the step before left, as a user's sweeps do.
"""

from pathlib import Path

import pytest
import yaml

from tests.cli_run import spanlift
from tests.test_sweep import configuration_runs, sweep_file

pytestmark = pytest.mark.e2e


def dyweight_sweep(folder: Path, **fit: object) -> Path:
    return sweep_file(
        folder,
        "trust",
        solvers=[{"name": "dyweight", "nfe": 3}],
        fit={"iterations": 20, "batch_size": 16, **fit},
    )


def test_a_sweep_reuses_only_what_the_same_settings_and_code_produced(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    store = f"sqlite:///{tmp_path / 'elsewhere' / 'store.db'}"

    def sweep(*args: str, version: str = "v1") -> str:
        env = {"MLFLOW_TRACKING_URI": store, "SPANLIFT_CODE_VERSION": version}
        result = spanlift(tmp_path, "sweep", str(path), *args, "--num-cpus", "2", env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    path = dyweight_sweep(tmp_path)
    sweep()
    assert not (tmp_path / "mlflow.db").exists()  # the variable wins over the default store
    (first,) = configuration_runs(store, "trust")

    # --resume with a changed file is refused, naming the change, before anything runs
    data = yaml.safe_load(path.read_text())
    data["fit"]["lr"] = 0.001
    path.write_text(yaml.safe_dump(data))
    resumed = spanlift(tmp_path, "sweep", str(path), "--resume", env={"MLFLOW_TRACKING_URI": store})
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "fit.lr: 0.005 -> 0.001" in resumed.stderr and "--restart" in resumed.stderr
    assert "Traceback" not in resumed.stderr

    # a longer fit is fitted again, not served the 20-iteration weights
    dyweight_sweep(tmp_path, iterations=60)
    sweep("--restart")
    longer = next(
        r
        for r in configuration_runs(store, "trust", "attributes.status = 'FINISHED'")
        if r.data.params["fit.iterations"] == "60"
    )
    assert longer.data.metrics["fit_seconds"] > 0
    assert longer.data.metrics["rmse"] != first.data.metrics["rmse"]
    assert len(list((tmp_path / "runs" / "sweeps" / "trust" / "fitted").glob("*.pt"))) == 2

    # other code: nothing reused, unless the user asks for it
    assert "(0 taken from MLflow)" in sweep("--restart", version="v2")
    assert "(1 taken from MLflow)" in sweep("--restart", "--reuse-across-versions", version="v3")
