"""Skill scores of SEVIR nowcasts: exact definitions, or Earthformer's convention.

Scores are computed on the VIL scale 0–255. A pixel holds an *event* at threshold τ when its value
is ≥ τ; the thresholds are 16, 74, 133, 160, 181 and 219. For the pooled scores (CSI-4, CSI-16)
the prediction and the target are both max-pooled first, with non-overlapping windows
(kernel = stride = pool); pool 1 means no pooling.

At each pool and threshold the forecast and the observation form a 2×2 contingency table:
H hits (forecast and observed), M misses (observed only), F false alarms (forecast only) and
R correct negatives (neither). The scores are

    CSI  = H / (H + M + F)                                   critical success index
    POD  = H / (H + M)                                       probability of detection
    SUCR = H / (H + F)                                       success ratio (1 − false-alarm ratio)
    BIAS = (H + F) / (H + M)                                 frequency bias
    HSS  = 2(HR − FM) / ((H + M)(M + R) + (H + F)(F + R))    Heidke skill score

Averaging. The paper's table (Earthformer's mode "0") sums the counts over the whole test set —
every sample, pixel and lead time — then computes each score, then takes the mean over the
thresholds: CSI-M = `skill_scores(...).csi.sel(pool=1).mean("threshold")`. Two other modes are
offered through `per_lead=True`, which keeps a `lead_time` dimension in the counts:
mode "1" is the per-lead-time score itself (one value per lead time), and mode "2" is the mean
over lead time of the per-lead scores, `ds.csi.mean(("threshold", "lead_time"))`. Counts add, so
a test set split over processes gives the same numbers: `ContingencyCounts.merge`.

Counting. Values are first truncated to whole VIL levels ⌊v⌋ (uint8). For a whole threshold τ,
v ≥ τ exactly when ⌊v⌋ ≥ τ, and ⌊·⌋ commutes with the maximum, so the events — pooled or not —
are exactly those of the unrounded values; thresholds are therefore whole levels 0–255. Counting
uint8 frames in NumPy (strided maxima for pooling, `count_nonzero` per threshold) and building
the scores with NumPy into one Dataset keeps `skill_scores` over 10× faster than pysteps'
`det_cat_fct` looped over thresholds and pools, at a test batch (48–72 frames of 128²) as on
large inputs (benchmarks/nowcast_scores.py, figures in docs/results.md).

Conventions (`convention=`; the Dataset's attribute `convention` says which one made it):

- "exact" (the default): the formulas above. A ratio whose numerator and denominator are both 0
  (e.g. CSI at a threshold that is neither forecast nor observed anywhere) is NaN, honestly
  undefined; BIAS is +inf when events are forecast but none is observed. Values must lie in
  0–255 (no NaN) and every pool must divide the frame. `summary` averages over thresholds with
  NaN kept (skipna=False), so a threshold without events shows up as NaN instead of silently
  leaving the mean.
- "earthformer": what Earthformer's `metrics/sevir.py` (`SEVIRSkillScore`; PreDiff's copy adds
  pools as `sevir_pool<k>`) reports, so a row can be compared with their tables:
  every denominator gets eps = 1e-4 (CSI = H / (H + M + F + eps), POD = H / (H + M + eps),
  SUCR = H / (H + F + eps); 0/0 becomes 0); "bias" is reported as that module does,
  ((H + F) / (H + M + eps) / ln 2)², which is not the frequency bias; a pixel where the forecast
  or the observation is NaN is no event in either (NaN spreads through max pooling to the whole
  pooled block, as in `F.max_pool2d`); a pool that does not divide the frame drops the last
  rows and columns (the floored output size of `F.max_pool2d`); values outside 0–255 count as
  they compare (below 0: never an event, above 255: an event at every threshold); there is no
  HSS. Thresholds must then be ≥ 1. Values are taken on the 0–255 scale: Earthformer's own
  rescaling of 0–1 data (x / (1/255) in float32) can move a value lying exactly on a threshold
  by one float32 step, so pass VIL levels.
"""

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import xarray as xr

from spanlift.errors import SettingsError

THRESHOLDS = (16, 74, 133, 160, 181, 219)
POOLS = (1, 4, 16)
CONVENTIONS = ("exact", "earthformer")
EARTHFORMER_EPS = 1e-4
COUNT_NAMES = ("hits", "misses", "false_alarms", "correct_negatives")
LEAD_DIMS = ("lead_time", "time")
FRAME_MINUTES = 10  # SEVIR-LR frames are 10 minutes apart: the default lead-time coordinate

