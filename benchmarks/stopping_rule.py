"""What the stopping rule saves and costs: DyWeight on the Gaussian mixture, one fit per patience.

With `patience` p a fit stops after p validations without a gain beyond one paired standard
error (`spanlift/platform/fitting/fit.py`); `iterations` is the cap. For each p this fits DyWeight
at NFE 3 (training seeds 0–255, validation seeds 5000–5127, lr 5e-3, validation every 25, the
default cap of 2 000 iterations) and prints where it stopped, the state it kept and its test RMSE
on 512 test seeds (from 10⁶); p = 0 runs to the cap.

    python benchmarks/stopping_rule.py [--patience 0 3 6 10 20] [--iterations 2000]
"""

import argparse
import time

from spanlift.backbones import load_backbone
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.solvers import SolverSpec, build_solver


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--patience", type=int, nargs="+", default=[0, 3, 6, 10, 20])
    p.add_argument("--iterations", type=int, default=2000)
    args = p.parse_args()
    gmm = load_backbone("gmm")
    train = generate_teacher(gmm, range(256), progress=False)
    validation = generate_teacher(gmm, range(5000, 5128), progress=False)
    test = generate_teacher(gmm, range(10**6, 10**6 + 512), progress=False)
    print("| patience | stopped at | by | kept state | test RMSE | seconds |")
    print("|---:|---:|---|---:|---:|---:|")
    for patience in args.patience:
        solver = build_solver(SolverSpec("dyweight", 3), gmm.sigma_min, gmm.sigma_max, 1)
        settings = FitSettings(
            iterations=args.iterations, lr=5e-3, validate_every=25, batch_size=32, patience=patience
        )
        start = time.perf_counter()
        result = fit(solver, gmm, train, settings, progress=False, validation=validation)
        seconds = time.perf_counter() - start
        rmse = endpoint_rmse(solver, gmm, test)
        print(
            f"| {patience} | {result.iterations_run} | {result.stopped_by} | "
            f"{result.best_iteration} | {rmse:.4f} | {seconds:.1f} |"
        )


if __name__ == "__main__":
    main()
