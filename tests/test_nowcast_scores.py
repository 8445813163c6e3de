"""SEVIR skill scores: agreement with pysteps and with an independent NumPy count, exact merging
of shards, the formulas and 0/0, the summary, per-lead output, bad input, and the two plots."""

import functools
import importlib.util
import itertools
import pickle

import matplotlib.image
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import xarray as xr
from pysteps.verification.detcatscores import det_cat_fct

from spanlift.errors import SettingsError
from spanlift.nowcasting.plots import plot_frame_strip, plot_lead_time_scores
from spanlift.nowcasting.scores import (
    COUNT_NAMES,
    THRESHOLDS,
    contingency_counts,
    skill_scores,
    summary,
)


def blocky_storms(rng: np.random.Generator, shape: tuple[int, ...], whole: bool) -> np.ndarray:
    """VIL on 0–255: a coarse random field repeated over 8×8 blocks plus pixel noise; whole
    levels (integer-valued floats) when `whole`."""
    *lead, height, width = shape
    coarse = rng.uniform(-80, 320, (*lead, height // 8, width // 8))
    field = coarse.repeat(8, axis=-2).repeat(8, axis=-1) + rng.normal(0, 25, shape)
    field = np.clip(field, 0, 255)
    return np.floor(field) if whole else field


def forecast_and_truth(seed: int, shape: tuple[int, ...], whole: bool = True):
    """A target and a skilful but imperfect prediction of it."""
    rng = np.random.default_rng(seed)
    target = blocky_storms(rng, shape, whole)
    pred = np.clip(target + rng.normal(0, 30, shape), 0, 255)
    return (np.floor(pred) if whole else pred), target


def frames_with_table(hits: int, misses: int, false_alarms: int, negatives: int):
    """A (1, 1, 1, n) pred/target pair whose table at threshold 74 is the given one."""
    pairs = [(200, 200)] * hits + [(0, 200)] * misses + [(200, 0)] * false_alarms
    pairs += [(0, 0)] * negatives
    pred, target = np.array(pairs, dtype=np.float32).T
    return pred.reshape(1, 1, 1, -1), target.reshape(1, 1, 1, -1)


def test_scores_equal_pysteps_at_every_threshold():
    pred, target = forecast_and_truth(0, (4, 3, 64, 64))
    scores = skill_scores(pred, target, pools=(1,)).sel(pool=1)
    for threshold in THRESHOLDS:
        # pysteps counts value > thr; on whole levels, > thr − 0.5 is ≥ thr
        expected = det_cat_fct(pred, target, threshold - 0.5, ["CSI", "POD", "HSS", "BIAS", "FAR"])
        ours = scores.sel(threshold=threshold)
        for name in ("CSI", "POD", "HSS", "BIAS"):
            assert float(ours[name.lower()]) == pytest.approx(expected[name], rel=1e-12)
        assert float(ours.sucr) == pytest.approx(1 - expected["FAR"], rel=1e-12)


@pytest.mark.parametrize("pool", [4, 16])
def test_pooled_counts_equal_an_independent_numpy_count(pool):
    pred, target = forecast_and_truth(1, (3, 2, 64, 96), whole=False)

    def block_max(frames):
        *lead, height, width = frames.shape
        return frames.reshape(*lead, height // pool, pool, width // pool, pool).max(axis=(-3, -1))

    counts = contingency_counts(pred, target, pools=(1, pool))
    pooled_pred, pooled_target = block_max(pred), block_max(target)
    for j, threshold in enumerate(THRESHOLDS):
        forecast, observed = pooled_pred >= threshold, pooled_target >= threshold
        assert counts.hits[1, j] == np.count_nonzero(forecast & observed)
        assert counts.misses[1, j] == np.count_nonzero(~forecast & observed)
        assert counts.false_alarms[1, j] == np.count_nonzero(forecast & ~observed)
        assert counts.correct_negatives[1, j] == np.count_nonzero(~forecast & ~observed)


@pytest.mark.parametrize("per_lead", [False, True])
def test_merged_uneven_shards_equal_one_pass_exactly(per_lead):
    pred, target = forecast_and_truth(2, (8, 3, 32, 32), whole=False)
    whole = contingency_counts(pred, target, per_lead=per_lead)
    edges = [0, 1, 6, 8]  # shards of 1, 5 and 2 samples
    shards = [
        pickle.loads(pickle.dumps(contingency_counts(pred[a:b], target[a:b], per_lead=per_lead)))
        for a, b in itertools.pairwise(edges)
    ]
    merged = functools.reduce(lambda left, right: left.merge(right), shards)
    for name in COUNT_NAMES:
        assert getattr(merged, name).dtype == np.int64
        np.testing.assert_array_equal(getattr(merged, name), getattr(whole, name))
    assert merged.count == whole.count == 8
    xr.testing.assert_identical(merged.to_dataset(), whole.to_dataset())


def test_scores_of_a_hand_computed_table():
    pred, target = frames_with_table(hits=3, misses=2, false_alarms=4, negatives=11)
    scores = skill_scores(pred, target, thresholds=(74,), pools=(1,)).sel(pool=1, threshold=74)
    assert [int(scores[name]) for name in COUNT_NAMES] == [3, 2, 4, 11]
    assert float(scores.hss) == pytest.approx(2 * (3 * 11 - 4 * 2) / (5 * 13 + 7 * 15))
    assert float(scores.csi) == pytest.approx(3 / 9)
    assert float(scores.pod) == pytest.approx(3 / 5)
    assert float(scores.sucr) == pytest.approx(3 / 7)
    assert float(scores.bias) == pytest.approx(7 / 5)


def test_zero_over_zero_is_nan_and_forecast_without_observation_is_infinite_bias():
    pred, target = frames_with_table(hits=0, misses=0, false_alarms=0, negatives=8)
    empty = skill_scores(pred, target, thresholds=(74,), pools=(1,)).sel(pool=1, threshold=74)
    for name in ("csi", "hss", "pod", "sucr", "bias"):
        assert np.isnan(float(empty[name])), name
    pred, target = frames_with_table(hits=0, misses=0, false_alarms=2, negatives=6)
    false_only = skill_scores(pred, target, thresholds=(74,), pools=(1,)).sel(pool=1, threshold=74)
    assert float(false_only.csi) == 0 and float(false_only.sucr) == 0
    assert np.isnan(float(false_only.pod)) and np.isinf(float(false_only.bias))


def test_summary_is_the_paper_table():
    pred, target = forecast_and_truth(3, (2, 6, 64, 64))
    scores = skill_scores(pred, target)
    table = summary(scores)
    assert set(table) == {"csi_m", "csi4", "csi16", "hss"} | {f"csi_{t}" for t in THRESHOLDS}
    assert table["csi_m"] == pytest.approx(np.mean([table[f"csi_{t}"] for t in THRESHOLDS]))
    assert table["csi_m"] == pytest.approx(float(scores.csi.sel(pool=1).mean("threshold")))
    assert table["csi16"] == pytest.approx(float(scores.csi.sel(pool=16).mean("threshold")))
    assert table["hss"] == pytest.approx(float(scores.hss.sel(pool=1).mean("threshold")))
    assert table["csi4"] != table["csi_m"]
    # a per-lead dataset gives the numbers of counts summed over lead, not a mean of per-lead CSI
    assert summary(skill_scores(pred, target, per_lead=True)) == pytest.approx(table)


def test_summary_keeps_a_threshold_without_events_as_nan():
    pred, target = forecast_and_truth(4, (1, 2, 32, 32))
    table = summary(skill_scores(np.minimum(pred, 200), np.minimum(target, 200)))
    assert np.isnan(table["csi_219"]) and np.isnan(table["csi_m"])
    assert not np.isnan(table["csi_74"])


def test_per_lead_dims_coords_and_totals():
    pred, target = forecast_and_truth(5, (3, 6, 32, 32))
    per_lead = skill_scores(pred, target, per_lead=True)
    assert per_lead.csi.dims == ("pool", "threshold", "lead_time")
    assert list(per_lead.lead_time.values) == [10, 20, 30, 40, 50, 60]
    totals = skill_scores(pred, target)
    for name in COUNT_NAMES:
        np.testing.assert_array_equal(per_lead[name].sum("lead_time"), totals[name])


def test_data_array_lead_coordinate_is_kept_wherever_the_dim_is():
    pred, target = forecast_and_truth(6, (2, 4, 32, 32))
    minutes = np.array([5, 10, 15, 20]) * np.timedelta64(1, "m")
    dims, coords = ("sample", "time", "y", "x"), {"time": minutes}
    pred_array = xr.DataArray(pred, dims=dims, coords=coords).transpose("time", "sample", "y", "x")
    scores = skill_scores(pred_array, xr.DataArray(target, dims=dims, coords=coords), per_lead=True)
    np.testing.assert_array_equal(scores.lead_time.values, minutes)
    plain = skill_scores(pred, target, per_lead=True)
    np.testing.assert_array_equal(scores.hits.values, plain.hits.values)


def test_torch_uint8_and_float_inputs_give_the_same_counts():
    pred, target = forecast_and_truth(7, (2, 3, 32, 32))
    reference = skill_scores(pred, target)
    as_uint8 = skill_scores(pred.astype(np.uint8), target.astype(np.uint8))
    as_torch = skill_scores(torch.from_numpy(pred).float(), torch.from_numpy(target))
    xr.testing.assert_identical(as_uint8, reference)
    xr.testing.assert_identical(as_torch, reference)


@pytest.mark.parametrize(
    ("pred_shape", "target_shape", "pools", "message"),
    [
        ((2, 3, 32, 32), (2, 3, 32, 16), (1,), r"pred \(2, 3, 32, 32\).*target \(2, 3, 32, 16\)"),
        ((2, 3, 32, 40), (2, 3, 32, 40), (1, 16), "pool 16 does not divide"),
        ((32, 32), (32, 32), (1,), "lead_time, H, W"),
    ],
)
def test_bad_shapes_raise_settings_error(pred_shape, target_shape, pools, message):
    with pytest.raises(SettingsError, match=message):
        contingency_counts(np.zeros(pred_shape), np.zeros(target_shape), pools=pools)


@pytest.mark.parametrize(
    ("pred", "thresholds", "message"),
    [
        (np.full((1, 2, 4, 4), -1.0), THRESHOLDS, "0–255 scale"),
        (np.full((1, 2, 4, 4), np.nan), THRESHOLDS, "0–255 scale"),
        (np.zeros((1, 2, 4, 4)), (16, 74.5), "whole VIL levels"),
        (np.zeros((1, 2, 4, 4)), (16, 16), "distinct"),
    ],
)
def test_bad_values_raise_settings_error(pred, thresholds, message):
    with pytest.raises(SettingsError, match=message):
        contingency_counts(pred, np.zeros((1, 2, 4, 4)), thresholds=thresholds, pools=(1, 4))


def test_merging_incompatible_counts_raises():
    pred, target = forecast_and_truth(8, (1, 2, 32, 32))
    counts = contingency_counts(pred, target)
    with pytest.raises(SettingsError, match="different thresholds"):
        counts.merge(contingency_counts(pred, target, thresholds=(16, 74)))
    with pytest.raises(SettingsError, match="different pools"):
        counts.merge(contingency_counts(pred, target, pools=(1, 4)))
    with pytest.raises(SettingsError, match="different shapes"):
        counts.merge(contingency_counts(pred, target, per_lead=True))


def assert_png(path, written) -> None:
    assert written == path and path.stat().st_size > 0
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0


def test_lead_time_plot_writes_a_png(tmp_path):
    pred, target = forecast_and_truth(9, (2, 6, 32, 32))
    per_lead = {
        "good": skill_scores(pred, target, per_lead=True),
        "poor": skill_scores(np.roll(pred, 8, axis=-1), target, per_lead=True),
    }
    path = tmp_path / "figures" / "lead.png"
    assert_png(path, plot_lead_time_scores(per_lead, path))


def test_frame_strip_writes_a_png(tmp_path):
    rng = np.random.default_rng(10)
    past, future = blocky_storms(rng, (7, 32, 32), True), blocky_storms(rng, (6, 32, 32), True)
    predicted = {"solver a": future[::-1], "solver b": torch.from_numpy(future)}
    path = tmp_path / "figures" / "strip.png"
    assert_png(path, plot_frame_strip(past, future, predicted, path))


# --- Earthformer's convention --------------------------------------------------------------------


def earthformer_restated(pred: np.ndarray, target: np.ndarray, pool: int) -> dict[str, np.ndarray]:
    """(threshold,) scores as Earthformer's `SEVIRSkillScore` (mode "0", PreDiff's `sevir_pool`
    preprocessing) computes them, restated in torch from that module: F.max_pool2d of both, then
    t = target ≥ τ and p = pred ≥ τ as floats, zeroed where either is NaN, counts summed as
    float32 states, scores with eps = 1e-4 and "bias" = ((H + F) / (H + M + eps) / ln 2)²."""
    eps = 1e-4
    p, t = torch.from_numpy(pred).float(), torch.from_numpy(target).float()
    if pool > 1:
        p, t = (F.max_pool2d(x.flatten(0, 1)[:, None], pool, pool) for x in (p, t))
    hits, misses, fas = (torch.zeros(len(THRESHOLDS)) for _ in range(3))
    for i, threshold in enumerate(THRESHOLDS):
        t_event, p_event = (t >= threshold).float(), (p >= threshold).float()
        nan = torch.isnan(t) | torch.isnan(p)
        t_event[nan], p_event[nan] = 0, 0
        hits[i] += torch.sum(t_event * p_event).int()
        misses[i] += torch.sum(t_event * (1 - p_event)).int()
        fas[i] += torch.sum((1 - t_event) * p_event).int()
    bias = (hits + fas) / (hits + misses + eps)
    return {
        "csi": (hits / (hits + misses + fas + eps)).numpy(),
        "pod": (hits / (hits + misses + eps)).numpy(),
        "sucr": (hits / (hits + fas + eps)).numpy(),
        "bias": torch.pow(bias / torch.log(torch.tensor(2.0)), 2.0).numpy(),
    }


def earthformer_package(pred: np.ndarray, target: np.ndarray) -> dict[str, np.ndarray] | None:
    """The installed `earthformer` package's own scores (pool 1), or None where it does not
    import (it needs torchmetrics and omegaconf, which spanlift does not)."""
    needs = ("earthformer", "torchmetrics", "omegaconf")
    if any(importlib.util.find_spec(name) is None for name in needs):
        return None
    from earthformer.metrics.sevir import SEVIRSkillScore

    metric = SEVIRSkillScore(layout="NTHW", mode="0", preprocess_type="sevir")
    # its preprocessing multiplies 0–1 data by 255: hand it levels / 255 in float64
    metric.update(torch.from_numpy(pred / 255.0), torch.from_numpy(target / 255.0))
    result = metric.compute()
    return {n: np.array([result[t][n] for t in THRESHOLDS]) for n in ("csi", "pod", "sucr", "bias")}


def nan_storms(seed: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Float VIL with a few NaN pixels in each and values a little outside 0–255."""
    pred, target = forecast_and_truth(seed, shape, whole=False)
    rng = np.random.default_rng(seed + 100)
    for field in (pred, target):
        field[rng.random(shape) < 0.002] = np.nan
        field[rng.random(shape) < 0.01] += rng.choice([-20.0, 20.0])
    return pred.astype(np.float32), target.astype(np.float32)


@pytest.mark.parametrize("size", [64, 72])  # 72: pool 16 floors 4.5 to 4 blocks
def test_earthformer_convention_reproduces_its_skill_score_module(size):
    pred, target = nan_storms(5, (3, 6, size, size))
    ours = skill_scores(pred, target, convention="earthformer")
    assert ours.attrs["convention"] == "earthformer" and "hss" not in ours
    for pool in (1, 4, 16):
        reference = earthformer_restated(pred, target, pool)
        for name, values in reference.items():
            np.testing.assert_allclose(ours[name].sel(pool=pool), values, rtol=1e-6, atol=1e-7)
    package = earthformer_package(pred, target)
    if package is not None:
        for name, values in package.items():
            np.testing.assert_allclose(ours[name].sel(pool=1), values, rtol=1e-6)


def test_earthformer_convention_differs_from_the_exact_one_where_it_should():
    pred, target = frames_with_table(hits=3, misses=1, false_alarms=2, negatives=4)
    exact = skill_scores(pred, target, thresholds=(74,), pools=(1,)).sel(pool=1, threshold=74)
    theirs = skill_scores(pred, target, thresholds=(74,), pools=(1,), convention="earthformer")
    theirs = theirs.sel(pool=1, threshold=74)
    assert float(exact.csi) == 0.5 and float(theirs.csi) == pytest.approx(3 / (6 + 1e-4), 1e-12)
    assert float(exact.bias) == 1.25
    assert float(theirs.bias) == pytest.approx((5 / (4 + 1e-4) / np.log(2)) ** 2, 1e-12)
    empty = np.zeros((1, 1, 4, 4), np.float32)
    nothing = skill_scores(empty, empty, pools=(1,), convention="earthformer")
    assert (nothing.csi == 0).all() and np.isnan(skill_scores(empty, empty, pools=(1,)).csi).all()
    table = summary(skill_scores(*nan_storms(1, (2, 6, 64, 64)), convention="earthformer"))
    assert "hss" not in table and np.isfinite(table["csi_m"])
    with pytest.raises(
        SettingsError, match="convention 'pysteps' is not one of exact, earthformer"
    ):
        skill_scores(pred, target, convention="pysteps")
    with pytest.raises(SettingsError, match="whole VIL levels 1–255"):
        skill_scores(pred, target, thresholds=(0,), convention="earthformer")
