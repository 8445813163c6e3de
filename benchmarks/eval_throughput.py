"""Evaluation throughput and FID of the solvers on the digits backbone.

1. Images per second of FID feature extraction on 1 and 2 evaluator actors (each pinned to its
   share of CPU threads), for the digits detector and for Inception on a subset.
2. FID (against the 1 797 digits) of every solver at each NFE, with the `digits` detector (the
   default here, as in docs/results.md; the digits backbone's own default is `digits_eval`),
   `--detector digits_eval` or Inception (`--detector inception`, on fewer samples), learned
   solvers fitted first by endpoint teacher matching (SpanLift on a fitted DyWeight base).

    python benchmarks/eval_throughput.py [--nfe 3 4 5 6] [--samples 10000] [--inception-images 64]
        [--detector digits|digits_eval|inception] [--skip-throughput] [--loss mse|digits|inception]
        [--learned-only]
"""

import argparse
import time
from dataclasses import replace
from pathlib import Path

import torch
from solver_quality import SOLVERS  # the same solvers, labels and settings

from spanlift.backbones import load_backbone
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics.reference import ReferenceSet
from spanlift.platform.evaluation.pool import running_evaluators, start_evaluators
from spanlift.platform.evaluation.sample_metrics import evaluate_samples
from spanlift.platform.fitting.compare import compare
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.sampling.teacher import load_or_generate
from spanlift.solvers import SolverSpec


def throughput(setup: EvaluatorSetup, images: torch.Tensor, actors: int, cpus: int) -> float:
    """Images/s of detector features over `images` on `actors` actors (after a warm-up)."""
    setup = replace(setup, threads=max(1, cpus // actors))
    with running_evaluators(setup, actors, cpus=cpus / actors) as pool:
        pool.image_states(images[: 2 * actors], ("fid",), "warm-up")
        start = time.perf_counter()
        pool.image_states(images, ("fid",), f"{setup.detector} x{actors}")
        return len(images) / (time.perf_counter() - start)


def fitted_specs(
    nfe: int, cache: Path, out: Path, iterations: int, loss: str, learned_only: bool
) -> list[tuple[str, Path | None, SolverSpec]]:
    backbone = load_backbone("digits")
    train = load_or_generate(cache, backbone, range(1024))
    test = load_or_generate(cache, backbone, range(10**9, 10**9 + 256))
    solvers = [s for s in SOLVERS if s[1] != "heun" or nfe % 2 == 1]  # Heun: odd NFE only
    if learned_only:
        solvers = [s for s in solvers if s[1] in ("dyweight", "spanlift")]
    specs = [SolverSpec(name, nfe, settings=settings) for _, name, settings in solvers]
    settings = FitSettings(iterations=iterations, batch_size=32, lr=5e-3, seed=0, loss=loss)
    rows = compare(specs, backbone, train, test, settings, out / f"nfe{nfe}", progress=False)
    return [
        (label, Path(row.checkpoint) if row.checkpoint else None, spec)
        for (label, _, _), row, spec in zip(solvers, rows, specs, strict=True)
    ]


def print_throughput(images: torch.Tensor, cache: Path, args: argparse.Namespace) -> None:
    print(f"\nfeature extraction, images/s ({args.num_cpus} CPUs shared by the actors)")
    for detector, count in (
        ("digits", args.throughput_images),
        ("inception", args.inception_images),
    ):
        setup = EvaluatorSetup("digits", detector, cache)
        for actors in (1, 2):
            rate = throughput(setup, images[:count], actors, args.num_cpus)
            print(f"  {detector:<10} {actors} actor(s), {count} images: {rate:8.1f} images/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nfe", type=int, nargs="+", default=[3, 4, 5, 6])
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--throughput-images", type=int, default=20_000)
    p.add_argument("--inception-images", type=int, default=64)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/benchmarks/eval_throughput"))
    p.add_argument("--skip-throughput", action="store_true", help="only the FID table")
    p.add_argument("--loss", default="mse", help="fit loss: mse, digits, inception")
    p.add_argument("--learned-only", action="store_true", help="only DyWeight and SpanLift")
    p.add_argument(
        "--detector", default="digits", help="FID detector: digits, digits_eval or inception"
    )
    args = p.parse_args()
    cache = args.out / "cache"
    start_ray(None, args.out, args.num_cpus)
    scoring = EvaluatorSetup("digits", args.detector, cache)
    images = load_backbone("digits").reference_images()
    images = images.repeat(args.throughput_images // len(images) + 1, 1, 1, 1)
    if not args.skip_throughput:
        print_throughput(images, cache, args)

    print(f"\nFID ({args.detector} detector vs the digits dataset), {args.samples} samples each")
    print(f"learned solvers fitted with loss {args.loss}, {args.iterations} iterations")
    pool = start_evaluators(scoring, args.num_cpus, cpus=1)
    table, latency, rates = {}, {}, {}
    for nfe in args.nfe:
        for label, checkpoint, spec in fitted_specs(
            nfe, cache, args.out, args.iterations, args.loss, args.learned_only
        ):
            report = evaluate_samples(
                pool, spec, checkpoint, args.samples, ("fid",), ReferenceSet()
            )
            metrics, params = report.metrics(), report.params()
            table[label, nfe] = metrics["fid"]
            latency[label, nfe] = metrics["latency_ms_per_image"]
            rates[label, nfe] = metrics["throughput_images_per_s"]
    print_table("FID", table, args.nfe, "9.2f")
    print(f"detector {params['fid.detector']}, reference {params['fid.reference']}")
    print_table("sampling latency, ms per image (batches of 256)", latency, args.nfe, "9.3f")
    print_table(
        f"evaluation pass, images/s over {args.num_cpus} actors (sampling + scoring)",
        rates,
        args.nfe,
        "9.1f",
    )


def print_table(title: str, cells: dict[tuple[str, int], float], nfes: list[int], fmt: str) -> None:
    """One row per solver, one column per NFE; '–' where a solver has no value at that NFE."""
    width = max(len(label) for label, _, _ in SOLVERS)
    print(f"\n{title}\n{'solver':<{width}} " + " ".join(f"{'NFE ' + str(n):>9}" for n in nfes))
    for label in dict.fromkeys(label for label, _ in cells):
        row = (format(cells[label, n], fmt) if (label, n) in cells else f"{'–':>9}" for n in nfes)
        print(f"{label:<{width}} " + " ".join(row))


if __name__ == "__main__":
    main()
