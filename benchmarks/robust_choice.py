"""Which statistic of the validation losses chooses kept states that carry over to unseen seeds?

A fit's kept state is chosen on the mean squared error over validation seeds, whose per-seed
losses are heavy-tailed on the embedded backbones (on the mixture at NFE 5 a few seeds carry
20 times the mean). A robust statistic might choose better. For each fit seed this fits a solver
(DyWeight; or SpanLift on a DyWeight fitted first, `--solver spanlift`), keeps its state at every
validation (every 25 iterations, the start included), and scores each state on a pool of
validation seeds (per-seed MSE ℓ_t,s) and on the test seeds (RMSE, what a leaderboard reports).
The pool is cut into disjoint validation sets of `--validation` seeds; on each, every statistic
chooses the state t minimising its statistic of the paired per-seed differences
d_s = ℓ_t,s − ℓ_0,s (the start scores 0):

    mean         mean_s d_s                 (the lowest validation MSE, what a fit minimises)
    rule         the mean, among the states that beat the start by one paired standard error
                 over 32 groups (`fit.earns_its_place`, the product's choice)
    median       median_s d_s
    trimmed 10 % / 25 %   the mean of d_s without its lowest and highest 10 % / 25 %

and the test RMSE of the chosen state is recorded. Printed per statistic: the test RMSE of its
choice (mean over the validation sets of a fit seed, then over fit seeds, with a 95 % Student t
interval over fit seeds), and its ratio to the mean's choice, paired by fit seed (95 % t
interval; below 1: the statistic chose better).

    python benchmarks/robust_choice.py [--backbone gmm] [--nfe 4] [--seeds 0 1 2 3 4 5]
        [--iterations 1000] [--validation 128 1024] [--pool 4096] [--solver dyweight]
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import (
    VALIDATION_GROUPS,
    FitSettings,
    earns_its_place,
    fit,
)
from spanlift.platform.sampling.score import sample_errors
from spanlift.platform.statistics import replicate_interval
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build

sys.path.insert(0, str(Path(__file__).parent))
from kept_state import teacher_sets

STATISTICS = ("mean", "rule", "median", "trimmed 10%", "trimmed 25%")


def kept_states(solver, backbone, train, settings) -> list[dict]:
    """The solver's state before the fit and at every validation of it."""
    states = [{k: v.detach().clone() for k, v in solver.state_dict().items()}]

    def keep(metrics, state):
        if state is not None:
            states.append({k: v.detach().clone() for k, v in state["solver"].items()})

    fit(solver, backbone, train, settings, report=keep, progress=False)
    return states


def fitted_solver(args, backbone, sets, seed: int, folder: Path):
    """A freshly built solver to fit (for SpanLift: on a DyWeight fitted first, same seed)."""
    base = SolverSpec("dyweight", args.nfe)
    if args.solver == "dyweight":
        return build(base, backbone)
    settings = FitSettings(iterations=args.iterations, seed=seed)
    fitted = fit_spec(base, backbone, sets["train"], settings, folder, False, sets["validation"])
    spec = SolverSpec(
        "spanlift", args.nfe, settings={"base": "dyweight", "base_checkpoint": str(fitted.path)}
    )
    return build(spec, backbone)


def scored(solver, states, backbone, sets) -> tuple[np.ndarray, np.ndarray]:
    """(states × pool seeds) validation MSE, and each state's test RMSE."""
    val, test = [], []
    for state in states:
        solver.load_state_dict(state)
        val.append(sample_errors(solver, backbone, sets["validation"]).square().numpy())
        test.append(float(sample_errors(solver, backbone, sets["test"]).square().mean().sqrt()))
    return np.stack(val), np.array(test)


def choose(losses: np.ndarray, statistic: str) -> int:
    """The state a statistic chooses from the (states × seeds) losses of one validation set."""
    d = losses - losses[0]
    if statistic == "median":
        return int(np.argmin(np.median(d, axis=1)))
    if statistic.startswith("trimmed"):
        cut = float(statistic.split()[1].rstrip("%")) / 100
        return int(np.argmin(stats.trim_mean(d, cut, axis=1)))
    means = d.mean(axis=1)
    if statistic == "rule":
        groups = np.stack([g.mean(axis=1) for g in np.array_split(losses, VALIDATION_GROUPS, 1)])
        start = torch.from_numpy(groups[:, 0])
        earned = [t for t in range(1, len(losses)) if earns_its_place(start, groups[:, t])]
        return min(earned, key=lambda t: means[t], default=0)
    return int(np.argmin(means))


def study(args, folder: Path) -> dict[int, dict[str, list[float]]]:
    """Test RMSE of each statistic's choice, by validation-set size: a list over fit seeds, each
    the mean over that size's disjoint validation sets."""
    backbone, sets = teacher_sets(folder, args.backbone, args.pool, args.test)
    settings = FitSettings(iterations=args.iterations, validate_every=25, checkpoint_every=25)
    found = {n: {s: [] for s in (*STATISTICS, "oracle")} for n in args.validation}
    for seed in args.seeds:
        solver = fitted_solver(args, backbone, sets, seed, folder)
        states = kept_states(
            solver, backbone, sets["train"], settings.updated({"seed": seed, "validation": 0.0})
        )
        val, test = scored(solver, states, backbone, sets)
        for n in args.validation:
            parts = [val[:, i : i + n] for i in range(0, val.shape[1] - n + 1, n)]
            for statistic in STATISTICS:
                found[n][statistic].append(
                    float(np.mean([test[choose(p, statistic)] for p in parts]))
                )
            found[n]["oracle"].append(float(test.min()))
        print(f"fit seed {seed}: {len(states)} states, test RMSE start {test[0]:.4f}", flush=True)
    return found


def report(found: dict[int, dict[str, list[float]]]) -> None:
    for n, by_statistic in found.items():
        print(f"\n{n} validation seeds a choice ({len(by_statistic['mean'])} fit seeds)")
        print(
            f"{'statistic':<12} {'test RMSE':>9} {'± 95%':>7}  {'/ mean':>6} {'95% interval':>17}"
        )
        mean = np.array(by_statistic["mean"])
        for statistic, values in by_statistic.items():
            interval = replicate_interval(values)
            ratio = replicate_interval(np.array(values) / mean)
            spread = f"{ratio.low:.3f} … {ratio.high:.3f}" if ratio.half_width else "-"
            print(
                f"{statistic:<12} {interval.mean:>9.4f} {interval.half_width or 0:>7.4f}  "
                f"{ratio.mean:>6.3f} {spread:>17}"
            )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--backbone", default="gmm")
    p.add_argument("--solver", choices=["dyweight", "spanlift"], default="dyweight")
    p.add_argument("--nfe", type=int, default=4)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--validation", type=int, nargs="+", default=[128, 1024])
    p.add_argument("--pool", type=int, default=4096, help="validation seeds, cut into sets")
    p.add_argument("--test", type=int, default=1024)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        report(study(args, Path(tmp)))


if __name__ == "__main__":
    main()
