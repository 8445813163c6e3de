"""Mergeable metric states: what an evaluator returns for a shard, reduced after all shards.

Every state has `count` and `merge(other)`; merging is exact (sums), so a metric computed from the
merged state does not depend on how the samples were split over actors. FID's state is
`FeatureMoments` (frechet.py); averages (LPIPS, sampling seconds per image) are `MeanState`.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MeanState:
    """A mergeable average: sum and count."""

    total: float = 0.0
    count: int = 0

    def merge(self, other: "MeanState") -> "MeanState":
        return MeanState(self.total + other.total, self.count + other.count)

    @property
    def mean(self) -> float:
        return self.total / self.count


def merge_states(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reduce shard states, metric by metric: {name: state} dicts → one {name: merged state}."""
    merged: dict[str, Any] = {}
    for part in parts:
        for name, state in part.items():
            merged[name] = merged[name].merge(state) if name in merged else state
    return merged
