"""A solver's sample metrics on evaluator actors, from one pass over its samples.

Each shard's samples are drawn once and every requested metric (`metrics/`, a `SampleMetric`)
computes its state on them; the driver merges the states and each metric finishes its own:
metrics, params, files. Every pass also reports the sampling time (`metrics/latency.py`).

A metric that cannot be computed here (LPIPS without AlexNet weights, ImageReward without its
files or on a backbone without prompts) is left out and reported unavailable with the reason, in
the report and as an `<metric>.unavailable` param; `check_available` makes it an error instead,
before any work (`spanlift eval`).
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanlift.backbones import Backbone
from spanlift.errors import MetricUnavailable
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics import (
    Done,
    EvaluationMetric,
    Finished,
    SampleMetric,
    Traits,
    chosen,
    made,
)
from spanlift.platform.evaluation.metrics.reference import ReferenceSet
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec


@dataclass(frozen=True)
class SampleReport:
    """A pass's metrics, the params saying what they are measured against, the metrics left out
    (metric → reason), the merged states by metric, and the files and console lines the metrics
    finished with."""

    samples: int
    device: str
    values: dict[str, float] = field(default_factory=dict)
    measures: dict[str, Any] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    states: dict[str, Any] = field(default_factory=dict)
    files: tuple[Path, ...] = ()
    lines: tuple[str, ...] = ()

    def metrics(self) -> dict[str, float]:
        return dict(self.values)

    def params(self) -> dict[str, Any]:
        return {
            "eval.samples": self.samples,
            "eval.device": self.device,
            **self.measures,
            **{f"{name}.unavailable": reason for name, reason in self.unavailable.items()},
        }


def finished_report(
    done: Done, states: dict[str, Any], finished: list[Finished], unavailable: dict[str, str]
) -> SampleReport:
    """The report of a pass: what each metric finished with, together."""
    return SampleReport(
        samples=done.samples,
        device=done.device,
        values={k: v for f in finished for k, v in f.metrics.items()},
        measures={**done.measures, **{k: v for f in finished for k, v in f.params.items()}},
        unavailable=unavailable,
        states=states,
        files=tuple(path for f in finished for path in f.files),
        lines=tuple(line for f in finished for line in f.lines),
    )


def measures_of(
    metrics: Sequence[str], setup: EvaluatorSetup, traits: Traits
) -> tuple[dict[str, Any], dict[str, str]]:
    """(params describing each available metric, {metric: reason} of the unavailable ones)."""
    measures, unavailable = {}, {}
    for metric in made(metrics, setup.options):
        try:
            measures.update(metric.measures(setup, traits))
        except MetricUnavailable as exc:
            unavailable[metric.name] = str(exc)
    return measures, unavailable


def traits_of(backbone: Backbone) -> Traits:
    """The traits of a backbone loaded in this process (the evaluators answer the same)."""
    return Traits(
        prompted=backbone.prompts([0]) is not None,
        observed=backbone.observations([FID_FIRST_SEED]) is not None,
        identity=backbone.identity(),
    )


def check_available(
    metrics: Sequence[str], setup: EvaluatorSetup, reference: ReferenceSet, backbone: Backbone
) -> None:
    """Refuse metrics that were asked for and cannot be computed here, with each reason, before
    any sample is drawn."""
    _, unavailable = measures_of(metrics, setup, traits_of(backbone))
    if unavailable:
        raise MetricUnavailable("; ".join(unavailable.values()))
    for metric in made(metrics, setup.options):
        metric.check(setup, reference, backbone)


def evaluate_samples(
    pool: EvaluatorPool,
    spec: SolverSpec,
    checkpoint: Path | None,
    samples: int,
    metrics: Sequence[str],
    reference: ReferenceSet,
    first_seed: int = FID_FIRST_SEED,
    folder: Path | None = None,
) -> SampleReport:
    """The sample metrics among `metrics` of `samples` samples of the solver, seeds from
    `first_seed`, with the sampling time; their files written to `folder` (None: none)."""
    asked = chosen(metrics, pool.setup.options, SampleMetric)
    measures, unavailable = measures_of([m.name for m in asked], pool.setup, pool.call("traits"))
    wanted = [metric for metric in asked if metric.name not in unavailable]
    prepared = {metric.name: metric.prepare(pool, reference) for metric in wanted}
    seeds = list(range(first_seed, first_seed + samples))
    start = time.perf_counter()
    names = [metric.name for metric in wanted]
    states = pool.solver_states(spec, checkpoint, seeds, names, label(spec))
    wall = time.perf_counter() - start
    done = Done(
        samples,
        wall,
        states["sampling"],
        pool.call("device_name"),
        len(pool.actors),
        folder,
        measures,
    )
    finished = [finish(metric, states, prepared, done) for metric in wanted]
    return finished_report(done, states, finished, unavailable)


def finish(
    metric: EvaluationMetric, states: dict[str, Any], prepared: dict[str, Any], done: Done
) -> Finished:
    return metric.finish(states.get(metric.name), prepared[metric.name], done)


def label(spec: SolverSpec) -> str:
    return f"{spec.label()} nfe={spec.nfe}"
