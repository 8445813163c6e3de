"""Evaluator actors on Ray: shards scored in parallel, feature moments reduced on the driver.

Each actor loads the backbone and the detector once (`Evaluator`), is pinned to its share of CPU
threads, and takes shards from an `ActorPool` until none are left; the driver merges the metric
states that come back (`states.py`), so every metric is the same for 1 or N actors. An actor
whose process dies is restarted by Ray and its shard retried (`RESTARTS`); a shard's task returns
one result however often it ran, so the pool still merges each shard once.
"""

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import ray
from ray.util import ActorPool
from torch import Tensor
from tqdm import tqdm

from spanlift.errors import SpanliftError
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.states import merge_states
from spanlift.solvers import SolverSpec

SHARDS_PER_ACTOR = 4
RESTARTS = 2
"""Times Ray restarts an evaluator whose process died (OOM killer, lost node, segfault), and
retries the shard it was scoring: a shard is a pure function of (spec, checkpoint, seeds), so a
retry gives the same states, and one death costs a restart instead of the evaluation (and the
sweep trial waiting on it). User errors raised by a shard are not retried (Ray retries actor
tasks only when the actor dies, unless `retry_exceptions` is set)."""


def start_evaluators(
    setup: EvaluatorSetup, count: int, cpus: float, gpus: float = 0, **options: Any
) -> list:
    """`count` evaluator actors, restarted when they die; `options` go to Ray (a scheduling
    strategy, say)."""
    remote = ray.remote(Evaluator).options(
        num_cpus=cpus,
        num_gpus=gpus,
        max_restarts=RESTARTS,
        max_task_retries=RESTARTS,
        **options,
    )
    return [remote.remote(setup) for _ in range(count)]


@contextmanager
def running_evaluators(
    setup: EvaluatorSetup, count: int, cpus: float, gpus: float = 0, **options: Any
) -> Iterator[list]:
    """Evaluator actors for the duration of a `with` block; killed on the way out, error or not,
    for good: `no_restart` keeps Ray from bringing them back."""
    actors = start_evaluators(setup, count, cpus, gpus, **options)
    try:
        yield actors
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)


def reduce_shards(
    actors: list, call: Callable[[Any, Any], Any], shards: Sequence[Any], total: int, desc: str
) -> dict[str, Any]:
    """Run `call(actor, shard)` over all shards on the pool; merge the states as they arrive."""
    parts = []
    with tqdm(total=total, desc=desc, unit="img") as bar:
        try:
            for states in ActorPool(actors).map_unordered(call, list(shards)):
                parts.append(states)
                bar.update(next(iter(states.values())).count)  # every state counts the shard
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, SpanliftError):  # bad input seen by an actor: its message
                raise exc.cause from None
            raise
    return merge_states(parts)


def solver_states(
    actors: list,
    spec: SolverSpec,
    checkpoint: Any,
    seeds: Sequence[int],
    metrics: Sequence[str],
    desc: str,
) -> dict[str, Any]:
    shards = [
        part.tolist()
        for part in np.array_split(np.asarray(seeds), len(actors) * SHARDS_PER_ACTOR)
        if len(part)
    ]
    return reduce_shards(
        actors,
        lambda actor, shard: actor.solver_states.remote(spec, checkpoint, shard, metrics),
        shards,
        len(seeds),
        desc,
    )


def image_moments(actors: list, images: Tensor, desc: str) -> dict[str, Any]:
    shards = [part for part in images.tensor_split(len(actors) * SHARDS_PER_ACTOR) if len(part)]
    return reduce_shards(
        actors, lambda actor, shard: actor.image_moments.remote(shard), shards, len(images), desc
    )
