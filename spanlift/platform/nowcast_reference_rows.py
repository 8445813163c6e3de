"""Rows of the nowcasting table that no solver draws: persistence and the cached teacher.

    persistence   the last observed frame repeated for every lead time: x̂_{t+k} = x_t, k = 1 … 6
                  (the baseline every nowcasting paper reports; a forecast must beat it to have
                  skill)
    teacher       the teacher's endpoints of the held-out seeds, read from the teacher cache the
                  RMSE column already uses, decoded once (no second 100-step rollout)

Both are scored in this process on the same held-out windows, with the same functions and the
same measures (what skill and LPIPS are measured against) as the rows the evaluator actors score,
so the leaderboard ranks them together with the solvers. They have no sampling time of their own,
so their latency and throughput are NaN (and not logged).
"""

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.nowcast_windows import OUTPUTS, sample_to_vil
from spanlift.errors import MetricUnavailable
from spanlift.nowcasting.scores import contingency_counts
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.lpips_metric import alexnet_weights, load_lpips, lpips_state
from spanlift.platform.evaluation.sample_metrics import SampleReport, Traits, measures_of
from spanlift.platform.evaluation.states import MeanState, merge_states
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


def score_reference_row(
    row: ReferenceRow,
    backbone: Backbone,
    seeds: Sequence[int],
    setup: EvaluatorSetup,
    metrics: tuple[str, ...],
) -> SampleReport:
    """Skill counts (and LPIPS where AlexNet's weights exist) of the row's forecasts of the
    windows of `seeds` against their observations, batch by batch."""
    traits = Traits(observed=True, identity=backbone.identity())
    measures, unavailable = measures_of(metrics, setup, traits)
    lpips_model = None
    if "lpips" in metrics and "lpips" not in unavailable:
        try:
            lpips_model = load_lpips(alexnet_weights(setup.lpips_weights))
        except MetricUnavailable as exc:
            unavailable["lpips"] = str(exc)
    parts = []
    for start in range(0, len(seeds), BATCH):
        part = slice(start, start + BATCH)
        forecast, observed = row.forecast(part), backbone.observations(seeds[part])
        counts = contingency_counts(
            sample_to_vil(forecast),
            sample_to_vil(observed),
            per_lead=True,
            convention=setup.skill_convention,
        )
        state: dict[str, Any] = {"skill": counts}
        if lpips_model is not None:
            state["lpips"] = frame_lpips(lpips_model, forecast, observed)
        parts.append(state)
    merged = merge_states(parts)
    return SampleReport(
        samples=len(seeds),
        device="cpu (driver)",
        latency_ms_per_image=math.nan,
        throughput_images_per_s=math.nan,
        means={"lpips": merged["lpips"].mean} if "lpips" in merged else {},
        measures=measures,
        unavailable=unavailable,
        skill=merged["skill"],
    )


@torch.no_grad()
def frame_lpips(model: torch.nn.Module, forecast: Tensor, observed: Tensor) -> MeanState:
    """LPIPS of each forecast frame against the observed one, frames as grey images."""
    per_frame = (*forecast.shape[:2], 1, *forecast.shape[2:])
    return lpips_state(
        model, forecast.reshape(per_frame).flatten(0, 1), observed.reshape(per_frame).flatten(0, 1)
    )
