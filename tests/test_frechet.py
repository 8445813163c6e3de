"""FID from mergeable feature moments, against an independent NumPy/SciPy computation."""

import numpy as np
import pytest
import scipy.linalg

from spanlift.errors import SettingsError
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance, merge_all


def reference_fid(a: np.ndarray, b: np.ndarray) -> float:
    """Heusel et al. (2017), eq. 6, with SciPy's matrix square root."""
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = scipy.linalg.sqrtm(cov_a @ cov_b).real
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a + cov_b - 2 * root))


@pytest.fixture
def features() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(16, 16))
    a = rng.normal(size=(600, 16)) @ mixing
    b = rng.normal(size=(500, 16)) @ (mixing + 0.3 * rng.normal(size=(16, 16))) + 0.5
    return a, b


def test_fid_equals_the_independent_computation(features) -> None:
    a, b = features
    fid = frechet_distance(FeatureMoments.of(a), FeatureMoments.of(b))
    assert fid == pytest.approx(reference_fid(a, b), rel=1e-6)
    assert fid > 1  # the two sets differ


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_fid_from_merged_shards_equals_one_pass(features, shards: int) -> None:
    a, b = features
    whole = frechet_distance(FeatureMoments.of(a), FeatureMoments.of(b))
    parts = [FeatureMoments.of(part) for part in np.array_split(a, shards)]
    merged = merge_all(parts)
    assert merged.count == len(a)
    assert np.allclose(merged.covariance(), np.cov(a, rowvar=False), rtol=1e-10, atol=1e-10)
    assert frechet_distance(merged, FeatureMoments.of(b)) == pytest.approx(whole, rel=1e-9)


def test_fid_of_a_set_against_itself_is_zero(features) -> None:
    a, _ = features
    moments = FeatureMoments.of(a)
    assert abs(frechet_distance(moments, moments)) < 1e-6


def test_fewer_samples_than_dimensions_warns(features) -> None:
    a, b = features
    with pytest.warns(UserWarning, match="fewer than the feature dimension 16"):
        frechet_distance(FeatureMoments.of(a[:10]), FeatureMoments.of(b))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: FeatureMoments.of(np.zeros(5)), r"expected an \[N, D\] array"),
        (lambda: FeatureMoments.empty(3).merge(FeatureMoments.empty(4)), "4-d features"),
        (lambda: merge_all([]), "no feature shards"),
        (
            lambda: frechet_distance(FeatureMoments.of(np.ones((1, 2))), FeatureMoments.empty(2)),
            "has 1 samples",
        ),
    ],
)
def test_bad_feature_input_is_named(call, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        call()
