"""Evaluator actors: the backbone loads once per actor, however many evaluations it serves; an
actor that dies mid-evaluation is restarted, its shards retried, and the FID and the sample count
equal those of an undisturbed run; a user error fails at once, its message intact, with no
restart; actors stopped at the end of an evaluation stay dead."""

import os
import signal
import time
from pathlib import Path

import pytest
import ray

from spanlift.backbones import load_backbone
from spanlift.errors import CheckpointError
from spanlift.platform.evaluation import pool as pool_module
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.pool import EvaluatorPool, running_evaluators
from spanlift.platform.ray_runtime import start_ray
from spanlift.solvers import SolverSpec

pytestmark = pytest.mark.e2e

SPEC = SolverSpec("euler", nfe=3)
SEEDS = list(range(96))  # 2 actors x 4 shards of 12 samples


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):
    start_ray(None, tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> EvaluatorSetup:
    return EvaluatorSetup("digits", "digits", tmp_path_factory.mktemp("cache"), threads=1)


class KillOnFirstShard:
    """A stand-in for the pool's progress bar that SIGKILLs one evaluator process when the first
    shard arrives: the other shards are then in flight or queued, so the kill lands mid-run."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.killed_at: float | None = None

    def __call__(self, *args, **kwargs) -> "KillOnFirstShard":
        return self

    def __enter__(self) -> "KillOnFirstShard":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, count: int) -> None:
        if self.killed_at is None:
            os.kill(self.pid, signal.SIGKILL)
            self.killed_at = time.perf_counter()


def timed_fid(pool: EvaluatorPool, reference: FeatureMoments) -> tuple[float, int, float]:
    """FID of SPEC's samples, the number of samples counted, and the wall seconds it took."""
    start = time.perf_counter()
    states = pool.solver_states(SPEC, None, SEEDS, ("fid",), "fid")
    seconds = time.perf_counter() - start
    return frechet_distance(states["fid"], reference), states["fid"].count, seconds


def test_an_actor_loads_once_and_one_killed_mid_run_is_restarted_its_shards_counting_once(
    local_ray, setup, monkeypatch
) -> None:
    with running_evaluators(setup, 2, cpus=0.5) as pool:
        images = load_backbone("digits").reference_images()
        reference = pool.image_states(images, ("fid",), "reference")["fid"]
        assert pool.loads == 2  # one per actor, not one per shard (8)
        later = EvaluatorPool(setup, pool.actors)  # another evaluation on them: a trial, say
        expected, count, undisturbed = timed_fid(later, reference)
        assert count == len(SEEDS) and later.loads == 0
        victim = ray.get(pool.actors[1].pid.remote())
        bar = KillOnFirstShard(victim)
        monkeypatch.setattr(pool_module, "tqdm", bar)
        disturbed_pool = EvaluatorPool(setup, pool.actors)
        fid, count, disturbed = timed_fid(disturbed_pool, reference)
        assert bar.killed_at is not None
        recovery = time.perf_counter() - bar.killed_at
        assert count == len(SEEDS)  # no shard lost, none counted twice
        assert fid == pytest.approx(expected, rel=1e-9)
        assert ray.get(pool.actors[1].pid.remote()) != victim  # a restarted process answers
        assert disturbed_pool.loads == 1  # the restarted actor loaded the backbone again
    assert stays_dead(pool.actors[1])  # stopped on the way out, for good: not restarted
    print(f"\nundisturbed {undisturbed:.2f} s, with a kill {disturbed:.2f} s ", end="")
    print(f"({recovery:.2f} s from the kill to the last shard)")


def stays_dead(actor, timeout: float = 60.0) -> bool:
    """Whether `actor` stops answering within `timeout` (ray.kill lands asynchronously: a call
    made just after it may still be served)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.5)
    return False


def test_a_user_error_on_an_actor_is_raised_with_its_message_and_not_retried(
    local_ray, setup
) -> None:
    with running_evaluators(setup, 2, cpus=0.5) as pool:
        pids = ray.get([actor.pid.remote() for actor in pool.actors])
        with pytest.raises(CheckpointError, match=r"checkpoint not found: absent\.pt"):
            pool.solver_states(SPEC, Path("absent.pt"), SEEDS, ("fid",), "fid")
        assert ray.get([actor.pid.remote() for actor in pool.actors]) == pids  # none restarted