ArrayLike = np.ndarray | torch.Tensor | xr.DataArray
_NUMPY_READABLE = (torch.uint8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64)


@dataclass(frozen=True, eq=False)
class ContingencyCounts:
    """Hits, misses, false alarms and correct negatives (int64), each of shape
    (pool, threshold) or (pool, threshold, lead_time), for `count` samples, counted and to be
    scored under `convention` ("exact" or "earthformer"; see the module docstring).

    Plain numpy arrays and tuples, so it pickles cheaply between processes; `merge` adds two
    parts of a test set exactly. `lead_times` is the lead-time coordinate of per-lead counts
    (None otherwise).
    """

    hits: np.ndarray
    misses: np.ndarray
    false_alarms: np.ndarray
    correct_negatives: np.ndarray
    thresholds: tuple[int, ...]
    pools: tuple[int, ...]
    count: int
    lead_times: tuple[Any, ...] | None = None
    convention: str = "exact"

    @property
    def per_lead(self) -> bool:
        return self.hits.ndim == 3

    def merge(self, other: "ContingencyCounts") -> "ContingencyCounts":
        """The counts of both parts together: every table entry and the sample count add."""
        problem = self._mismatch(other)
        if problem:
            raise SettingsError(f"cannot merge contingency counts of {problem}")
        added = {name: getattr(self, name) + getattr(other, name) for name in COUNT_NAMES}
        return replace(self, **added, count=self.count + other.count)

    def _mismatch(self, other: "ContingencyCounts") -> str:
        """What differs between two counts that must not, or '' when they can merge."""
        if self.thresholds != other.thresholds:
            return f"different thresholds: {self.thresholds} and {other.thresholds}"
        if self.pools != other.pools:
            return f"different pools: {self.pools} and {other.pools}"
        if self.hits.shape != other.hits.shape:
            return f"different shapes: {self.hits.shape} and {other.hits.shape}"
        if self.lead_times != other.lead_times:
            return f"different lead times: {self.lead_times} and {other.lead_times}"
        if self.convention != other.convention:
            return f"different conventions: {self.convention} and {other.convention}"
        return ""

    def to_dataset(self) -> xr.Dataset:
        """The four counts and the scores (CSI, HSS, POD, SUCR and BIAS; under "earthformer"
        no HSS) over dims `pool`, `threshold` (and `lead_time`), with attributes `samples` (the
        sample count) and `convention`. Built in one step from NumPy arrays (fast)."""
        dims = ("pool", "threshold", "lead_time")[: self.hits.ndim]
        coords = {"pool": list(self.pools), "threshold": list(self.thresholds)}
        if self.per_lead:
            coords["lead_time"] = list(self.lead_times or _default_lead_minutes(self.hits.shape[2]))
        counts = {name: getattr(self, name) for name in COUNT_NAMES}
        variables = {**counts, **score_arrays(*counts.values(), convention=self.convention)}
        return xr.Dataset(
            {name: (dims, values) for name, values in variables.items()},
            coords=coords,
            attrs={"samples": self.count, "convention": self.convention},
        )


def score_arrays(
    hits: np.ndarray,
    misses: np.ndarray,
    false_alarms: np.ndarray,
    correct_negatives: np.ndarray,
    convention: str = "exact",
) -> dict[str, np.ndarray]:
    """The scores of the counts, in float64, under `convention` (formulas in the module
    docstring): csi, hss (exact only), pod, sucr, bias."""
    h, m, f, r = (
        np.asarray(c, dtype=np.float64) for c in (hits, misses, false_alarms, correct_negatives)
    )
    if _checked_convention(convention) == "earthformer":
        eps = EARTHFORMER_EPS
        return {
            "csi": h / (h + m + f + eps),
            "pod": h / (h + m + eps),
            "sucr": h / (h + f + eps),
            "bias": ((h + f) / (h + m + eps) / np.log(2.0)) ** 2,
        }
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "csi": h / (h + m + f),
            "hss": 2 * (h * r - f * m) / ((h + m) * (m + r) + (h + f) * (f + r)),
            "pod": h / (h + m),
            "sucr": h / (h + f),
            "bias": (h + f) / (h + m),
        }


