"""Evaluator actors for one command: the CPUs Ray has free shared among them, and a GPU each when
the cluster has one for every actor.

A sweep starts its actors once in its driver and its trials share them; `spanlift eval` and
`spanlift nowcast eval` start them here, for the duration of a `with` block.
"""

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import ray

from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.pool import EvaluatorPool, running_evaluators


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
