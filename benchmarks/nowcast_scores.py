"""Frames per second of the SEVIR skill scores: `skill_scores` (pools 1, 4, 16, all six
thresholds, the whole xarray Dataset of counts and scores built) against pysteps' `det_cat_fct`
looped over thresholds and pools (pooling with numpy for pools 4 and 16), on the same synthetic
storms: evaluator batches of 48 and 72 frames of 128² and a large input (480 frames of 384²).
Asserts both give the same CSI; prints the median and spread of the repeats.

    python benchmarks/nowcast_scores.py [--repeats 7] [--threads 2]
"""

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from pysteps.verification.detcatscores import det_cat_fct

from spanlift.nowcasting.scores import POOLS, THRESHOLDS, skill_scores

LEAD_TIMES = 6
CASES = ((48, 128), (72, 128), (480, 384))  # (frames, size): two test batches, one large input


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
    return skill_scores(pred, target).csi.values


def repeated_seconds(run: Callable[[], object], repeats: int) -> np.ndarray:
    """Wall seconds of `repeats` calls of `run`, after one warm-up call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return np.array(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch CPU threads (the counting itself runs in NumPy)",
    )
    parser.add_argument(
        "--cases",
        default=",".join(f"{frames}x{size}" for frames, size in CASES),
        help="frames×size pairs, e.g. 48x128,72x128 (frames a multiple of 6 lead times)",
    )
    args = parser.parse_args()
    cases = [tuple(int(part) for part in case.split("x")) for case in args.cases.split(",")]
    if any(frames % LEAD_TIMES for frames, _ in cases):
        parser.error(f"frames must be a multiple of {LEAD_TIMES} (lead times per sample)")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"{args.repeats} repeats (median, min–max), torch threads {args.threads}")
    print(
        f"{'frames':>6} {'size':>5} {'spanlift frames/s':>24} {'pysteps frames/s':>22} "
        f"{'speed-up':>9}"
    )
    for frames, size in cases:
        samples = frames // LEAD_TIMES
        target = storms(rng, frames, size).reshape(samples, LEAD_TIMES, size, size)
        pred = forecast_of(rng, target)
        np.testing.assert_allclose(spanlift_csi(pred, target), pysteps_csi(pred, target), 1e-12)
        ours = repeated_seconds(lambda p=pred, t=target: spanlift_csi(p, t), args.repeats)
        theirs = repeated_seconds(lambda p=pred, t=target: pysteps_csi(p, t), args.repeats)
        print(
            f"{frames:>6} {size:>4}² {rate(frames, ours):>24} {rate(frames, theirs):>22} "
            f"{np.median(theirs) / np.median(ours):>8.1f}×"
        )


def rate(frames: int, seconds: np.ndarray) -> str:
    """Frames per second as 'median (min–max)'."""
    per_second = frames / seconds
    return f"{np.median(per_second):.0f} ({per_second.min():.0f}–{per_second.max():.0f})"


if __name__ == "__main__":
    main()
