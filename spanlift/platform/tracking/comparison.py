"""Is a row better than the one ranked below it, or within noise? (`platform/statistics.py`)

    RMSE      both rows' replicates stored their errors per test seed (`errors.parquet`): the
              two-level bootstrap interval of value / next value over the seeds both were
              scored on, replicates paired when both rows were fitted from the same fit seeds;
              it contains 1 (to float rounding, `ROUNDING`) → tied (≈)
    others    the 95 % Welch interval of the difference of the replicates' values contains 0 →
              tied; with fewer than two replicates a side, untested (no noise to compare with:
              FID from one sample range, say)

A row that is not tied is marked `<` (lower than the next, for a metric where lower is better) or
`>`; the last row of a group, and a pair that cannot be tested, get no mark.

What the test seeds resolve, for a row whose runs stored their errors (the leaderboard's footer
gives the median over rows): the 95 % half-width of its RMSE relative to itself, by the delta
method from the n test seeds' squared errors (averaged over its replicates),

    resolves = z_0.975 · sd_s(e_s²) / (2 √n · mean_s e_s²)

so two rows closer than that are told apart only where their errors go together seed by seed.
"""

from dataclasses import replace

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient
from scipy import stats

from spanlift.platform.statistics import LEVEL, paired_ratio_interval, welch_tied
from spanlift.platform.tracking.entry import Entry
from spanlift.platform.tracking.per_sample import read_errors

PER_SEED = ("rmse",)
"""Metrics whose value is sqrt(mean_s e_s²) of the stored per-seed errors."""
ROUNDING = 1e-5
"""A ratio within this of 1 is float rounding (float32 endpoints computed by other operations,
e.g. a diffusers scheduler and spanlift's own loop of the same method), never a ranking."""


def compare_neighbours(
    entries: list[Entry],
    client: MlflowClient,
    metric: str,
    mode: str,
    errors: "ErrorCache | None" = None,
) -> list[Entry]:
    """Each entry with its comparison against the next entry of its group; `errors`: runs'
    per-seed errors already at hand (the others are read from MLflow)."""
    errors = errors or ErrorCache(client)
    compared = []
    entries = [with_resolution(e, metric, errors) for e in entries]
    for this, below in zip(entries, [*entries[1:], None], strict=True):
        if below is None or (below.backbone, below.scale, below.nfe) != (
            this.backbone,
            this.scale,
            this.nfe,
        ):
            compared.append(this)
            continue
        compared.append(compare(this, below, metric, mode, errors))
    return compared


def compare(this: Entry, below: Entry, metric: str, mode: str, errors: "ErrorCache") -> Entry:
    """`this` marked against `below` (module docstring)."""
    better = "<" if mode == "min" else ">"
    if metric in PER_SEED:
        pair = errors.aligned(this.run_ids, below.run_ids)
        if pair is not None:
            low, high = paired_ratio_interval(*pair, same_fit_seeds=fitted_alike(this, below))
            tied = low <= 1 + ROUNDING and high >= 1 - ROUNDING
            return replace(this, vs_next="≈" if tied else better, ratio=(low, high))
    tied = welch_tied(list(this.values), list(below.values))
    if tied is None:
        return this
    return replace(this, vs_next="≈" if tied else better)


def resolution_of(errors: np.ndarray) -> float:
    """z_0.975 · sd(e²) / (2 √n · mean e²) of (replicates × seeds) errors (module docstring)."""
    squared = np.square(errors).mean(axis=0)
    z = stats.norm.ppf(0.5 + LEVEL / 2)
    return float(z * squared.std(ddof=1) / (2 * np.sqrt(len(squared)) * squared.mean()))


def with_resolution(entry: Entry, metric: str, errors: "ErrorCache") -> Entry:
    """The entry with what its test seeds resolve, where its runs stored errors (RMSE only)."""
    if metric not in PER_SEED:
        return entry
    table = errors.aligned(entry.run_ids, ())
    if table is None or table[0].shape[1] < 2 or not np.square(table[0]).mean() > 0:
        return entry
    return replace(entry, test_resolves=resolution_of(table[0]))


def fitted_alike(this: Entry, below: Entry) -> bool:
    """Whether both rows' replicates were fitted from the same fit seeds, in the same order (two
    or more: a single run each is paired by its test seeds alone)."""
    seeds = this.fit_seeds
    return len(seeds) > 1 and all(seeds) and seeds == below.fit_seeds


class ErrorCache:
    """Runs' per-seed errors, each read from MLflow once."""

    def __init__(self, client: MlflowClient) -> None:
        self.client = client
        self.read: dict[str, pd.Series | None] = {}

    def of(self, run_id: str) -> pd.Series | None:
        if run_id not in self.read:
            self.read[run_id] = read_errors(self.client, run_id)
        return self.read[run_id]

    def aligned(
        self, first: tuple[str, ...], second: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(replicates × seeds) errors of two rows on the seeds every run was scored on; None
        when a run stored none, or they share no seed."""
        series = [self.of(run) for run in (*first, *second)]
        if any(s is None for s in series):
            return None
        shared = sorted(set.intersection(*(set(s.index) for s in series)))
        if not shared:
            return None
        table = np.stack([s.loc[shared].to_numpy() for s in series])
        return table[: len(first)], table[len(first) :]
