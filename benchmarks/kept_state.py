"""Which state a fit keeps: SpanLift against its DyWeight base on test seeds, for each rule.

A fit measures its validation loss every `validate_every` iterations and keeps a later state only
when it beats the starting state by `NOISE_MULTIPLE` paired standard errors
(`spanlift/platform/fitting/fit.py`). SpanLift starts as its base, so with a sound rule its test
RMSE is at worst its base's. For each multiple (0: the lowest validation loss, whatever its
margin) and each fit seed, this fits DyWeight and then SpanLift on it (the paper's two stages) on
the Gaussian mixture at NFE 5 and prints SpanLift's test RMSE over DyWeight's (1.000: the start
was kept).

    python benchmarks/kept_state.py [--iterations 1000] [--seeds 0 1 2] [--multiples 0 1 2]
"""

import argparse
import tempfile
from pathlib import Path

from spanlift.backbones import Backbone, load_backbone
from spanlift.platform.fitting import fit as fit_module
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import TeacherSet, load_or_generate
from spanlift.seeds import role_seeds
from spanlift.solvers import SolverSpec

BASE = SolverSpec("dyweight", nfe=5)
SPANLIFT = SolverSpec("spanlift", nfe=5, settings={"base": "dyweight"})


def teacher_sets(
    folder: Path, backbone_name: str = "gmm", validation: int = 256, test: int = 512
) -> tuple[Backbone, dict[str, TeacherSet]]:
    """The backbone and its teacher sets by role: 1 024 training seeds, then `validation`
    validation and `test` test seeds (`spanlift.seeds`), cached in `folder`."""
    backbone = load_backbone(backbone_name)
    roles = role_seeds(train=1024, validation=validation, test=test)
    return backbone, {
        role: load_or_generate(folder / "teacher", backbone, s, progress=False)
        for role, s in roles.items()
    }


def ratios(multiple: float, seeds: list[int], iterations: int, folder: Path) -> list[float]:
    """SpanLift's test RMSE over its base's, one per fit seed, under `multiple`."""
    fit_module.NOISE_MULTIPLE = multiple
    backbone, teacher = teacher_sets(folder)
    out = []
    for seed in seeds:
        settings = FitSettings(iterations=iterations, seed=seed)
        workdir = folder / f"multiple-{multiple}"
        rmse = {}
        for spec in (BASE, SPANLIFT):
            fitted = fit_spec(
                spec, backbone, teacher["train"], settings, workdir, False, teacher["validation"]
            )
            rmse[spec.name] = endpoint_rmse(fitted.solver, backbone, teacher["test"])
        out.append(rmse["spanlift"] / rmse["dyweight"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--multiples", type=float, nargs="+", default=[0.0, 1.0, 2.0])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'multiple':>8}  SpanLift / DyWeight test RMSE, fit seeds {args.seeds}")
        for multiple in args.multiples:
            found = ratios(multiple, args.seeds, args.iterations, Path(tmp))
            print(f"{multiple:>8g}  " + "  ".join(f"{r:.3f}" for r in found))


if __name__ == "__main__":
    main()
