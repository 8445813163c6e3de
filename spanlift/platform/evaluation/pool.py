"""Evaluator actors on Ray: shards scored in parallel, metric states merged on the driver.

An evaluator actor is one process holding an `Evaluator` (backbone, detector: loaded on its first
call, then kept), with its CPUs (and GPU) reserved for as long as it lives, so Ray and Tune
account for it honestly. A sweep starts its actors once and all its trials share them (trial
scoring, sample metrics); `spanlift eval` starts them for one evaluation. Shards go to the actors
round-robin; the driver merges the states as they arrive (`states.py`), so every metric is the
same for 1 or N actors. An actor whose process dies is restarted by Ray and its shards retried
(`RESTARTS`); a shard's task returns one result however often it ran, so each is merged once.
With a sweep stored in a bucket, an actor fetches the files a call names (a checkpoint, a teacher
entry) into its node's mirror of the bucket before the call.
"""

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import ray
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones.loaded import backbone_loads
from spanlift.errors import SpanliftError
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics.states import merge_states
from spanlift.platform.storage import Storage
from spanlift.solvers import SolverSpec

SHARDS_PER_ACTOR = 4
RESTARTS = 2
"""Times Ray restarts an evaluator whose process died (OOM killer, lost node, segfault), and
retries the shards it had: a shard is a pure function of (spec, checkpoint, seeds), so a retry
gives the same states, and one death costs a restart instead of the evaluation (and the sweep
trial waiting on it). User errors raised by a shard are not retried (Ray retries actor tasks
only when the actor dies, unless `retry_exceptions` is set)."""


@dataclass(frozen=True)
class Answer:
    """What an evaluator call returns: its value and the backbone loads it caused (1 on an
    actor's first call, and after a restart; else 0)."""

    value: Any
    loads: int


class EvaluatorActor:
    """The body of an evaluator actor: `run(method, *args)` calls its `Evaluator`."""

    def __init__(self, setup: EvaluatorSetup, storage: Storage | None = None) -> None:
        self.setup, self.storage = setup, storage

    @cached_property
    def evaluator(self) -> Evaluator:
        return Evaluator(self.setup)

    def run(self, method: str, *args: Any) -> Answer:
        for arg in args:
            if self.storage and isinstance(arg, Path):
                self.storage.fetch_stored(arg)
        before = backbone_loads()
        value = getattr(self.evaluator, method)(*args)
        return Answer(value, backbone_loads() - before)

    def pid(self) -> int:
        """This actor's process id: a test kills it to check that evaluations survive."""
        return os.getpid()


@dataclass
class EvaluatorPool:
    """Calls on evaluator actors; `loads` counts the backbone loads they caused. Pools over the
    same actors (a sweep's trials) share them: an actor runs the calls it is given one after
    another."""

    setup: EvaluatorSetup
    actors: list
    loads: int = 0

    def take(self, ref: ray.ObjectRef) -> Any:
        """The value of a call; a user error raised on the actor is raised here as itself."""
        try:
            answer = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, SpanliftError):  # bad input seen by an actor
                raise exc.cause from None
            raise
        self.loads += answer.loads
        return answer.value

    def call(self, method: str, *args: Any) -> Any:
        """`Evaluator.method(*args)` on one actor, waited for; the calling process picks which,
        so the trials of a sweep, each in its own process, spread over the actors."""
        actor = self.actors[os.getpid() % len(self.actors)]
        return self.take(actor.run.remote(method, *args))

    def reduce(self, method: str, shards: Sequence[tuple], total: int, desc: str) -> dict[str, Any]:
        """`Evaluator.method(*shard)` for every shard, round-robin over the actors; the metric
        states merged as they arrive."""
        n = len(self.actors)
        running = [self.actors[i % n].run.remote(method, *shard) for i, shard in enumerate(shards)]
        parts = []
        with tqdm(total=total, desc=desc, unit="img") as bar:
            try:
                while running:
                    [done], running = ray.wait(running, num_returns=1)
                    parts.append(self.take(done))
                    bar.update(next(iter(parts[-1].values())).count)  # each state counts it
            except BaseException:  # an error or Ctrl-C: the other shards are not wanted
                for ref in running:
                    ray.cancel(ref)
                raise
        return merge_states(parts)

    def solver_states(
        self,
        spec: SolverSpec,
        checkpoint: Any,
        seeds: Sequence[int],
        metrics: Sequence[str],
        desc: str,
    ) -> dict[str, Any]:
        """`Evaluator.solver_states` over the seeds, in shards."""
        parts = np.array_split(np.asarray(seeds), len(self.actors) * SHARDS_PER_ACTOR)
        shards = [(spec, checkpoint, part.tolist(), tuple(metrics)) for part in parts if len(part)]
        return self.reduce("solver_states", shards, len(seeds), desc)

    def image_states(self, images: Tensor, metrics: Sequence[str], desc: str) -> dict[str, Any]:
        """`Evaluator.image_states` over the images, in shards."""
        parts = images.tensor_split(len(self.actors) * SHARDS_PER_ACTOR)
        shards = [(p, tuple(metrics)) for p in parts if len(p)]
        return self.reduce("image_states", shards, len(images), desc)

    def stop(self) -> None:
        """Kill the actors for good: `no_restart` keeps Ray from bringing them back."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)


def start_evaluators(
    setup: EvaluatorSetup,
    count: int,
    cpus: float,
    gpus: float = 0,
    storage: Storage | None = None,
    **options: Any,
) -> EvaluatorPool:
    """`count` evaluator actors, each holding `cpus` CPUs and `gpus` GPUs (a fraction shares a
    GPU) while it lives and restarted when it dies, fetching what calls name from `storage`;
    `options` go to Ray (a scheduling strategy, say)."""
    remote = ray.remote(EvaluatorActor).options(
        num_cpus=cpus,
        num_gpus=gpus,
        max_restarts=RESTARTS,
        max_task_retries=RESTARTS,
        **options,
    )
    return EvaluatorPool(setup, [remote.remote(setup, storage) for _ in range(count)])


@contextmanager
def running_evaluators(
    setup: EvaluatorSetup,
    count: int,
    cpus: float,
    gpus: float = 0,
    storage: Storage | None = None,
    **options: Any,
) -> Iterator[EvaluatorPool]:
    """Evaluator actors for the duration of a `with` block; killed on the way out, error or not."""
    pool = start_evaluators(setup, count, cpus, gpus, storage, **options)
    try:
        yield pool
    finally:
        pool.stop()


def gpus_per_evaluator(count: int) -> float:
    """1 when Ray has a free GPU for each of `count` actors, else 0 (they run on CPUs)."""
    return 1.0 if ray.available_resources().get("GPU", 0) >= count else 0.0


@contextmanager
def evaluators_on_ray(
    setup: EvaluatorSetup, count: int, gpus: float | None = None
) -> Iterator[EvaluatorPool]:
    """`count` evaluator actors on the running Ray, each holding free CPUs / `count` (one torch
    thread per whole CPU) and `gpus` GPUs (None: `gpus_per_evaluator(count)`)."""
    cpus = ray.available_resources().get("CPU", 1) / count
    gpus = gpus_per_evaluator(count) if gpus is None else gpus
    setup = replace(setup, threads=max(1, math.floor(cpus)))
    with running_evaluators(setup, count, cpus=cpus, gpus=gpus) as pool:
        yield pool
