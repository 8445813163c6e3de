"""`spanlift nowcast synth | prepare | eval` as a user runs them: the table, the NetCDF and PNGs,
the MLflow runs the leaderboard ranks, and one clear line with exit status 2 for bad input."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from mlflow.tracking import MlflowClient

from spanlift.backbones.nowcast_windows import NowcastWindows
from spanlift.platform.nowcast_suite import window_event
from spanlift.platform.sweep.config import load_sweep
from spanlift.seeds import TEST_SEED_OFFSET
from spanlift.solvers import read_checkpoint
from tests.cli_run import ROOT, spanlift


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nowcast")
    result = spanlift(folder, "nowcast", "synth", "--events", "16", "--out", "data/sevir_synth")
    assert result.returncode == 0, result.stderr
    assert "wrote 16 synthetic storm events" in result.stdout
    return folder


@pytest.mark.e2e
def test_nowcast_eval_prints_the_table_writes_scores_and_plots_and_feeds_the_leaderboard(
    synth: Path,
) -> None:
    result = spanlift(
        synth, "nowcast", "eval", "--solvers", "ddim,dyweight,dyweight+observed", "--teacher-nfe", "20",
        "--train-samples", "32", "--iterations", "5", "--batch-size", "4", "--evaluators", "1",
        "--num-cpus", "2", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("solver"))
    for column in ("HSS", "LPIPS", "CSI-M", "CSI-4", "CSI-16", "CSI≥16", "CSI≥219"):
        assert column in header
    rows = [line.split()[0] for line in lines[lines.index(header) + 2 :][:5]]
    assert rows == ["persistence", "teacher", "ddim", "dyweight", "dyweight"]
    assert "LPIPS unavailable: AlexNet weights" in result.stdout  # none in this torch hub
    out = synth / "runs" / "nowcast"
    scores = xr.open_dataset(out / "nowcast-scores.nc", engine="h5netcdf")
    solvers = ["persistence", "teacher ddim 20", "ddim", "dyweight (mse, teacher)"]
    assert list(scores.solver.values) == [*solvers, "dyweight (mse, observed)"]
    assert dict(scores.csi.sizes) == {"solver": 5, "pool": 3, "threshold": 6, "lead_time": 6}
    assert_persistence_scores(scores.sel(solver="persistence"), synth / "data" / "sevir_synth")
    for png in ("nowcast-lead-time.png", "nowcast-frames.png"):
        assert (out / png).stat().st_size > 10_000
    client = MlflowClient("sqlite:///" + str(synth / "mlflow.db"))
    experiment = client.get_experiment_by_name("nowcast-sevir-synth")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 5
    for run in runs:
        assert {"csi_m", "csi4", "csi16", "hss", "csi_219"} <= set(run.data.metrics)
        assert run.data.params["skill.reference"].startswith("observed frames of nowcast-")
        assert run.data.params["skill.convention"] == "exact"
    observed = next(r for r in runs if r.data.params["solver"] == "dyweight (mse, observed)")
    assert observed.data.params["fit.target"] == "observed"
    artifacts = {a.path for a in client.list_artifacts(observed.info.run_id)}
    assert {"nowcast-lead-time.png", "nowcast-frames.png"} <= artifacts
    assert any(path.endswith(".nc") for path in artifacts)
    # each fit variant is scored with its own weights, not with the last variant fitted
    weights = {
        r.data.params["solver"]: checkpoint_bytes(client, r.info.run_id, synth)
        for r in runs
        if r.data.params["solver"].startswith("dyweight")
    }
    assert weights["dyweight (mse, teacher)"] != weights["dyweight (mse, observed)"]
    board = spanlift(
        synth, "leaderboard", "--experiment", "nowcast-sevir-synth", "--metric", "csi16"
    )
    assert board.returncode == 0, board.stderr
    assert "higher is better" in board.stdout
    assert "csi16 against skill.reference=observed frames of nowcast-" in board.stdout
    assert "skill.convention=exact" in board.stdout
    assert scores.attrs["convention"] == "exact"
    assert "counts summed, exact convention)" in result.stdout
    for solver in ("ddim", "dyweight (mse, observed)", "teacher ddim 20", "persistence"):
        assert solver in board.stdout
    event = window_event(synth / "data" / "sevir_synth", TEST_SEED_OFFSET)
    catalog = pd.read_csv(synth / "data" / "sevir_synth" / "CATALOG.csv")
    corners = catalog[catalog["id"] == event.event].iloc[0]
    assert event.latitude == pytest.approx((corners.llcrnrlat + corners.urcrnrlat) / 2)
    assert event.longitude == pytest.approx((corners.llcrnrlon + corners.urcrnrlon) / 2)
    offset = pd.Timestamp(event.start_utc) - pd.Timestamp(corners.time_utc)
    assert abs(offset) <= pd.Timedelta(hours=4)  # within the 4-hour event (offsets are ±)


def assert_persistence_scores(scores: xr.Dataset, data: Path) -> None:
    """The persistence row's counts equal those of the last past frame repeated, counted again
    here on the held-out windows (with pysteps-independent numpy thresholds)."""
    windows = NowcastWindows.open(data, 32).test.numpy().astype(np.int64)
    forecast = np.repeat(windows[:, 6:7], 6, axis=1)
    observed = windows[:, 7:]
    for threshold in (74, 133):  # 16 does not survive VIL → [−1, 1] → VIL exactly
        hits = ((forecast >= threshold) & (observed >= threshold)).sum(axis=(0, 2, 3))
        np.testing.assert_array_equal(scores.hits.sel(pool=1, threshold=threshold).values, hits)


def checkpoint_path(client: MlflowClient, run_id: str, folder: Path) -> Path:
    """The solver checkpoint a run logged, downloaded into `folder`."""
    [name] = [a.path for a in client.list_artifacts(run_id) if a.path.endswith(".pt")]
    return Path(client.download_artifacts(run_id, name, str(folder / run_id)))


def checkpoint_bytes(client: MlflowClient, run_id: str, folder: Path) -> bytes:
    """The bytes of the solver checkpoint a run logged."""
    return checkpoint_path(client, run_id, folder).read_bytes()


def checkpoint_metadata(client: MlflowClient, run_id: str, folder: Path) -> dict:
    """The metadata of the solver checkpoint a run logged."""
    return read_checkpoint(checkpoint_path(client, run_id, folder))["metadata"]


@pytest.mark.e2e
def test_bad_nowcast_input_exits_2_with_one_line_and_no_output(synth: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (("nowcast", "eval", "--data", "nowhere"), "spanlift nowcast synth --out nowhere"),
        (("nowcast", "eval", "--solvers", "ddim,rk45"), "unknown solver 'rk45'"),
        (("nowcast", "eval", "--solvers", "spanlift+lpips"), "unknown variant +lpips"),
        (("nowcast", "synth", "--out", "data/sevir_synth"), "exists and is not empty"),
        (("nowcast", "prepare", "--sevir-root", str(empty), "--out", "x.zarr"), "CATALOG.csv"),
    ]
    for args, message in cases:
        result = spanlift(synth, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, args
    assert not (synth / "x.zarr").exists()


def test_the_nowcast_sweep_file_asks_for_the_papers_rows() -> None:
    config = load_sweep(ROOT / "sweeps" / "nowcast_synth.yaml")
    labels = [entry.label or entry.name for entry in config.solvers]
    assert labels[-3:] == [
        "spanlift (mse, teacher)",
        "spanlift (pooled, teacher)",
        "spanlift (mse, observed)",
    ]
    fits = [config.fit_of(entry) for entry in config.solvers[-3:]]
    assert [(f.loss, f.target) for f in fits] == [
        ("mse", "teacher"),
        ("pooled", "teacher"),
        ("mse", "observed"),
    ]
    assert config.teacher.solver.name == "euler" and config.teacher.solver.nfe == 100
    assert config.metric == "csi16" and config.mode == "max"
    assert config.backbone_options["data"] == str((ROOT / "data" / "sevir_synth").resolve())


SWEEP = """
experiment: nowcast-sweep
backbone: {name: nowcast, options: {data: data/sevir_synth}}
teacher: {solver: euler, settings: {}, nfe: 10, train_samples: 16, validation_samples: 8, test_samples: 8}
solvers:
  - {name: euler, nfe: 3, label: ddim}
  - {name: dyweight, nfe: 3, fit: {target: observed}, label: "dyweight (mse, observed)"}
