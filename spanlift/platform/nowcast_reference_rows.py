"""Rows of the nowcasting table that no solver draws: persistence and the cached teacher.

    persistence   the last observed frame repeated for every lead time: x̂_{t+k} = x_t, k = 1 … 6
                  (the baseline every nowcasting paper reports; a forecast must beat it to have
                  skill)
    teacher       the teacher's endpoints of the held-out seeds, read from the teacher cache the
                  RMSE column already uses, decoded once (no second 100-step rollout)

Both are scored in this process on the same held-out windows, with the same functions and the
same measures (what skill and LPIPS are measured against) as the rows the evaluator actors score,
so the leaderboard ranks them together with the solvers. They have no sampling time of their own,
so they report no latency or throughput.
"""

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.nowcast_windows import OUTPUTS
from spanlift.errors import MetricUnavailable, SettingsError
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics import Batch, Done, Traits, made
from spanlift.platform.evaluation.metrics.states import merge_states
from spanlift.platform.evaluation.sample_metrics import SampleReport, finished_report, measures_of
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.solvers import SolverSpec

PERSISTENCE = "persistence"
BATCH = 64
"""Windows scored at once (bounds the memory of the decoded frames)."""

Forecaster = Callable[[slice], Tensor]
"""Forecast frames (n, 6, H, W) in [−1, 1] of the held-out windows in a slice of them."""


@dataclass(frozen=True)
class ReferenceSpec(SolverSpec):
    """How a row drawn by no solver is recorded: like a solver's run (name, NFE 0), its identity
    its name (no registered solver's settings to fill in)."""

    def key(self) -> str:
        return hashlib.sha256(f"reference:{self.name}".encode()).hexdigest()[:12]


PERSISTENCE_SPEC = ReferenceSpec(PERSISTENCE, 0, schedule="none")
"""No model evaluations: the leaderboard lists persistence in its own NFE group (0)."""


@dataclass(frozen=True)
class ReferenceRow:
    label: str
    forecast: Forecaster


def persistence(backbone: Backbone, seeds: Sequence[int]) -> ReferenceRow:
    """The last of each window's 7 past frames, repeated for the 6 lead times."""

    def forecast(part: slice) -> Tensor:
        last = backbone.windows.past(seeds[part])[:, -1:]
        return last.expand(-1, OUTPUTS, -1, -1)

    return ReferenceRow(PERSISTENCE, forecast)


def cached_teacher(backbone: Backbone, test: TeacherSet, label: str) -> ReferenceRow:
    """The teacher's cached endpoints decoded to frames, clipped as the evaluators clip."""

    @torch.no_grad()
    def forecast(part: slice) -> Tensor:
        return backbone.decode(test.endpoints[part].to(backbone.device)).clamp(-1, 1).cpu()

    return ReferenceRow(label, forecast)


@dataclass
class Driver:
    """This process as where a reference row's metrics run (`metrics.Host`): the backbone, the
    CPU; no teacher and no detector, a row being scored against the observations."""

    setup: EvaluatorSetup
    backbone: Backbone
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    detector: Any = None

    def teacher_samples(self, noise: Tensor, cond: Tensor | None) -> Tensor:
        raise SettingsError("a reference row is scored against the observations, not the teacher")


def score_reference_row(
    row: ReferenceRow,
    backbone: Backbone,
    seeds: Sequence[int],
    setup: EvaluatorSetup,
    metrics: tuple[str, ...],
) -> SampleReport:
    """`metrics` (skill counts, LPIPS where AlexNet's weights exist) of the row's forecasts of the
    windows of `seeds` against their observations, batch by batch, as the evaluators compute
    them; no sampling time (nothing is sampled)."""
    traits = Traits(observed=True, identity=backbone.identity())
    measures, unavailable = measures_of(metrics, setup, traits)
    driver, networks = Driver(setup, backbone), {}
    for metric in (m for m in made(metrics, setup.options) if m.name not in unavailable):
        try:
            networks[metric.name] = (metric, metric.load(driver))
        except MetricUnavailable as exc:
            unavailable[metric.name] = str(exc)
    parts = []
    for start in range(0, len(seeds), BATCH):
        part = slice(start, start + BATCH)
        batch = Batch(list(seeds[part]), row.forecast(part), driver)
        parts.append({name: m.state(batch, net) for name, (m, net) in networks.items()})
    merged = merge_states(parts)
    done = Done(len(seeds), 0.0, None, "cpu (driver)", measures=measures)
    finished = [metric.finish(merged[name], None, done) for name, (metric, _) in networks.items()]
    return finished_report(done, merged, finished, unavailable)
