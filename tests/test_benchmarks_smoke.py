"""Each benchmark against its peer, run with tiny sizes: the figures are not checked here (they
live in docs/results.md), but what each benchmark asserts and measures is."""

import importlib.util
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import mlflow
import pytest
import ray
import yaml
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import each other as scripts do

import fid_vs_peers  # noqa: E402
import nowcast_scores  # noqa: E402
import sampling_vs_peers  # noqa: E402
import sweep_overhead  # noqa: E402
import sweep_scaling  # noqa: E402
import teacher_vs_loop  # noqa: E402
from memory_sampler import MemorySampler  # noqa: E402

from spanlift.backbones import load_backbone  # noqa: E402
from spanlift.platform.detectors import inception  # noqa: E402
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup  # noqa: E402
from spanlift.platform.evaluation.metrics.frechet import frechet_distance  # noqa: E402
from spanlift.platform.ray_runtime import start_ray  # noqa: E402
from spanlift.platform.sweep.config import load_sweep  # noqa: E402

HAS_K_DIFFUSION = importlib.util.find_spec("k_diffusion") is not None


@pytest.fixture(scope="module")
def digits():
    return load_backbone("digits")


@pytest.mark.parametrize("pair", sampling_vs_peers.PAIRS, ids=lambda p: f"{p.method}-{p.peer}")
def test_solver_loops_spend_the_same_nfe_and_land_where_their_peers_do(pair, digits):
    if pair.peer.startswith("k-diffusion") and not HAS_K_DIFFUSION:
        pytest.skip("k-diffusion is not installed (pip install k-diffusion 'setuptools<81')")
    outcome = sampling_vs_peers.compare("digits", pair, digits, 5, 2, 1, digits.denoise)
    assert outcome.nfe_spanlift == outcome.nfe_peer == 5
    assert outcome.difference < 1e-5
    assert sampling_vs_peers.check([outcome], 1e-5) == []
    assert outcome.seconds_spanlift > 0 and outcome.seconds_peer > 0


def test_fid_of_the_evaluator_is_torch_fidelitys(tmp_path):
    """The benchmark's torch-fidelity call and the evaluator (in this process) on 4 + 4 images."""
    a, b = fid_vs_peers.benchmark_images(8).tensor_split(2)
    weights = inception.inception_weights(tmp_path)
    theirs, seconds = fid_vs_peers.torch_fidelity_fid(a, b, weights, save_cpu_ram=True)
    evaluator = Evaluator(EvaluatorSetup("digits", "inception", tmp_path, detector_weights=weights))
    ours = frechet_distance(*(evaluator.image_states(x, ("fid",))["fid"] for x in (a, b)))
    assert theirs > 0 and seconds > 0
    fid_vs_peers.check({"torch-fidelity": theirs, "1 actor": ours}, 1e-6)
    with pytest.raises(SystemExit, match="FIDs differ"):
        fid_vs_peers.check({"torch-fidelity": theirs, "1 actor": ours * 1.001}, 1e-6)
    stages = fid_vs_peers.stages(a[:2], weights, 1)
    assert list(stages) == ["decode", "resize", "Inception", "moments"]
    assert all(s > 0 for s in stages.values())


def test_sequential_loop_fits_and_scores_every_configuration(tmp_path):
    sweep = tmp_path / "tiny.yaml"
    data = yaml.safe_load((ROOT / "sweeps" / "gmm_smoke.yaml").read_text())
    data["teacher"] |= {"train_samples": 32, "validation_samples": 8, "test_samples": 8}
    data["fit"]["iterations"] = 2
    sweep.write_text(yaml.safe_dump(data))
    assert sweep_overhead.sequential(sweep) > 0


def test_fixed_cost_is_the_run_duration_less_its_logged_compute(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("costs")
    start = datetime(2026, 1, 1)
    for duration, fit, score in ((10.0, 6.0, 1.5), (4.0, 0.0, 1.0)):
        run = client.create_run(experiment, start_time=int(start.timestamp() * 1000))
        for key, value in (("rmse", 0.1), ("fit_seconds", fit), ("eval_seconds", score)):
            client.log_metric(run.info.run_id, key, value)
        end = start + timedelta(seconds=duration)
        client.set_terminated(run.info.run_id, end_time=int(end.timestamp() * 1000))
    costs = sweep_overhead.fixed_costs(uri, "costs")
    mlflow.set_tracking_uri(None)
    assert sorted(costs) == pytest.approx([2.5, 3.0])


def test_memory_sampler_sees_the_driver_and_its_children():
    child = "x = bytearray(80 * 2**20); import time; time.sleep(1.5)"
    with MemorySampler(interval=0.05) as memory:
        subprocess.run([sys.executable, "-c", child], check=True)
    assert memory.peaks["driver"] > 0
    assert memory.peaks["other"] > 80 * 2**20


def test_scaling_grids_are_sweeps_of_equal_configurations(tmp_path):
    for size in (6, 12):
        path = tmp_path / f"{size}.yaml"
        path.write_text(yaml.safe_dump(sweep_scaling.gmm_sweep(size, 20)))
        config = load_sweep(path)
        assert len(config.trials()) == size
        assert {spec.key() for spec in config.trials()} == {config.trials()[0].key()}
        assert sorted(config.fit_of(entry).seed for entry in config.solvers) == list(range(size))
    sweep_scaling.plot([6, 12], [30.0, 50.0], [1, 2], [[90, 110], [150, 170]], tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):
    start_ray(None, tmp_path_factory.mktemp("ray"), num_cpus=2, verbose=False)
    yield
    ray.shutdown()


@pytest.mark.e2e
def test_parallel_teacher_pass_writes_the_loops_endpoints_and_is_then_read(local_ray, tmp_path):
    config = load_sweep(ROOT / "sweeps" / "digits_nfe.yaml")
    teacher = replace(config.teacher, train_samples=48, validation_samples=16, test_samples=16)
    config = replace(config, teacher=teacher)
    times, gap = teacher_vs_loop.one_repeat(config, tmp_path / "cache")
    assert gap < 1e-5
    assert set(times) == {"loop", "parallel", "cache hit"}
    assert times["cache hit"] < times["parallel"]


@pytest.mark.e2e
def test_evaluator_rate_is_measured_per_repeat(local_ray, tmp_path, digits):
    images = digits.reference_images()[:64]
    rates = sweep_scaling.evaluator_rate(1, images, 2, tmp_path, repeats=2)
    assert len(rates) == 2 and all(rate > 0 for rate in rates)


def test_skill_scores_benchmark_agrees_with_pysteps_and_times_both():
    rng = nowcast_scores.np.random.default_rng(1)
    target = nowcast_scores.storms(rng, 12, 32).reshape(2, 6, 32, 32)
    pred = nowcast_scores.forecast_of(rng, target)
    ours, theirs = (
        nowcast_scores.spanlift_csi(pred, target),
        nowcast_scores.pysteps_csi(pred, target),
    )
    assert ours.shape == theirs.shape == (3, 6)
    nowcast_scores.np.testing.assert_allclose(ours, theirs, 1e-12)
    seconds = nowcast_scores.repeated_seconds(lambda: None, 3)
    assert seconds.shape == (3,) and "(" in nowcast_scores.rate(12, seconds + 0.1)
