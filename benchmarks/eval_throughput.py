"""Evaluation throughput and FID of the solvers on the digits backbone.

1. Images per second of FID feature extraction on 1 and 2 evaluator actors (each pinned to its
   share of CPU threads), for the digits detector and for Inception on a subset.
2. FID (digits detector, against the 1 797 digits) of every solver at each NFE, learned solvers
   fitted first by endpoint teacher matching (SpanLift on a fitted DyWeight base).

    python benchmarks/eval_throughput.py [--nfe 3 4 5 6] [--samples 10000] [--inception-images 64]
"""

import argparse
import time
from dataclasses import replace
from pathlib import Path

import ray
import torch
from solver_quality import SOLVERS  # the same solvers, labels and settings

from spanlift.backbones import load_backbone
from spanlift.platform.compare import compare
from spanlift.platform.evaluation import pool
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.fid import evaluate_fid
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.fit import FitSettings
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.teacher import load_or_generate
from spanlift.solvers import SolverSpec


def throughput(setup: EvaluatorSetup, images: torch.Tensor, actors: int, cpus: int) -> float:
    """Images/s of detector features over `images` on `actors` actors (after a warm-up)."""
    setup = replace(setup, threads=max(1, cpus // actors))
    handles = pool.start_evaluators(setup, actors, cpus=cpus / actors)
    pool.image_moments(handles, images[: 2 * actors], "warm-up")
    start = time.perf_counter()
    pool.image_moments(handles, images, f"{setup.detector} x{actors}")
    seconds = time.perf_counter() - start
    for handle in handles:
        ray.kill(handle)
    return len(images) / seconds


def fitted_specs(
    nfe: int, cache: Path, out: Path, iterations: int
) -> list[tuple[str, Path | None, SolverSpec]]:
    backbone = load_backbone("digits")
    train = load_or_generate(cache, backbone, range(1024))
    test = load_or_generate(cache, backbone, range(10**9, 10**9 + 256))
    specs = [SolverSpec(name, nfe, settings=settings) for _, name, settings in SOLVERS]
    settings = FitSettings(iterations=iterations, batch_size=32, lr=5e-3, seed=0)
    rows = compare(specs, backbone, train, test, settings, out / f"nfe{nfe}", progress=False)
    return [
        (label, Path(row.checkpoint) if row.checkpoint else None, spec)
        for (label, _, _), row, spec in zip(SOLVERS, rows, specs, strict=True)
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nfe", type=int, nargs="+", default=[3, 4, 5, 6])
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--throughput-images", type=int, default=20_000)
    p.add_argument("--inception-images", type=int, default=64)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/benchmarks/eval_throughput"))
    args = p.parse_args()
    cache = args.out / "cache"
    start_ray(None, args.out, args.num_cpus)
    digits = EvaluatorSetup("digits", "digits", cache)
    images = load_backbone("digits").reference_images()
    images = images.repeat(args.throughput_images // len(images) + 1, 1, 1, 1)
    print(f"\nfeature extraction, images/s ({args.num_cpus} CPUs shared by the actors)")
    for detector, count in (
        ("digits", args.throughput_images),
        ("inception", args.inception_images),
    ):
        setup = EvaluatorSetup("digits", detector, cache)
        for actors in (1, 2):
            rate = throughput(setup, images[:count], actors, args.num_cpus)
            print(f"  {detector:<10} {actors} actor(s), {count} images: {rate:8.1f} images/s")

    print(f"\nFID (digits detector vs the digits dataset), {args.samples} samples per solver")
    handles = pool.start_evaluators(digits, args.num_cpus, cpus=1)
    table = {}
    for nfe in args.nfe:
        for label, checkpoint, spec in fitted_specs(nfe, cache, args.out, args.iterations):
            result = evaluate_fid(handles, digits, spec, checkpoint, args.samples, ReferenceSet())
            table[label, nfe] = result.fid
    width = max(len(label) for label, _, _ in SOLVERS)
    print(f"{'solver':<{width}} " + " ".join(f"{'NFE ' + str(n):>9}" for n in args.nfe))
    for label, _, _ in SOLVERS:
        print(f"{label:<{width}} " + " ".join(f"{table[label, n]:9.2f}" for n in args.nfe))
    print(f"detector {result.detector}, reference {result.reference}")


if __name__ == "__main__":
    main()