search: {algorithm: grid, metric: csi16, mode: max}
fit: {iterations: 3, batch_size: 4, checkpoint_every: 3}
evaluation: {metrics: [skill], samples: 8, evaluators: 1, skill_convention: earthformer}
resources: {trial_cpu: 0.1, workers: 1, worker_cpu: 0.8, evaluator_cpu: 0.2}
"""


@pytest.mark.e2e
def test_a_nowcast_sweep_searches_on_skill_and_logs_the_scores(synth: Path) -> None:
    (synth / "nowcast.yaml").write_text(SWEEP)
    result = spanlift(synth, "sweep", "nowcast.yaml", "--num-cpus", "2", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "best: " in result.stdout and "csi16" in result.stdout
    client = MlflowClient("sqlite:///" + str(synth / "mlflow.db"))
    experiment = client.get_experiment_by_name("nowcast-sweep")
    runs = client.search_runs([experiment.experiment_id], "params.solver != ''")
    assert sorted(r.data.params["solver"] for r in runs) == ["ddim", "dyweight (mse, observed)"]
    for run in runs:
        assert 0 <= run.data.metrics["csi16"] <= 1
        assert run.data.params["skill.convention"] == "earthformer"
        assert "hss" not in run.data.metrics  # Earthformer's module has no HSS
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "skill-scores.nc" in artifacts
    fitted = next(r for r in runs if r.data.params["solver"].startswith("dyweight"))
    assert fitted.data.params["fit.target"] == "observed"


@pytest.mark.e2e
def test_nowcast_eval_run_again_finds_its_runs_instead_of_recording_them_twice(
    synth: Path,
) -> None:
    """The README's cold-then-warm case at the suite's smallest settings: the second run with the
    same settings records nothing new, so the leaderboard has one run per row, chosen as the
    solver's only configuration (no †), and the fitted row keeps its fit's cost: the whole
    two-stage fit, its base's seconds included (`fit.total_seconds`, as its checkpoint says)."""
    experiment = "nowcast-twice"
    argv = [
        "nowcast", "eval", "--solvers", "ddim,spanlift", "--teacher-nfe", "2", "--nfe", "2",
        "--train-samples", "4", "--test-samples", "2", "--iterations", "1", "--batch-size", "2",
        "--evaluators", "1", "--num-cpus", "1", "--out", "runs/twice", "--experiment", experiment,
    ]  # fmt: skip
    first, second = (spanlift(synth, *argv, timeout=300) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    client = MlflowClient("sqlite:///" + str(synth / "mlflow.db"))
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 4
    board = spanlift(synth, "leaderboard", "--experiment", experiment, "--metric", "csi16")
    assert board.returncode == 0, board.stderr
    assert "†" not in board.stdout
    fitted = next(line for line in board.stdout.splitlines() if "spanlift (mse" in line)
    assert " it · " in fitted  # its fit's iterations and seconds, not "-"
    (two_stage,) = [r for r in runs if r.data.params["solver"].startswith("spanlift")]
    metadata = checkpoint_metadata(client, two_stage.info.run_id, synth)
    whole = metadata["base_fit_seconds"] + metadata["fit_seconds"]
    assert metadata["base_fit_seconds"] > 0
    assert two_stage.data.metrics["fit.total_seconds"] == pytest.approx(whole)
    assert "4 of them recorded by an earlier nowcast eval" in second.stdout
