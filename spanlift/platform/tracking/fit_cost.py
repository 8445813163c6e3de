"""What a learned row's fit cost, and whether its cap cut it short: the leaderboard's `fit` column.

Read from what each run records, so runs from before any of it show what they have:

- **iterations**: the metric `fit.iterations_run`; a run recorded before it (before the stopping
  rule, when every fit ran its whole cap) the param `fit.iterations`.
- **seconds**: the metric `fit.total_seconds`, the whole fit's wall time, a two-stage SpanLift's
  base fit included whether its trial fitted the base or took it from the fit cache
  (`fit_clock.py`; on whichever machine made each checkpoint). A run from before that record shows
  `fit_seconds`, the fit's wall time in its own trial (its base's only when fitted there), or for
  a fit taken from the fit cache, which records 0 seconds of its own, `fit.cached_seconds`, the
  seconds of the fit that made its checkpoint. A cached fit's run from before either record
  shows no time.
- **device-hours**: seconds × the devices the fit held / 3 600. A sweep's fit holds `fit.workers`
  Ray Train workers (param), each one GPU share when it used GPUs (`fit.use_gpu`, else
  `env.device`), its CPUs otherwise: GPU-hours or CPU-hours. A run without `fit.workers` fitted in
  one process: one device, so its device-hours are its wall time and the cell shows them only
  where a fit held several devices (the CSV always has them).
- **still improving** (↗): the cap stopped the fit (`fit.stopped_by` = `cap`) and the state it
  kept is its last validation's (`fit_best_iteration` = `fit.iterations_run`; a fit always
  validates at its last iteration, and a state is kept only when it beats every earlier one and
  the start by more than its noise). Its validation was still improving at the end: a longer fit
  may rank the row differently. A run without these records is never marked.

A row of several replicates (fit seeds) shows their mean cost, and ↗ when any replicate was
still improving. A row where nothing was fitted (an analytic solver: no fit records and 0
seconds) shows a dash.
"""

import math
from dataclasses import dataclass

import numpy as np

from spanlift.platform.tracking.fit_clock import TOTAL_SECONDS

STILL_IMPROVING = "↗"
NOTE = (
    "fit: iterations run and wall time of the fit, mean over the row's replicates, with "
    "device-hours (seconds × devices held) where it held several; - nothing fitted; a run that "
    "fitted nothing itself shows the fit that made the checkpoint it took from the fit cache"
)
STILL_IMPROVING_NOTE = (
    f"{STILL_IMPROVING} its cap (fit.iterations) stopped the fit while its validation was still "
    "improving (the kept state is the last validation's, in at least one replicate): a longer "
    "fit may rank it differently"
)


@dataclass(frozen=True)
class RunCost:
    """One run's fit cost as recorded (None: not recorded)."""

    iterations: float | None = None
    seconds: float | None = None
    devices: float = 1.0
    device: str = "CPU"
    still_improving: bool = False

    @property
    def fitted(self) -> bool:
        return self.iterations is not None or bool(self.seconds)


def number(text: object) -> float | None:
    """A recorded value as a number; None when missing or not a number."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def run_cost(params: dict[str, str], metrics: dict[str, float]) -> RunCost:
    """What a run's params and metrics say of its fit (module docstring)."""
    seconds = (
        number(metrics.get(TOTAL_SECONDS))
        or number(metrics.get("fit_seconds"))
        or number(metrics.get("fit.cached_seconds"))
    )
    ran = number(metrics.get("fit.iterations_run"))
    learned = ran is not None or bool(seconds) or "fit_best_iteration" in metrics
    iterations = ran if ran is not None else number(params.get("fit.iterations"))
    use_gpu = params.get("fit.use_gpu", "").lower()
    on_gpu = use_gpu == "true" or (
        use_gpu != "false" and params.get("env.device", "cpu").lower() != "cpu"
    )
    best = number(metrics.get("fit_best_iteration"))
    capped = params.get("fit.stopped_by") == "cap"
    return RunCost(
        iterations if learned else None,
        seconds if seconds else None,
        number(params.get("fit.workers")) or 1.0,
        "GPU" if on_gpu else "CPU",
        capped and ran is not None and best is not None and best == ran,
    )


@dataclass(frozen=True)
class FitCost:
    """A row's fit cost: its replicates' mean (None: no replicate recorded it)."""

    iterations: float | None = None
    seconds: float | None = None
    device_hours: float | None = None
    devices: float = 1.0
    device: str = "CPU"
    still_improving: bool = False


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def row_cost(runs: list[RunCost]) -> FitCost | None:
    """The mean cost of a row's replicates; None when none of them fitted anything."""
    fitted = [r for r in runs if r.fitted]
    if not fitted:
        return None
    hours = [None if r.seconds is None else r.seconds * r.devices / 3600 for r in fitted]
    return FitCost(
        mean([r.iterations for r in fitted]),
        mean([r.seconds for r in fitted]),
        mean(hours),
        float(np.mean([r.devices for r in fitted])),
        fitted[0].device,
        any(r.still_improving for r in fitted),
    )


def thousands(value: float) -> str:
    """`1 050`: the value rounded, its thousands set apart by a thin space."""
    return f"{round(value):,}".replace(",", "\u2009")


def duration(seconds: float) -> str:
    """`3.5 s`, `42 s`, `12 min`, `2.1 h`."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cost_parts(cost: FitCost | None) -> list[str]:
    """`["1 050 it", "3.5 s"]`, `["400 it", "2.1 h", "8.4 GPU-h"]` (several devices); `[]` for
    a row where nothing was fitted. Without the ↗ mark (`cost_cell` adds it)."""
    if cost is None:
        return []
    parts = [] if cost.iterations is None else [f"{thousands(cost.iterations)} it"]
    if cost.seconds is not None:
        parts.append(duration(cost.seconds))
        if cost.devices > 1 and cost.device_hours is not None:
            parts.append(f"{cost.device_hours:.2g} {cost.device}-h")
    return parts or ["?"]


def cost_cell(cost: FitCost | None, dash: str = "-") -> str:
    """`1 050 it · 3.5 s`, `400 it · 2.1 h · 8.4 GPU-h`, `… ↗` (still improving at its cap), or
    `dash` (nothing fitted)."""
    cell = " · ".join(cost_parts(cost)) or dash
    return f"{cell} {STILL_IMPROVING}" if cost and cost.still_improving else cell
