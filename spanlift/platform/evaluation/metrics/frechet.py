"""Fréchet distance between feature distributions, from moments that merge across shards.

A shard of N features f_n ∈ R^D is summarised by (N, Σ f_n, Σ f_n f_nᵀ). Two summaries add, so
evaluator actors score their shards independently and the driver reduces them; the result does
not depend on how the samples were split. From the merged sums,

    μ = S₁ / N,    Σ = (S₂ − N μ μᵀ) / (N − 1),

and FID = ‖μ_a − μ_b‖² + tr(Σ_a + Σ_b − 2 (Σ_a Σ_b)^{1/2}) is computed by torch-fidelity's own
`fid_statistics_to_metric`, so numbers match torch-fidelity's FID on the same features.

This Σ is NVlabs EDM's (`fid.py`, `calculate_inception_stats`: Σ f fᵀ − N μμᵀ, over N − 1), so
their published μ and Σ enter through `FeatureMoments.from_statistics` and the distance equals
their `calculate_fid_from_inception_stats` on the same statistics.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from spanlift.errors import SettingsError


@dataclass(frozen=True)
class FeatureMoments:
    """Count, sum and sum of outer products of a set of feature vectors (float64)."""

    count: int
    total: np.ndarray  # [D]
    outer: np.ndarray  # [D, D]

    @classmethod
    def of(cls, features: np.ndarray) -> FeatureMoments:
        """Moments of an [N, D] feature array."""
        features = np.asarray(features, dtype=np.float64)
        if features.ndim != 2:
            raise SettingsError(f"features: expected an [N, D] array, got shape {features.shape}")
        return cls(len(features), features.sum(axis=0), features.T @ features)

    @classmethod
    def from_statistics(
        cls, mean: np.ndarray, covariance: np.ndarray, count: int
    ) -> FeatureMoments:
        """The moments of `count` features whose mean is `mean` and whose unbiased covariance is
        `covariance`, inverting `mean()` and `covariance()`:

            S₁ = N μ,    S₂ = (N − 1) Σ + N μ μᵀ.

        Any N ≥ 2 gives back the same μ and Σ (up to float64 rounding), hence the same FID.
        """
        mean = np.asarray(mean, dtype=np.float64)
        covariance = np.asarray(covariance, dtype=np.float64)
        outer = (count - 1) * covariance + count * np.outer(mean, mean)
        return cls(count, count * mean, outer)

    @classmethod
    def empty(cls, dim: int) -> FeatureMoments:
        return cls(0, np.zeros(dim), np.zeros((dim, dim)))

    @property
    def dim(self) -> int:
        return len(self.total)

    def merge(self, other: FeatureMoments) -> FeatureMoments:
        if other.dim != self.dim:
            raise SettingsError(f"cannot merge {other.dim}-d features into {self.dim}-d moments")
        return FeatureMoments(
            self.count + other.count, self.total + other.total, self.outer + other.outer
        )

    def mean(self) -> np.ndarray:
        return self.total / self.count

    def covariance(self) -> np.ndarray:
        """Unbiased sample covariance (as `np.cov`)."""
        mu = self.mean()
        return (self.outer - self.count * np.outer(mu, mu)) / (self.count - 1)


def merge_all(parts: list[FeatureMoments]) -> FeatureMoments:
    """Reduce shard moments to the moments of their union."""
    if not parts:
        raise SettingsError("no feature shards to merge")
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return merged


def frechet_distance(a: FeatureMoments, b: FeatureMoments, label: str = "FID") -> float:
    """FID between the Gaussians fitted to two feature sets (`label`: the metric errors name).

    Fewer samples than the feature dimension make a covariance rank-deficient: the distance is
    still computed, with a warning, because it is then biased and not comparable with papers.
    """
    if a.dim != b.dim:
        raise SettingsError(f"{label}: cannot compare {a.dim}-d features with {b.dim}-d features")
    for name, moments in (("first", a), ("second", b)):
        if moments.count < 2:
            raise SettingsError(
                f"{label}: the {name} set has {moments.count} samples; at least 2 are needed"
            )
        if moments.count < moments.dim:
            warnings.warn(
                f"{label}: the {name} set has {moments.count} samples, fewer than the feature "
                f"dimension {moments.dim}; its covariance is singular and the {label} is biased",
                stacklevel=2,
            )
    from torch_fidelity.metric_fid import KEY_METRIC_FID, fid_statistics_to_metric  # on demand

    stats = [{"mu": m.mean(), "sigma": m.covariance()} for m in (a, b)]
    return fid_statistics_to_metric(stats[0], stats[1], verbose=False)[KEY_METRIC_FID]
