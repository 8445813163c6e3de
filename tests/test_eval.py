"""Sample metrics on Ray evaluator actors: the same FID and LPIPS for 1 or 3 actors, cached
references, `spanlift eval` into MLflow, bad input (LPIPS asked for without its weights among it)
refused before any work."""

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray
import torch
import torchvision
from mlflow.tracking import MlflowClient

from spanlift.cli import main
from spanlift.errors import CacheError
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics.fid import reference_moments
from spanlift.platform.evaluation.metrics.frechet import frechet_distance
from spanlift.platform.evaluation.metrics.reference import (
    ReferenceSet,
    load_reference,
    save_reference,
)
from spanlift.platform.evaluation.pool import (
    EvaluatorPool,
    running_evaluators,
    start_evaluators,
)
from spanlift.platform.evaluation.sample_metrics import evaluate_samples
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.sampling import tensor_memory
from spanlift.solvers import SolverSpec
from tests.cli_run import spanlift

SPEC = SolverSpec("ipndm", nfe=3, settings={"order": 3})
SEEDS = list(range(150))


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):
    start_ray(None, tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    ray.shutdown()


def write_alexnet_features(path: Path) -> Path:
    """AlexNet feature weights (random: they stand in for torchvision's ImageNet file)."""
    torch.manual_seed(0)
    state = torchvision.models.alexnet().state_dict()
    torch.save({k: v for k, v in state.items() if k.startswith("features.")}, path)
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> EvaluatorSetup:
    cache = tmp_path_factory.mktemp("cache")
    alexnet = write_alexnet_features(cache / "alexnet.pth")
    return EvaluatorSetup("digits", "digits", cache, threads=1, options={"lpips_weights": alexnet})


@pytest.mark.e2e
def test_fid_and_lpips_over_1_and_3_actors_equal_the_single_process_values(
    local_ray, setup
) -> None:
    evaluator = Evaluator(setup)
    reference = evaluator.image_states(evaluator.backbone.reference_images(), ("fid",))["fid"]
    single = evaluator.solver_states(SPEC, None, SEEDS, ("fid", "lpips"))
    expected = frechet_distance(single["fid"], reference)
    assert expected > 10  # three steps are far from the data
    assert single["lpips"].count == len(SEEDS) and single["lpips"].mean > 0
    assert single["sampling"].count == len(SEEDS) and single["sampling"].total > 0
    with running_evaluators(setup, 3, cpus=0.5) as three:
        for count in (1, 3):  # one actor: the pool's path; three: 150 seeds split unevenly
            pool = EvaluatorPool(setup, three.actors[:count])
            merged = pool.solver_states(SPEC, None, SEEDS, ("fid", "lpips"), f"x{count}")
            dataset = {"fid": reference}
            if count == 3:  # the dataset's 1 797 images over the most actors: merged once
                dataset = pool.image_states(
                    evaluator.backbone.reference_images(), ("fid",), "dataset"
                )
            assert merged["fid"].count == len(SEEDS) and dataset["fid"].count == reference.count
            # Merging is exact (test_frechet: 1e-9); what remains is float32 rounding of the
            # model and detector, which differs by batch size (≤ 13 images: 4.8e-6 relative).
            fid = frechet_distance(merged["fid"], dataset["fid"])
            assert fid == pytest.approx(expected, rel=1e-5)
            assert merged["lpips"].count == len(SEEDS)
            assert merged["lpips"].mean == pytest.approx(single["lpips"].mean, rel=1e-5)


def test_an_auto_batch_is_measured_once_per_solver_and_image_shape(setup, monkeypatch) -> None:
    """With batch size "auto" an evaluator measures a pass at one and two samples the first time
    it draws a solver's samples (or scores images of a shape), then draws every later shard in
    batches of what it measured: a shard's probes are not redone (four shards an actor)."""
    evaluator = Evaluator(setup)
    sizes, probes = [], []
    shard_part, peak = evaluator.shard_part, tensor_memory.device_peak

    def drawn(solver, batch, metrics):
        sizes.append(len(batch))
        return shard_part(solver, batch, metrics)

    monkeypatch.setattr(evaluator, "shard_part", drawn)
    monkeypatch.setattr(tensor_memory, "device_peak", lambda *a: probes.append(1) or peak(*a))
    images = evaluator.backbone.reference_images()
    for shard in (images[:40], images[40:80]):
        evaluator.image_states(shard, ("fid",))
    states = [evaluator.solver_states(SPEC, None, SEEDS[i : i + 6], ("fid",)) for i in (0, 6, 12)]
    assert sizes == [1, 2, 6, 6, 6] and len(probes) == 4
    fixed = Evaluator(replace(setup, batch_size=6))  # what "auto" chose, as a number
    again = fixed.solver_states(SPEC, None, SEEDS[12:18], ("fid",))["fid"]
    assert np.array_equal(again.outer, states[-1]["fid"].outer)


@pytest.mark.e2e
def test_reference_statistics_are_cached_and_bound_to_their_detector(local_ray, setup) -> None:
    pool = start_evaluators(setup, 1, cpus=0.5)
    identity = pool.call("identity")
    first = reference_moments(pool, ReferenceSet("dataset"), identity)
    files = list(setup.cache_dir.glob("reference-*.npz"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    again = reference_moments(pool, ReferenceSet("dataset"), identity)
    assert files[0].stat().st_mtime_ns == stamp and again.count == first.count
    report = evaluate_samples(pool, SPEC, None, 80, ("fid",), ReferenceSet("dataset"))
    pool.stop()
    params, metrics = report.params(), report.metrics()
    assert params["fid.detector"] == identity and params["fid.reference"] == "dataset"
    assert metrics["fid"] > 0
    assert "lpips" not in metrics and metrics["throughput_images_per_s"] > 0
    other = save_reference(setup.cache_dir / "other.npz", first, "inception:0123456789ab")
    with pytest.raises(CacheError, match="computed with detector inception:0123456789ab"):
        load_reference(other, identity)


def spanlift_eval(folder: Path, *args: str, solver: str = "euler") -> subprocess.CompletedProcess:
    return spanlift(folder, "eval", "--solver", solver, "--nfe", "3", *args)


@pytest.mark.e2e
def test_eval_logs_fid_lpips_and_latency_to_mlflow_and_ranks_them(tmp_path: Path) -> None:
    alexnet = write_alexnet_features(tmp_path / "alexnet.pth")
    common = ["--samples", "48", "--evaluators", "2", "--num-cpus", "2"]
    for solver, nfe in (("euler", "3"), ("ipndm", "4")):
        result = spanlift(
            tmp_path, "eval", "--solver", solver, "--nfe", nfe, "--metrics", "fid,lpips",
            "--lpips-weights", str(alexnet), *common,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "lpips " in result.stdout and "images/s over 2 evaluators" in result.stdout
    client = MlflowClient("sqlite:///" + str(tmp_path / "mlflow.db"))
    runs = client.search_runs([client.get_experiment_by_name("eval-digits").experiment_id])
    assert len(runs) == 2
    for run in runs:
        metrics, params = run.data.metrics, run.data.params
        assert {"fid", "lpips", "latency_ms_per_image", "throughput_images_per_s"} <= set(metrics)
        assert params["lpips.detector"].startswith("alexnet:")
        assert params["eval.samples"] == "48" and params["fid.reference"] == "dataset"
    board = spanlift(tmp_path, "leaderboard", "--experiment", "eval-digits", "--metric", "lpips")
    assert board.returncode == 0, board.stderr
    assert "euler" in board.stdout and "ipndm" in board.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "fid,lpipz"], "--metrics: unknown lpipz"),
        (["--metrics", ","], "--metrics: unknown empty list"),
        (["--samples", "1"], "--samples: expected at least 2, got 1"),
        (["--detector", "lenet"], "unknown detector 'lenet'"),
        (["--checkpoint", "absent.pt"], "--checkpoint absent.pt: no such file or folder"),
        (["--metrics", "diagnostics"], "needs a SpanLift solver, got euler"),
        (["--metrics", "fid,lpips"], "LPIPS unavailable: AlexNet weights"),
        (["--metrics", "image_reward"], "backbone 'digits' has no prompts"),
    ],
)
def test_eval_refuses_bad_input_with_one_line(
    tmp_path: Path, monkeypatch, capsys, args, message: str
) -> None:
    monkeypatch.chdir(tmp_path)  # in-process: every check runs before Ray or MLflow start
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))  # no AlexNet weights there
    code = main(["eval", "--solver", "euler", "--nfe", "3", "--num-cpus", "2", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


@pytest.mark.e2e
def test_eval_writes_spanlift_diagnostics(tmp_path: Path) -> None:
    result = spanlift_eval(
        tmp_path,
        "--set",
        "base=ipndm",
        "--metrics",
        "diagnostics",
        "--no-tracking",
        solver="spanlift",
    )
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(tmp_path / "runs" / "eval" / "spanlift[base=ipndm]-nfe3-diagnostics.csv")
    assert table["step"].tolist() == [0, 1, 2]
    assert (table["relative_magnitude"] == 0).all()  # untrained: β = 0
    assert (tmp_path / "runs" / "eval" / "spanlift[base=ipndm]-nfe3-diagnostics.png").is_file()
    assert "relative_magnitude" in result.stdout