def with_scores(counts: xr.Dataset) -> xr.Dataset:
    """`counts` (variables hits, misses, false_alarms, correct_negatives; attribute
    `convention`, "exact" when absent) with the scores of that convention added."""
    convention = counts.attrs.get("convention", "exact")
    arrays = score_arrays(*(counts[name].values for name in COUNT_NAMES), convention=convention)
    dims = counts["hits"].dims
    return counts.assign({name: (dims, values) for name, values in arrays.items()})


def contingency_counts(
    pred: ArrayLike,
    target: ArrayLike,
    thresholds: Sequence[int] = THRESHOLDS,
    pools: Sequence[int] = POOLS,
    per_lead: bool = False,
    convention: str = "exact",
) -> ContingencyCounts:
    """Contingency tables of `pred` against `target`, both (..., lead_time, H, W) on the VIL scale
    0–255 (numpy, torch or xarray; any float or integer dtype), at each threshold (whole levels,
    event = value ≥ threshold) and each pool (both max-pooled by pool×pool windows first), summed
    over every leading axis, every pixel and — unless `per_lead` — every lead time. Under
    convention "earthformer", NaN is no event, out-of-range values count as they compare, and a
    pool need not divide the frame (module docstring).

    A DataArray with a `lead_time` (or `time`) dim has it moved third from last and, for per-lead
    counts, its coordinate kept; otherwise lead times are 10, 20, … minutes (SEVIR-LR frames).
    """
    lenient = _checked_convention(convention) == "earthformer"
    thresholds, pools = _checked_thresholds(thresholds, lenient), _checked_pools(pools)
    pred_levels, pred_leads, pred_nan = _whole_levels(pred, "pred", lenient)
    target_levels, target_leads, target_nan = _whole_levels(target, "target", lenient)
    _check_shapes(pred_levels.shape, target_levels.shape, () if lenient else pools)
    pred_levels, target_levels = _samples_first(pred_levels), _samples_first(target_levels)
    pred_pooled, target_pooled = _pyramid(pred_levels, pools), _pyramid(target_levels, pools)
    if pred_nan is not None or target_nan is not None:
        _no_events_where_nan(pred_pooled, target_pooled, pred_nan, target_nan, pred_levels.shape)
    tables = np.stack(
        [_tables(pred_pooled[pool], target_pooled[pool], thresholds) for pool in pools]
    )
    if not per_lead:
        tables = tables.sum(axis=-1)
    return ContingencyCounts(
        *(tables[:, i] for i in range(len(COUNT_NAMES))),
        thresholds=thresholds,
        pools=pools,
        count=pred_levels.shape[0],
        lead_times=(target_leads or pred_leads) if per_lead else None,
        convention=convention,
    )


def skill_scores(
    pred: ArrayLike,
    target: ArrayLike,
    thresholds: Sequence[int] = THRESHOLDS,
    pools: Sequence[int] = POOLS,
    per_lead: bool = False,
    convention: str = "exact",
) -> xr.Dataset:
    """`contingency_counts(...).to_dataset()`: counts and scores over pool, threshold (and
    lead_time), under `convention` ("exact", the default, or "earthformer" to compare with
    Earthformer's and PreDiff's tables). CSI-M is `.csi.sel(pool=1).mean("threshold")`."""
    counts = contingency_counts(pred, target, thresholds, pools, per_lead, convention)
    return counts.to_dataset()


def summary(scores: xr.Dataset) -> dict[str, float]:
    """The paper-table numbers of a `skill_scores` dataset: `csi_m` and `hss` (pool 1), `csi4`
    and `csi16` (pools 4 and 16), each a mean over thresholds, and `csi_<τ>` per threshold at
    pool 1. A per-lead dataset first has its counts summed over lead time and its scores
    recomputed, so the numbers are those of the whole test set (mode "0"), not a mean of
    per-lead scores. Without an `hss` variable (convention "earthformer") there is no `hss`."""
    missing = [pool for pool in POOLS if pool not in scores.pool.values]
    if missing:
        raise SettingsError(
            f"summary needs pools {POOLS}; the dataset has pools {tuple(scores.pool.values)}"
        )
    if "lead_time" in scores.dims:
        scores = with_scores(scores[list(COUNT_NAMES)].sum("lead_time", keep_attrs=True))
    csi_m = scores.csi.mean("threshold", skipna=False)
    table = {
        "csi_m": float(csi_m.sel(pool=1)),
        "csi4": float(csi_m.sel(pool=4)),
        "csi16": float(csi_m.sel(pool=16)),
    }
    if "hss" in scores:
        table["hss"] = float(scores.hss.sel(pool=1).mean("threshold", skipna=False))
    for threshold in scores.threshold.values:
        table[f"csi_{threshold:g}"] = float(scores.csi.sel(pool=1, threshold=threshold))
    return table


