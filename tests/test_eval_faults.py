"""Evaluator processes: kept by Ray and reused, so an evaluator loads once per process; one that
dies mid-evaluation is replaced, its shard rerun, and the FID and the sample count equal those of
an undisturbed run; a user error fails at once, its message intact, and kills no process."""

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
from spanlift.platform.evaluation.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.ray_runtime import start_ray
from spanlift.solvers import SolverSpec

SPEC = SolverSpec("euler", nfe=3)
SEEDS = list(range(96))  # 2 at a time x 4 shards each of 12 samples


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):
    start_ray(None, tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> EvaluatorSetup:
    return EvaluatorSetup("digits", "digits", tmp_path_factory.mktemp("cache"), threads=1)


class KillOnFirstShard:
    """A stand-in for the pool's progress bar that SIGKILLs the given processes when the first
    shard arrives: the next shard is then running in one of them, so the kill lands mid-run."""

    def __init__(self, pids: set[int]) -> None:
        self.pids = pids
        self.killed_at: float | None = None

    def __call__(self, *args, **kwargs) -> "KillOnFirstShard":
        return self

    def __enter__(self) -> "KillOnFirstShard":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, count: int) -> None:
        if self.killed_at is None:
            for pid in self.pids:
                os.kill(pid, signal.SIGKILL)
            self.killed_at = time.perf_counter()


def timed_fid(pool: EvaluatorPool, reference: FeatureMoments) -> tuple[float, int, float]:
    """FID of SPEC's samples, the number of samples counted, and the wall seconds it took."""
    start = time.perf_counter()
    states = pool.solver_states(SPEC, None, SEEDS, ("fid",), "fid")
    seconds = time.perf_counter() - start
    return frechet_distance(states["fid"], reference), states["fid"].count, seconds


def test_processes_keep_their_evaluator_and_one_killed_mid_run_is_replaced_counting_shards_once(
    local_ray, setup, monkeypatch
) -> None:
    first = EvaluatorPool(setup, 2, cpus=0.5)
    reference = first.image_moments(load_backbone("digits").reference_images(), "reference")["fid"]
    expected, count, undisturbed = timed_fid(first, reference)
    assert count == len(SEEDS)
    assert first.loads == len(first.processes) >= 1  # once per process, not per shard (8 + 8)

    again = EvaluatorPool(setup, 2, cpus=0.5)  # a later evaluation: another trial, say
    timed_fid(again, reference)
    assert again.loads == len(again.processes - first.processes)  # kept processes load nothing

    disturbed_pool = EvaluatorPool(setup, 2, cpus=0.5)
    victims = first.processes | again.processes
    bar = KillOnFirstShard(victims)
    monkeypatch.setattr(pool_module, "tqdm", bar)
    fid, count, disturbed = timed_fid(disturbed_pool, reference)
    assert bar.killed_at is not None
    recovery = time.perf_counter() - bar.killed_at
    assert count == len(SEEDS)  # no shard lost, none counted twice
    assert fid == pytest.approx(expected, rel=1e-9)
    replacements = disturbed_pool.processes - victims
    assert replacements and disturbed_pool.loads >= 1  # new processes took over and loaded
    print(f"\nundisturbed {undisturbed:.2f} s, with a kill {disturbed:.2f} s ", end="")
    print(f"({recovery:.2f} s from the kill to the last shard)")


def test_a_user_error_in_a_shard_is_raised_with_its_message_and_kills_no_process(
    local_ray, setup
) -> None:
    pool = EvaluatorPool(setup, 2, cpus=0.5)
    pool.solver_states(SPEC, None, SEEDS[:24], ("fid",), "warm-up")
    with pytest.raises(CheckpointError, match=r"checkpoint not found: absent\.pt"):
        pool.solver_states(SPEC, Path("absent.pt"), SEEDS, ("fid",), "fid")
    for pid in pool.processes:
        os.kill(pid, 0)  # still there: raises ProcessLookupError for a process that died
