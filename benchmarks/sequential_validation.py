"""The kept states of the sequential validation against the fixed rule on all 8 192 seeds.

Each case (solver, NFE, fit seed) is fitted twice from the same seed (the updates never depend
on validation, so both fits pass through the same states): once choosing its kept state on
validation blocks (`ValidationBlocks`, seeds added while a comparison is undecided,
`spanlift/platform/fitting/sequential.py`), once on all `VALIDATION_SAMPLES` validation seeds as
one set (the fixed-sample rule). Printed per case: each one's kept iteration, the seeds the
sequential one used, both test RMSEs and their ratio, each one's fit seconds; then the share of
equal decisions, the share within 1 % test RMSE, and the validation seeds used. The teacher sets
are cached in the folder given (the full set is the blocks joined, generated once).

    python benchmarks/sequential_validation.py /tmp/seqval             # the mixture
    python benchmarks/sequential_validation.py /tmp/seqval --backbone digits --nfe 3 --seeds 0 1
"""

import argparse
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from spanlift.backbones import Backbone, load_backbone
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.fitting.resolution import ResolutionWarning
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import TeacherSet, load_or_generate
from spanlift.platform.sampling.validation_blocks import ValidationBlocks
from spanlift.seeds import VALIDATION_SAMPLES, role_seeds
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build

SOLVERS = {
    "dyweight": {},
    "spanlift": {"base": "ipndm", "base_settings": {"order": 3}, "hidden_dim": 16},
}
"""The solvers fitted (SpanLift on an analytic base, so one stage)."""


def joined(blocks: ValidationBlocks) -> TeacherSet:
    """All the blocks' teacher sets as one set (every block generated)."""
    parts = [blocks.block(j) for j in range(blocks.count)]
    first = parts[0]
    return replace(
        first,
        seeds=torch.cat([p.seeds for p in parts]),
        noise=torch.cat([p.noise for p in parts]),
        endpoints=torch.cat([p.endpoints for p in parts]),
        key="joined",
    )


def both_fits(
    spec: SolverSpec,
    backbone: Backbone,
    sets: dict,
    settings: FitSettings,
) -> list[tuple]:
    """(kept iteration, validation seeds used, test RMSE, fit seconds) for the blocks, then for
    the whole set."""
    found = []
    for validation in (sets["blocks"], sets["full"]):
        solver = build(spec, backbone, seed=settings.seed)
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResolutionWarning)
            result = fit(
                solver, backbone, sets["train"], settings, progress=False, validation=validation
            )
        seconds = time.perf_counter() - started
        rmse = endpoint_rmse(solver, backbone, sets["test"])
        found.append((result.best_iteration, result.validation_seeds, rmse, seconds))
    return found


def teacher_sets(folder: Path, backbone: Backbone) -> dict:
    seeds = role_seeds(train=1024, validation=VALIDATION_SAMPLES, test=1024)
    cache = folder / "teacher"
    blocks = ValidationBlocks(cache, backbone, seeds["validation"], progress=False)
    return {
        "train": load_or_generate(cache, backbone, seeds["train"], progress=False),
        "test": load_or_generate(cache, backbone, seeds["test"], progress=False),
        "blocks": blocks,
        "full": joined(blocks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--backbone", default="gmm")
    parser.add_argument("--nfe", type=int, nargs="+", default=[3, 4, 5, 6])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=list(SOLVERS))
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    backbone = load_backbone(args.backbone)
    sets = teacher_sets(args.folder, backbone)
    same = close = 0
    used = []
    print(
        "solver     NFE seed  kept(seq) kept(8192) seeds  rmse(seq) rmse(8192) ratio  s(seq) "
        "s(8192)"
    )
    for name in args.solvers:
        for nfe in args.nfe:
            for seed in args.seeds:
                spec = SolverSpec(name, nfe, settings=SOLVERS[name])
                settings = FitSettings(iterations=args.iterations, validate_every=10, seed=seed)
                (kept, seeds, rmse, s), (full_kept, _, full_rmse, full_s) = both_fits(
                    spec, backbone, sets, settings
                )
                same += kept == full_kept
                close += abs(rmse / full_rmse - 1) <= 0.01
                used.append(seeds)
                print(
                    f"{name:10} {nfe:3} {seed:4} {kept:10} {full_kept:10} {seeds:5} "
                    f"{rmse:10.5f} {full_rmse:10.5f} {rmse / full_rmse:6.3f} {s:7.1f} "
                    f"{full_s:7.1f}",
                    flush=True,
                )
    fits = len(used)
    print(
        f"{fits} fits: same kept state in {same} ({same / fits:.0%}), test RMSE within 1 % in "
        f"{close} ({close / fits:.0%}); validation seeds used: mean {sum(used) / fits:.0f}, "
        f"max {max(used)} of {VALIDATION_SAMPLES}"
    )


if __name__ == "__main__":
    main()