def _tables(pred: np.ndarray, target: np.ndarray, thresholds: tuple[int, ...]) -> np.ndarray:
    """(4, threshold, lead_time) int64: H, M, F, R of frames (samples, lead_time, H, W). With
    n_pred, n_obs the forecast and observed events and n_both the events of min(pred, target)
    (an event of both): H = n_both, M = n_obs − H, F = n_pred − H, R = pixels − n_pred − n_obs + H.
    """
    forecast = _events(pred, thresholds)
    observed = _events(target, thresholds)
    hits = _events(np.minimum(pred, target), thresholds)
    pixels = pred.shape[0] * pred.shape[2] * pred.shape[3]
    return np.stack([hits, observed - hits, forecast - hits, pixels - forecast - observed + hits])


def _events(frames: np.ndarray, thresholds: tuple[int, ...]) -> np.ndarray:
    """(threshold, lead_time) int64: how many pixels of each lead time are ≥ each threshold.

    One uint8 comparison and `count_nonzero` per threshold and lead time: on a CPU many times
    faster than one broadcast comparison against all thresholds summed along axes.
    """
    by_lead = np.moveaxis(frames, 1, 0)
    return np.array(
        [[np.count_nonzero(lead >= threshold) for lead in by_lead] for threshold in thresholds],
        dtype=np.int64,
    )


