"""Sweep results that can be trusted and reused: what is cached is keyed by everything that
produced it, a changed sweep file is never resumed, and the stores users point at are used.

End to end on local Ray, through the command line, on the analytic Gaussian mixture.
"""

from pathlib import Path

import yaml

from tests.test_sweep import configuration_runs, spanlift, sweep_file


def dyweight_sweep(folder: Path, name: str, **fit: object) -> Path:
    return sweep_file(
        folder,
        name,
        solvers=[{"name": "dyweight", "nfe": 3}],
        fit={"iterations": 20, "batch_size": 16, **fit},
    )


def test_changed_fit_settings_refit_and_runs_go_where_mlflow_tracking_uri_points(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'elsewhere' / 'store.db'}"
    (tmp_path / "elsewhere").mkdir()
    env = {"MLFLOW_TRACKING_URI": store}
    path = dyweight_sweep(tmp_path, "stale")
    first = spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert not (tmp_path / "mlflow.db").exists()  # the variable wins over the default
    (before,) = configuration_runs(store, "stale")

    dyweight_sweep(tmp_path, "stale", iterations=60)  # the same file, a longer fit
    second = spanlift(tmp_path, "sweep", str(path), "--restart", "--num-cpus", "2", env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    runs = configuration_runs(store, "stale", "attributes.status = 'FINISHED'")
    after = next(r for r in runs if r.data.params["fit.iterations"] == "60")
    assert after.info.run_id != before.info.run_id
    assert after.data.metrics["fit_seconds"] > 0  # fitted again, not the 20-iteration weights
    assert after.data.metrics["rmse"] != before.data.metrics["rmse"]
    fitted = list((tmp_path / "runs" / "sweeps" / "stale" / "fitted").glob("*.pt"))
    assert len(fitted) == 2


def test_resume_with_a_changed_sweep_file_is_refused_with_what_changed(tmp_path: Path) -> None:
    path = dyweight_sweep(tmp_path, "changed")
    first = spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    data = yaml.safe_load(path.read_text())
    data["fit"]["lr"] = 0.001
    path.write_text(yaml.safe_dump(data))
    resumed = spanlift(tmp_path, "sweep", str(path), "--resume", "--num-cpus", "2")
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert "fit.lr: 0.005 -> 0.001" in resumed.stderr
    assert "--restart" in resumed.stderr
    assert "Traceback" not in resumed.stderr


def test_code_version_is_part_of_what_a_finished_run_is_reused_for(tmp_path: Path) -> None:
    path = dyweight_sweep(tmp_path, "version")
    first = spanlift(tmp_path, "sweep", str(path), "--num-cpus", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    older = {"SPANLIFT_CODE_VERSION": "an-older-version"}  # as if the fitting code had changed
    again = spanlift(tmp_path, "sweep", str(path), "--restart", "--num-cpus", "2", env=older)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(0 taken from MLflow)" in again.stdout
    reuse = spanlift(
        tmp_path,
        "sweep",
        str(path),
        "--restart",
        "--reuse-across-versions",
        "--num-cpus",
        "2",
        env={"SPANLIFT_CODE_VERSION": "a-third-version"},
    )
    assert reuse.returncode == 0, reuse.stdout + reuse.stderr
    assert "(1 taken from MLflow)" in reuse.stdout
