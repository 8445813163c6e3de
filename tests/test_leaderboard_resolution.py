"""The leaderboard's footer says what its test seeds resolve: the median row's 95 % half-width of
its RMSE over the test seeds, checked against SciPy's bootstrap of the RMSE."""

import math

import numpy as np
import pytest
from scipy import stats

from spanlift.cli import main
from spanlift.platform.tracking.comparison import resolution_of

from .mlflow_store import Store
from .test_rankings import TEST_SEEDS, errors_of, log_replicate


def bootstrap_half_width(errors: np.ndarray) -> float:
    """Half the 95 % percentile-bootstrap interval of the RMSE, relative to the RMSE."""
    rmse = math.sqrt(np.mean(errors**2))
    interval = stats.bootstrap(
        (errors,),
        lambda e, axis: np.sqrt(np.mean(e**2, axis=axis)),
        n_resamples=4000,
        method="percentile",
        random_state=np.random.default_rng(0),
    ).confidence_interval
    return (interval.high - interval.low) / 2 / rmse


def test_the_resolution_agrees_with_a_bootstrap_of_the_rmse():
    errors = np.random.default_rng(1).gamma(2.0, 1.0, 4096)
    assert resolution_of(errors[None]) == pytest.approx(bootstrap_half_width(errors), rel=0.05)


def test_the_footer_gives_the_median_rows_resolution(store: Store, tmp_path, capsys):
    for name, scale in (("heun", 0.3), ("euler", 0.5), ("ipndm", 0.2)):
        log_replicate(store, tmp_path, name, name, 0, errors_of(scale, 0), 0.1)
    assert main(store.command()) == 0
    out = capsys.readouterr().out
    expected = np.median([resolution_of(errors_of(s, 0)[None]) for s in (0.3, 0.5, 0.2)])
    assert f"test seeds resolve differences of about {expected:.1%}" in out
    assert len(TEST_SEEDS) == 64 and expected > 0.05  # 64 seeds: several percent