def _pyramid(frames: np.ndarray, pools: tuple[int, ...]) -> dict[int, np.ndarray]:
    """The frames max-pooled by each pool. A pool that a smaller one divides starts from that
    one's output (the maximum of block maxima is the maximum), so pool 16 after 4 costs little."""
    pooled = {1: frames}
    for pool in sorted(pools):
        base = max(done for done in pooled if pool % done == 0)
        pooled[pool] = _max_pooled(pooled[base], pool // base)
    return pooled


def _max_pooled(frames: np.ndarray, pool: int) -> np.ndarray:
    """Frames (..., H, W) max-pooled by non-overlapping pool×pool windows (kernel = stride = pool).

    Window (i, j) holds frames[..., i·pool + a, j·pool + b] for offsets a, b < pool, so its
    maximum is the maximum over the pool column offsets, then over the pool row offsets, of
    strided sub-grids: 2·pool element-wise maxima instead of a reduction over small blocks.
    """
    if pool == 1:
        return frames
    height, width = frames.shape[-2] // pool * pool, frames.shape[-1] // pool * pool
    frames = frames[..., :height, :width]  # F.max_pool2d's floored output; exact needs none
    columns = frames[..., 0::pool].copy()
    for offset in range(1, pool):
        np.maximum(columns, frames[..., offset::pool], out=columns)
    pooled = columns[..., 0::pool, :].copy()
    for offset in range(1, pool):
        np.maximum(pooled, columns[..., offset::pool, :], out=pooled)
    return pooled


def _whole_levels(
    values: ArrayLike, name: str, lenient: bool = False
) -> tuple[np.ndarray, tuple[Any, ...] | None, np.ndarray | None]:
    """`values` as uint8 whole VIL levels ⌊v⌋ (..., lead_time, H, W), the lead-time coordinate
    values of a DataArray that has one, and where the values are NaN (None if nowhere). Values
    must lie in 0–255 unless `lenient`, where NaN becomes level 0 and others are clipped to
    0–255 first (the same events at thresholds 1–255)."""
    lead_times = None
    if isinstance(values, xr.DataArray):
        values, lead_times = _lead_time_third_from_last(values)
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        values = (values if values.dtype in _NUMPY_READABLE else values.float()).numpy()
    values = np.asarray(values)
    if values.dtype == np.uint8:
        return values, lead_times, None
    if lenient:
        nan = np.isnan(values) if values.dtype.kind == "f" else None
        nan = nan if nan is not None and nan.any() else None
        clipped = np.clip(values, 0, 255)
        if nan is not None:
            clipped[nan] = 0
        return clipped.astype(np.uint8), lead_times, nan
    if values.size:
        low, high = values.min(), values.max()
        if not (low >= 0 and high <= 255):
            raise SettingsError(
                f"{name} must be VIL on the 0–255 scale; its values span [{low:g}, {high:g}]"
            )
    return values.astype(np.uint8), lead_times, None


def _no_events_where_nan(
    pred: dict[int, np.ndarray],
    target: dict[int, np.ndarray],
    pred_nan: np.ndarray | None,
    target_nan: np.ndarray | None,
    shape: tuple[int, ...],
) -> None:
    """Level 0 (no event at thresholds ≥ 1) in both pooled forecast and observation wherever a
    pooled block of either holds a NaN, as NaN spreads through `F.max_pool2d`."""
    masks = [mask.reshape(shape) for mask in (pred_nan, target_nan) if mask is not None]
    either = np.logical_or.reduce(masks).view(np.uint8)
    for pool, pooled in _pyramid(either, tuple(pred)).items():
        hidden = pooled.astype(bool)
        pred[pool] = np.where(hidden, 0, pred[pool])
        target[pool] = np.where(hidden, 0, target[pool])


def _samples_first(frames: np.ndarray) -> np.ndarray:
    """Frames (..., lead_time, H, W) as (samples, lead_time, H, W)."""
    return frames.reshape(-1, *frames.shape[-3:])


def _lead_time_third_from_last(array: xr.DataArray) -> tuple[np.ndarray, tuple[Any, ...] | None]:
    """The array's values with its lead-time dim (if any) third from last, and that dim's
    coordinate values (None without a coordinate)."""
    lead_dim = next((dim for dim in LEAD_DIMS if dim in array.dims), None)
    if lead_dim is None:
        return array.values, None
    others = [dim for dim in array.dims if dim != lead_dim]
    array = array.transpose(*others[:-2], lead_dim, *others[-2:])
    coordinate = tuple(array[lead_dim].values) if lead_dim in array.coords else None
    return array.values, coordinate


def _check_shapes(
    pred_shape: Sequence[int], target_shape: Sequence[int], pools: tuple[int, ...]
) -> None:
    pred_shape, target_shape = tuple(pred_shape), tuple(target_shape)
    if pred_shape != target_shape:
        raise SettingsError(
            f"pred and target must have the same shape; got pred {pred_shape} "
            f"and target {target_shape}"
        )
    if len(pred_shape) < 3:
        raise SettingsError(f"frames must be (..., lead_time, H, W); got shape {pred_shape}")
    height, width = pred_shape[-2:]
    for pool in pools:
        if height % pool or width % pool:
            raise SettingsError(f"pool {pool} does not divide the frame size {height}×{width}")


def _checked_thresholds(thresholds: Sequence[int], lenient: bool = False) -> tuple[int, ...]:
    """Thresholds as a tuple of distinct whole VIL levels 0–255 (1–255 when `lenient`, where a
    NaN or negative value must be no event at every threshold), non-empty."""
    thresholds, lowest = tuple(thresholds), 1 if lenient else 0
    whole = all(
        isinstance(threshold, numbers.Real)
        and float(threshold).is_integer()
        and lowest <= threshold <= 255
        for threshold in thresholds
    )
    if not thresholds or not whole or len(set(thresholds)) != len(thresholds):
        raise SettingsError(
            f"thresholds must be distinct whole VIL levels {lowest}–255; got {thresholds}"
        )
    return tuple(int(threshold) for threshold in thresholds)


def _checked_convention(convention: str) -> str:
    if convention not in CONVENTIONS:
        raise SettingsError(f"convention {convention!r} is not one of {', '.join(CONVENTIONS)}")
    return convention


def _checked_pools(pools: Sequence[int]) -> tuple[int, ...]:
    pools = tuple(pools)
    valid = all(isinstance(pool, numbers.Integral) and pool >= 1 for pool in pools)
    if not pools or not valid or len(set(pools)) != len(pools):
        raise SettingsError(f"pools must be distinct positive integers; got {pools}")
    return tuple(int(pool) for pool in pools)


def _default_lead_minutes(lead_times: int) -> list[int]:
    return [FRAME_MINUTES * (step + 1) for step in range(lead_times)]
