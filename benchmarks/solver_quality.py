"""Endpoint RMSE against the teacher on the digits backbone, NFE 3–6, mean ± std over seeds.

Each seed draws its own training and held-out teacher seeds and fits the learned solvers with
its own fit seed. SpanLift sits on a DyWeight base fitted first (two-stage, base frozen).

    python benchmarks/solver_quality.py [--nfe 3 4 5 6] [--seeds 3] [--iterations 300]
"""

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from spanlift.backbones import load_backbone
from spanlift.platform.fitting.compare import compare
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.sampling.teacher import load_or_generate
from spanlift.solvers import SolverSpec

SOLVERS = [
    ("Euler", "euler", {}),
    ("Heun", "heun", {}),
    ("iPNDM(3M)", "ipndm", {"order": 3}),
    ("DPM-Solver++(3M)", "dpm_solver_pp", {"order": 3}),
    ("UniPC(bh2, 3)", "unipc", {"order": 3}),
    ("DyWeight", "dyweight", {"order": 3}),
    ("SpanLift (DyWeight base)", "spanlift", {"base": "dyweight"}),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="digits")
    p.add_argument("--nfe", type=int, nargs="+", default=[3, 4, 5, 6])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--train-samples", type=int, default=1024)
    p.add_argument("--test-samples", type=int, default=256)
    p.add_argument("--out", type=Path, default=Path("runs/benchmarks/solver_quality"))
    args = p.parse_args()

    backbone = load_backbone(args.backbone)
    results: dict[tuple[str, int], list[float]] = defaultdict(list)
    for seed in range(args.seeds):
        offset = seed * 10**6
        train = load_or_generate(
            args.out / "cache", backbone, range(offset, offset + args.train_samples)
        )
        test_start = 10**9 + offset
        test = load_or_generate(
            args.out / "cache", backbone, range(test_start, test_start + args.test_samples)
        )
        settings = FitSettings(iterations=args.iterations, seed=seed)
        specs = [
            (label, SolverSpec(name, nfe, "edm", st))
            for nfe in args.nfe
            for label, name, st in SOLVERS
            if name != "heun" or nfe % 2 == 1
        ]
        rows = compare(
            [s for _, s in specs], backbone, train, test, settings, args.out / f"seed{seed}"
        )
        for (label, spec), row in zip(specs, rows, strict=True):
            results[label, spec.nfe].append(row.rmse)

    header = f"{'solver':<26}" + "".join(f"{'NFE ' + str(n):>18}" for n in args.nfe)
    print(
        f"\nEndpoint RMSE vs teacher ({args.backbone}, mean ± std over {args.seeds} seeds)\n{header}"
    )
    for label, _, _ in SOLVERS:
        cells = []
        for nfe in args.nfe:
            values = results.get((label, nfe))
            if not values:
                cells.append(f"{'-':>18}")
                continue
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):>11.4f} ± {std:.4f}")
        print(f"{label:<26}" + "".join(cells))


if __name__ == "__main__":
    main()
