"""Whether SpanLift's fit-seed spread is its learning rate: SpanLift fitted again on each fitted
DyWeight base of a finished `sweeps/digits_seed_spread.yaml` sweep, with other learning rates.

The sweep fits DyWeight and then SpanLift on it for each fit seed (lr 0.005, the every-solver
table's). This reads the sweep's teacher entries and its fitted DyWeight bases at one NFE, fits
SpanLift on each base with every `--lr`, and prints, per fit, the test RMSE, the validation RMSE
and the kept iteration (0: the fit kept its start, the base).

    spanlift sweep sweeps/digits_seed_spread.yaml
    python benchmarks/operator_lr.py runs/sweeps/digits-seed-spread --nfe 6 --lr 0.005 0.001
"""

import argparse
import json
import tempfile
from pathlib import Path

import torch

from spanlift.backbones import load_backbone
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.settings import FitSettings
from spanlift.platform.sampling.score import score
from spanlift.platform.sampling.teacher import TeacherSet, read_teacher
from spanlift.solvers import SolverSpec, read_checkpoint

BASE_SETTINGS = {"order": 3, "afs": True}


def teacher_sets(sweep: Path) -> tuple[TeacherSet, TeacherSet, TeacherSet]:
    """The sweep's training, validation and test teacher sets (the test seeds lie highest)."""
    sets = sorted((read_teacher(p) for p in (sweep / "teacher").iterdir()), key=first_seed)
    return sets[0], sets[1], sets[2]


def first_seed(teacher: TeacherSet) -> int:
    return int(teacher.seeds[0])


def fitted_bases(sweep: Path, nfe: int) -> dict[int, Path]:
    """The sweep's fitted DyWeight checkpoints at `nfe`, by fit seed."""
    bases = {}
    for path in (sweep / "fitted").glob(f"dyweight-nfe{nfe}-*.pt"):
        bases[read_checkpoint(path)["metadata"]["fit"]["seed"]] = path
    return dict(sorted(bases.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="the sweep's folder, runs/sweeps/<experiment>")
    parser.add_argument("--nfe", type=int, default=6)
    parser.add_argument("--lr", type=float, nargs="+", default=[0.005, 0.001])
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train, validation, test = teacher_sets(args.sweep)
    backbone = load_backbone("digits")
    with tempfile.TemporaryDirectory() as work:
        for lr in args.lr:
            for seed, base in fitted_bases(args.sweep, args.nfe).items():
                settings = {"base": "dyweight", "base_settings": BASE_SETTINGS}
                spec = SolverSpec(
                    "spanlift", args.nfe, "edm", {**settings, "base_checkpoint": str(base)}
                )
                fit = FitSettings(args.iterations, batch_size=16, lr=lr, seed=seed)
                fitted = fit_spec(spec, backbone, train, fit, Path(work), False, validation)
                scored, _ = score(fitted.solver, backbone, test, validation=validation)
                row = {"lr": lr, "seed": seed, "rmse": scored.rmse, "val_rmse": scored.val_rmse}
                print(json.dumps({**row, "kept_iteration": fitted.best_iteration}), flush=True)


if __name__ == "__main__":
    main()
