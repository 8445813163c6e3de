"""Fit a sweep's learned configurations into its fit cache on one machine, several processes
sharing its GPU, without Ray or MLflow: how the GPU fits of docs/results.md "At convergence" were
made. Each process runs what a sweep's trial runs for a fit (`FitCache` + `fit_in_trial`, the same
configuration keys and teacher entries), so `spanlift sweep` afterwards, with the same storage,
takes every fit from the cache and only scores it; a fit cut short leaves its saved state, which
the sweep resumes. The teacher entries must already be in the storage (a sweep's teacher pass,
or entries copied from a sweep with the same teacher and seeds). Prints a line per fit:
iterations run, what ended it, fit seconds.

    python benchmarks/fill_fit_cache.py SWEEP --storage FOLDER [--device cuda] [--processes 14]
        [--nfe 3 4] [--seconds 400]

FOLDER is the sweep's storage as given to `spanlift sweep --storage` (absolute: a solver on a
fitted base names its base's checkpoint by path, so both machines must use the same one). A sweep
whose fits run on several Ray Train workers (`resources.workers` > 1) is refused: one process
would fit a different configuration than its key says.
"""

import argparse
import time
from dataclasses import replace
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import torch

from spanlift.backbones import load_backbone
from spanlift.cli.devices import device_option
from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.results.fit_cache import FitCache
from spanlift.platform.sampling.teacher import read_teacher, supervision_sigmas, teacher_folder
from spanlift.platform.storage import open_storage
from spanlift.platform.sweep.config import load_sweep
from spanlift.seeds import role_seeds
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build, is_learnable


def jobs(sweep: str, nfes: list[int] | None) -> list[tuple[dict, int]]:
    """(solver spec, fit seed) of every learned configuration, lowest NFE first."""
    config = load_sweep(sweep)
    backbone = load_backbone(config.backbone, **config.backbone_options)
    found = [
        (spec.to_dict(), seed)
        for entry, spec in config.grid()
        if (not nfes or spec.nfe in nfes) and is_learnable(build(spec, backbone))
        for seed in config.replicate_seeds(entry)
    ]
    return sorted(found, key=lambda job: job[0]["nfe"])


def fit_one(job: tuple[dict, int], sweep: str, root: Path, device: str, deadline: float) -> str:
    """Fit one configuration's replicate into the sweep's fit cache, as its trial would."""
    spec, seed = SolverSpec.from_dict(job[0]), job[1]
    if time.time() > deadline:
        return f"left for the sweep: {spec.label()} nfe={spec.nfe} seed {seed}"
    torch.set_num_threads(1)
    config = load_sweep(sweep)
    entry = next(e for e, s in config.grid() if s == spec)
    fit = replace(config.fit_of(entry), seed=seed)
    host = load_backbone(config.backbone, **config.backbone_options)
    backbone = host.freeze().to(device)
    t = config.teacher
    roles = role_seeds(t.train_samples, t.validation_samples, t.test_samples)

    def entry_of(role: str, sigmas: tuple[float, ...] = ()) -> Path:
        return teacher_folder(root / "teacher", host, t.solver, roles[role], sigmas)

    sets = f"{entry_of('train').name}|{entry_of('validation').name}"
    template = Configuration(
        config.backbone,
        config.backbone_options,
        spec,
        teacher_identity(t.solver, sets, entry_of("test").name),
        fit={**fit.identity(), "workers": config.resources.workers},
    )

    def fit_here(solver, out):
        from spanlift.platform.sweep.trial_fit import fit_in_trial

        sigmas = supervision_sigmas(solver)
        train, validation = (read_teacher(entry_of(r, sigmas)) for r in ("train", "validation"))
        store = open_storage(str(root))
        return fit_in_trial(solver.to(device), backbone, train, validation, fit, store, out)

    start = time.time()
    fitted = FitCache(root / "fitted", template).fitted(spec, backbone, fit_here)
    return (
        f"{spec.label()} nfe={spec.nfe} seed {seed}: {fitted.iterations_run} iterations, "
        f"ended by {fitted.stopped_by}, {fitted.seconds:.0f} s fitting here, "
        f"{time.time() - start:.0f} s in all"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("--storage", required=True, help="the sweep's storage folder (absolute)")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", type=device_option
    )
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--nfe", type=int, nargs="*", help="only these NFE (default: all)")
    parser.add_argument("--seconds", type=float, default=float("inf"), help="start no fit after")
    args = parser.parse_args()
    config = load_sweep(args.sweep)
    if config.resources.workers != 1:
        parser.exit(2, f"fill_fit_cache: {args.sweep} fits on {config.resources.workers} Ray Train "
                    "workers; this fits in one process, so it takes only workers: 1\n")  # fmt: skip
    root = Path(args.storage).resolve() / config.experiment
    deadline = time.time() + args.seconds
    run = partial(fit_one, sweep=args.sweep, root=root, device=args.device, deadline=deadline)
    todo = jobs(args.sweep, args.nfe)
    print(f"{len(todo)} fits into {root / 'fitted'} on {args.device}", flush=True)
    with get_context("spawn").Pool(args.processes) as pool:
        for line in pool.imap_unordered(run, todo):
            print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


if __name__ == "__main__":
    main()
