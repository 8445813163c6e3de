"""A fit's clock: the seconds since the whole fit started, a two-stage fit's base fit first.

A SpanLift on a learned base is fitted in two stages: the base, then the operator on the frozen
fitted base. Its checkpoint records both: `base_fit_seconds` (the whole fit of the base, as the
base's own checkpoint records it, whether this command fitted the base or took it from the fit
cache) and `fit_seconds` (the second stage's own). On the whole fit's clock, a moment s of the
second stage is at

    base + s,        and the whole fit took  base + own.

The second stage (and every state it keeps, its starting state included) exists only from
`base` on. This is the one source of a learned row's cost: the `fit.seconds` history the curves
draw (`Fitted.histories`), the state `--at-cost T` ranks (`at_cost.py`), and the whole fit's
seconds the fit column shows (the metric `fit.total_seconds`, `fit_cost.py`).
"""

from dataclasses import dataclass
from typing import Any

TOTAL_SECONDS = "fit.total_seconds"
"""The metric of a fitted run: the whole fit's seconds, a base's fit included (`FitClock.total`)."""


@dataclass(frozen=True)
class FitClock:
    """A fit's seconds: its base's whole fit (0 for a one-stage fit) and its own stage's."""

    base: float = 0.0
    own: float = 0.0

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> "FitClock":
        """The clock a fitted checkpoint's metadata records (`fitting/compare.py`, `fit_record`)."""
        return cls(
            float(metadata.get("base_fit_seconds", 0.0)), float(metadata.get("fit_seconds", 0.0))
        )

    @property
    def total(self) -> float:
        """The whole fit's seconds: base + own."""
        return self.base + self.own

    def since_start(self, own_seconds: float) -> float:
        """A moment of this stage (its own seconds) on the whole fit's clock."""
        return self.base + own_seconds

    def started_by(self, seconds: float) -> bool:
        """Whether this stage had started `seconds` into the whole fit (its base fit ended)."""
        return seconds >= self.base
