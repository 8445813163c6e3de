"""Evaluation on Ray tasks that share the evaluators loaded in their worker processes.

An evaluation splits its seeds (or images) into shards and runs each shard as a Ray task with the
resources of one evaluator (a Train worker's CPUs, its GPU when the sweep has one). A task takes
its process's evaluator for the setup (`evaluator_for`), so the backbone and the detector load
the first time a process scores for that setup and never again: Ray keeps idle worker processes
and hands them the next tasks, so a sweep's trials, its RMSE scoring and its FID shards all reuse
what earlier tasks loaded, while each task holds its CPUs and GPU only while it runs (Tune's
resource accounting stays honest: no idle actor sits on a trial's resources between
evaluations). The driver merges the metric states as they arrive (`states.py`), so every metric
is the same for 1 or N processes. A task whose process dies is rerun by Ray (`RESTARTS`); a shard
is pure, so the rerun returns the same states and the driver counts it once.
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import torch
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones.loaded import backbone_loads
from spanlift.errors import SpanliftError
from spanlift.platform.evaluation.evaluator import EvaluatorSetup, evaluator_for
from spanlift.platform.evaluation.states import merge_states
from spanlift.solvers import SolverSpec

SHARDS_PER_EVALUATOR = 4
RESTARTS = 2
"""Times Ray reruns a shard whose process died (OOM killer, lost node, segfault): a shard is a
pure function of (spec, checkpoint, seeds), so a rerun gives the same states, and one death costs
a rerun instead of the evaluation (and the sweep trial waiting on it). User errors raised by a
shard are not retried (Ray retries tasks on exceptions only when `retry_exceptions` is set)."""
OTHER_GPU_EXIT = 75


@dataclass(frozen=True)
class Answer:
    """What one evaluator call returns: its value, the process it ran in, and the backbone loads
    it caused there (0 when the process had the evaluator already)."""

    value: Any
    pid: int
    loads: int


def on_evaluator(setup: EvaluatorSetup, method: str, *args: Any) -> Answer:
    """`method(*args)` on this process's evaluator for `setup` (a Ray task's body)."""
    leave_if_other_gpu()
    before = backbone_loads()
    value = getattr(evaluator_for(setup), method)(*args)
    return Answer(value, os.getpid(), backbone_loads() - before)


_VISIBLE_AT_CUDA_START: str | None = None


def leave_if_other_gpu() -> None:
    """Exit when CUDA started in this process for other GPUs than Ray gave this task.

    CUDA fixes the visible devices when it first starts, so a reused process cannot follow a
    new `CUDA_VISIBLE_DEVICES`; it exits instead, and Ray reruns the task in a fresh process (a
    process death, retried). On a one-GPU node, and on CPUs, this never happens.
    """
    global _VISIBLE_AT_CUDA_START
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_initialized():
        _VISIBLE_AT_CUDA_START = visible
    elif visible != _VISIBLE_AT_CUDA_START:
        os._exit(OTHER_GPU_EXIT)


# max_calls=0: processes stay for further tasks, GPU ones included (Ray's default there is 1).
_remote_on_evaluator = ray.remote(max_calls=0)(on_evaluator)


@dataclass
class EvaluatorPool:
    """Evaluator calls as Ray tasks: at most `parallel` shards of one evaluation in flight, each
    with `cpus` CPUs and `gpus` GPUs; `options` go to Ray (a scheduling strategy, say).

    `loads` counts the backbone loads the pool's calls caused, `processes` the processes that
    answered them.
    """

    setup: EvaluatorSetup
    parallel: int = 1
    cpus: float = 1.0
    gpus: float = 0
    options: dict[str, Any] = field(default_factory=dict)
    loads: int = 0
    processes: set[int] = field(default_factory=set)

    def submit(self, method: str, *args: Any) -> ray.ObjectRef:
        return _remote_on_evaluator.options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_retries=RESTARTS, **self.options
        ).remote(self.setup, method, *args)

    def take(self, ref: ray.ObjectRef) -> Any:
        """The value of a submitted call; a user error raised there is raised here as itself."""
        try:
            answer = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, SpanliftError):  # bad input seen by an evaluator
                raise exc.cause from None
            raise
        self.loads += answer.loads
        self.processes.add(answer.pid)
        return answer.value

    def call(self, method: str, *args: Any) -> Any:
        """`method(*args)` on an evaluator, waited for."""
        return self.take(self.submit(method, *args))

    def reduce(self, method: str, shards: Sequence[Any], total: int, desc: str) -> dict[str, Any]:
        """`method(shard, *rest)` over all `shards` (tuples of arguments), `parallel` at a time;
        the metric states merged as they arrive."""
        waiting, running, parts = list(shards), [], []
        with tqdm(total=total, desc=desc, unit="img") as bar:
            try:
                while waiting or running:
                    while waiting and len(running) < self.parallel:
                        running.append(self.submit(method, *waiting.pop(0)))
                    [done], running = ray.wait(running, num_returns=1)
                    states = self.take(done)
                    parts.append(states)
                    bar.update(next(iter(states.values())).count)  # each state counts the shard
            except BaseException:  # an error or Ctrl-C: the shards in flight are not wanted
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
        parts = np.array_split(np.asarray(seeds), self.parallel * SHARDS_PER_EVALUATOR)
        shards = [(spec, checkpoint, part.tolist(), tuple(metrics)) for part in parts if len(part)]
        return self.reduce("solver_states", shards, len(seeds), desc)

    def image_moments(self, images: Tensor, desc: str) -> dict[str, Any]:
        """`Evaluator.image_moments` over the images, in shards."""
        parts = images.tensor_split(self.parallel * SHARDS_PER_EVALUATOR)
        return self.reduce("image_moments", [(p,) for p in parts if len(p)], len(images), desc)
