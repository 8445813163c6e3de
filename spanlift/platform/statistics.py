"""The uncertainty of a ranking: intervals over replicates and paired bootstrap comparisons.

    mean ± t_{0.975, n−1} · s / √n           a row's 95 % interval over its n replicates (fit
                                             seeds), s their standard deviation (Student t)

    ratio interval of two rows A, B scored on the same test seeds (a two-level bootstrap):
        for b = 1 … B:  seeds S_b drawn with replacement from the shared test seeds,
                        replicates R_A,b and R_B,b drawn with replacement from each row's own,
                        v_X,b = mean_{r ∈ R_X,b} sqrt(mean_{s ∈ S_b} e_r(s)²)
                        ratio_b = v_A,b / v_B,b
        the 2.5th and 97.5th percentiles of ratio_b (numpy's linear interpolation)

e_r(s) is run r's error on seed s (`tracking/per_sample.py`). Resampling the fit seeds as well as
the test seeds matters: test seeds alone miss most of a learned solver's noise. Rows fitted from
the same fit seeds (SpanLift's replicate s sits on DyWeight's replicate s) are paired there too:
one draw of replicates serves both (R_B,b = R_A,b). The draws come from numpy's
`default_rng(seed)`, seeds first, then A's replicates, then B's (unless paired), per b, so a
result can be reproduced exactly. Where the ratio's interval contains 1, the two rows are tied:
their difference is within noise.
"""

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

BOOTSTRAP_DRAWS = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A row's value over its replicates: mean, standard deviation, n and the Student t 95 %
    half-width (None for a single replicate)."""

    mean: float
    sd: float
    n: int
    half_width: float | None

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width


def replicate_interval(values: list[float] | np.ndarray) -> Interval:
    """mean ± t_{0.975, n−1} s/√n over the replicates' values (module docstring)."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    mean = float(values.mean())
    if n < 2:
        return Interval(mean, 0.0, n, None)
    sd = float(values.std(ddof=1))
    return Interval(mean, sd, n, t_quantile(n - 1) * sd / math.sqrt(n))


def t_quantile(dof: int) -> float:
    """t_{0.975, dof}: the half-width of a 95 % interval in standard errors (12.71 for two
    replicates, 4.30 for three)."""
    return float(stats.t.ppf(0.5 + LEVEL / 2, dof))


def paired_ratio_interval(
    a: np.ndarray,
    b: np.ndarray,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = 0,
    same_fit_seeds: bool = False,
) -> tuple[float, float]:
    """The 95 % bootstrap interval of v_A / v_B (module docstring) from the errors of each row's
    replicates on the same seeds: `a` is (replicates of A, seeds), `b` (replicates of B, seeds),
    columns in the same seed order; with `same_fit_seeds`, row r of both was fitted from the same
    fit seed, and their replicates are drawn together."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"rows scored on different seeds: {a.shape[1]} and {b.shape[1]}")
    if same_fit_seeds and len(a) != len(b):
        raise ValueError(f"paired rows have {len(a)} and {len(b)} replicates")
    rng = np.random.default_rng(seed)
    seeds = a.shape[1]
    ratios = np.empty(draws)
    for k in range(draws):
        picked = rng.integers(0, seeds, seeds)
        rows_a = rng.integers(0, len(a), len(a))
        rows_b = rows_a if same_fit_seeds else rng.integers(0, len(b), len(b))
        value_a = np.sqrt(np.square(a[rows_a][:, picked]).mean(axis=1)).mean()
        value_b = np.sqrt(np.square(b[rows_b][:, picked]).mean(axis=1)).mean()
        ratios[k] = value_a / value_b
    low, high = np.percentile(ratios, [50 * (1 - LEVEL), 50 * (1 + LEVEL)])
    return float(low), float(high)


def welch_tied(a: list[float], b: list[float]) -> bool | None:
    """Whether two rows of a metric without per-seed values (FID) are within noise: the 95 %
    Welch interval of their mean difference contains 0; None with fewer than two replicates a
    side (no noise to compare with)."""
    if len(a) < 2 or len(b) < 2:
        return None
    with warnings.catch_warnings():  # equal replicates (a fit seed that changes nothing): spread 0
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        result = stats.ttest_ind(a, b, equal_var=False)
        low, high = result.confidence_interval(LEVEL)
    return bool(low <= 0 <= high)
