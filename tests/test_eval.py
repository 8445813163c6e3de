"""FID on Ray evaluator actors: the same number for 1, 2 or 3 actors, cached references, bad input."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import ray

from spanlift.errors import CacheError
from spanlift.platform.evaluation import pool
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.fid import evaluate_fid, reference_moments
from spanlift.platform.evaluation.frechet import frechet_distance
from spanlift.platform.evaluation.reference import ReferenceSet, load_reference, save_reference
from spanlift.platform.ray_runtime import start_ray
from spanlift.solvers import SolverSpec

ROOT = Path(__file__).parent.parent
SPEC = SolverSpec("ipndm", nfe=3, settings={"order": 3})
SEEDS = list(range(150))


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):
    start_ray(None, tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> EvaluatorSetup:
    return EvaluatorSetup("digits", "digits", tmp_path_factory.mktemp("cache"), threads=1)


def test_fid_over_1_2_3_actors_equals_the_single_process_fid(local_ray, setup) -> None:
    evaluator = Evaluator(setup)
    reference = evaluator.image_moments(evaluator.backbone.reference_images())
    single = evaluator.solver_moments(SPEC, None, SEEDS)
    expected = frechet_distance(single, reference)
    assert expected > 10  # three steps are far from the data
    for count in (1, 2, 3):
        actors = pool.start_evaluators(setup, count, cpus=0.5)
        merged = pool.solver_moments(actors, SPEC, None, SEEDS, f"{count} actors")
        dataset = pool.image_moments(actors, evaluator.backbone.reference_images(), "dataset")
        for actor in actors:
            ray.kill(actor)
        assert merged.count == len(SEEDS) and dataset.count == reference.count
        # Merging is exact (test_frechet: 1e-9); what remains is float32 rounding of the model
        # and detector, which differs by batch size (batches of ≤ 13 images: 4.8e-6 relative).
        assert frechet_distance(merged, dataset) == pytest.approx(expected, rel=1e-5)


def test_reference_statistics_are_cached_and_bound_to_their_detector(local_ray, setup) -> None:
    actors = pool.start_evaluators(setup, 1, cpus=0.5)
    identity = ray.get(actors[0].identity.remote())
    first = reference_moments(actors, setup, ReferenceSet("dataset"), identity)
    files = list(setup.cache_dir.glob("reference-*.npz"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    again = reference_moments(actors, setup, ReferenceSet("dataset"), identity)
    assert files[0].stat().st_mtime_ns == stamp and again.count == first.count
    result = evaluate_fid(actors, setup, SPEC, None, 80, ReferenceSet("dataset"))
    ray.kill(actors[0])
    assert result.detector == identity and result.reference == "dataset" and result.fid > 0
    other = save_reference(setup.cache_dir / "other.npz", first, "inception:0123456789ab")
    with pytest.raises(CacheError, match="computed with detector inception:0123456789ab"):
        load_reference(other, identity)


def spanlift_eval(folder: Path, *args: str, solver: str = "euler") -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "spanlift.cli", "eval", "--solver", solver, "--nfe", "3"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*command, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "fid,lpipz"], "--metrics: unknown lpipz"),
        (["--samples", "1"], "--samples: expected at least 2, got 1"),
        (["--detector", "lenet"], "unknown detector 'lenet'"),
        (["--checkpoint", "absent.pt"], "checkpoint not found: absent.pt"),
        (["--metrics", "diagnostics"], "needs a SpanLift solver, got euler"),
    ],
)
def test_eval_refuses_bad_input_with_one_line(tmp_path: Path, args, message: str) -> None:
    result = spanlift_eval(tmp_path, "--num-cpus", "2", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_eval_writes_spanlift_diagnostics(tmp_path: Path) -> None:
    result = spanlift_eval(
        tmp_path, "--set", "base=ipndm", "--metrics", "diagnostics", solver="spanlift"
    )
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(tmp_path / "runs" / "eval" / "spanlift[base=ipndm]-nfe3-diagnostics.csv")
    assert table["step"].tolist() == [0, 1, 2]
    assert (table["relative_magnitude"] == 0).all()  # untrained: β = 0
    assert (tmp_path / "runs" / "eval" / "spanlift[base=ipndm]-nfe3-diagnostics.png").is_file()
    assert "relative_magnitude" in result.stdout
