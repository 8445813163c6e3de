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
"""

from dataclasses import replace

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from spanlift.platform.statistics import paired_ratio_interval, welch_tied
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
