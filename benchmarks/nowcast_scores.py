"""Frames per second of the SEVIR skill scores: `contingency_counts` (pools 1, 4, 16, all six
thresholds) against pysteps' `det_cat_fct` looped over thresholds and pools (pooling with numpy
for pools 4 and 16), on the same synthetic storms at 128² and 384². Asserts both give the same CSI.

    python benchmarks/nowcast_scores.py [--frames 48] [--repeats 5] [--threads 2]
"""

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from pysteps.verification.detcatscores import det_cat_fct

from spanlift.nowcasting.scores import POOLS, THRESHOLDS, contingency_counts

LEAD_TIMES = 6
SIZES = (128, 384)


def storms(rng: np.random.Generator, frames: int, size: int) -> np.ndarray:
    """(frames, size, size) float32 VIL with integer values: a few Gaussian cells per frame."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    field = np.zeros((frames, size, size), np.float32)
    for _ in range(6):
        centre_y, centre_x = rng.uniform(0, 1, frames), rng.uniform(0, 1, frames)
        width = rng.uniform(0.03, 0.15, frames)
        peak = rng.uniform(60, 255, frames)
        distance = (yy - centre_y[:, None, None]) ** 2 + (xx - centre_x[:, None, None]) ** 2
        field += peak[:, None, None] * np.exp(-distance / (2 * width[:, None, None] ** 2))
    return np.round(np.clip(field, 0, 255)).astype(np.float32)


def forecast_of(rng: np.random.Generator, observed: np.ndarray) -> np.ndarray:
    """A shifted, noisy copy of `observed`: an imperfect but skilful forecast."""
    noise = rng.normal(0, 12, observed.shape).astype(np.float32)
    return np.round(np.clip(np.roll(observed, 3, axis=-1) + noise, 0, 255)).astype(np.float32)


def block_max(frames: np.ndarray, pool: int) -> np.ndarray:
    """Max over non-overlapping pool×pool blocks of the last two axes."""
    *lead, height, width = frames.shape
    blocks = frames.reshape(*lead, height // pool, pool, width // pool, pool)
    return blocks.max(axis=(-3, -1))


def pysteps_csi(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(pool, threshold) CSI by pysteps, which counts value > thr; values are integers, so
    > thr − 0.5 is ≥ thr."""
    csi = np.empty((len(POOLS), len(THRESHOLDS)))
    for i, pool in enumerate(POOLS):
        pooled_pred = block_max(pred, pool) if pool > 1 else pred
        pooled_target = block_max(target, pool) if pool > 1 else target
        for j, threshold in enumerate(THRESHOLDS):
            scores = det_cat_fct(pooled_pred, pooled_target, threshold - 0.5, scores=["CSI"])
            csi[i, j] = scores["CSI"]
    return csi


def spanlift_csi(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    counts = contingency_counts(pred, target)
    hits = counts.hits.astype(np.float64)
    return hits / (hits + counts.misses + counts.false_alarms)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=8 * LEAD_TIMES, help="samples × 6 leads")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch CPU threads (the counting itself runs in NumPy)",
    )
    args = parser.parse_args()
    if args.frames % LEAD_TIMES:
        parser.error(f"--frames must be a multiple of {LEAD_TIMES} (lead times per sample)")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    samples = args.frames // LEAD_TIMES
    print(f"{samples} samples × {LEAD_TIMES} lead times, torch threads {args.threads}")
    print(f"{'size':>5} {'spanlift frames/s':>18} {'pysteps frames/s':>17} {'speed-up':>9}")
    for size in SIZES:
        target = storms(rng, args.frames, size).reshape(samples, LEAD_TIMES, size, size)
        pred = forecast_of(rng, target)
        np.testing.assert_allclose(spanlift_csi(pred, target), pysteps_csi(pred, target), 1e-12)
        ours = median_seconds(lambda p=pred, t=target: spanlift_csi(p, t), args.repeats)
        theirs = median_seconds(lambda p=pred, t=target: pysteps_csi(p, t), args.repeats)
        print(
            f"{size:>4}² {args.frames / ours:>18.0f} {args.frames / theirs:>17.0f} "
            f"{theirs / ours:>8.1f}×"
        )


if __name__ == "__main__":
    main()
