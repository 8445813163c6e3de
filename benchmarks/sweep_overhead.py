"""Ray and MLflow overhead of sweeps, against the same fits run one after another, with memory.

Runs each sweep YAML (default: the demo grid, sweeps/digits_nfe.yaml, then the same grid with FID,
sweeps/digits_fid.yaml) from scratch in a fresh folder with a fresh MLflow store, one after the
other, and prints for each: wall time, the summed in-trial compute (fit + RMSE scoring seconds),
their ratio, teacher generations (the design says: once) and model loads (backbone loads by trials
and their evaluator tasks; Train workers load their own); then each sweep's wall time against the
first's (the FID grid's target: at most 1.2×).

`--sequential` also runs each sweep's configurations one after another in this process with
`spanlift fit`'s code (`compare` on one spec at a time, the teacher sets generated once first, as
`spanlift fit` would on its first call and read from its cache after): what a user's shell loop
would do, without its per-call process start. Printed beside the sweep: its wall, the sweep's
over it (target ≤ 0.8× on 2 cores) and each configuration's fixed cost in the sweep: its MLflow
run's duration less the fit and scoring seconds it logged (start-up, Ray Train's worker group,
tracking), median and range.

Peak resident memory of the sweep's driver, its trial processes, Train workers and evaluator
actors (psutil, every 0.25 s, over the process tree) is printed after each sweep.

    python benchmarks/sweep_overhead.py [SWEEP.yaml ...] [--num-cpus 2] [--sequential]
"""

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import mlflow
from memory_sampler import MemorySampler  # benchmarks/ is on sys.path as a script

from spanlift.backbones import load_backbone
from spanlift.platform.fitting.compare import compare
from spanlift.platform.sampling.teacher import load_or_generate
from spanlift.platform.sweep.config import load_sweep
from spanlift.platform.sweep.driver import run_sweep
from spanlift.platform.sweep.summary import SweepSummary
from spanlift.platform.sweep.teacher import sweep_seeds

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "sweeps" / "digits_nfe.yaml", ROOT / "sweeps" / "digits_fid.yaml"]
TARGET = 0.8
"""The sweep's wall over the sequential loop's, on 2 cores."""


def measure(sweep: Path, num_cpus: int | None) -> tuple[SweepSummary, list[float], MemorySampler]:
    """The sweep's summary, each configuration's fixed cost (s) and the memory peaks."""
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        with MemorySampler() as memory:
            summary = run_sweep(
                str(sweep), tracking_uri=uri, storage=f"{folder}/runs", num_cpus=num_cpus
            )
        return summary, fixed_costs(uri, summary.experiment), memory


def fixed_costs(uri: str, experiment: str) -> list[float]:
    """Per configuration run: its MLflow duration less the fit and scoring seconds it logged."""
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[experiment], filter_string="metrics.rmse >= 0")
    costs = []
    for _, run in runs.iterrows():
        duration = (run["end_time"] - run["start_time"]).total_seconds()
        compute = run.get("metrics.fit_seconds", 0.0) + run.get("metrics.eval_seconds", 0.0)
        costs.append(duration - (0.0 if compute != compute else compute))  # NaN: not logged
    return costs


def sequential(sweep: Path) -> float:
    """Seconds to generate the teacher sets, then fit and score every configuration in turn."""
    config = load_sweep(sweep)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sweep-sequential-") as folder:
        backbone = load_backbone(config.backbone, **config.backbone_options)
        teacher = config.teacher.solver
        sets = {
            role: load_or_generate(Path(folder), backbone, seeds, teacher, progress=False)
            for role, seeds in sweep_seeds(config).items()
        }
        for entry, spec in config.grid():
            fit = config.fit_of(entry)
            for seed in config.replicate_seeds(entry):
                compare(
                    [spec],
                    backbone,
                    sets["train"],
                    sets["test"],
                    replace(fit, seed=seed),
                    Path(folder),
                    False,
                    validation=sets["validation"],
                )
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweeps", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--num-cpus", type=int, default=None, help="local Ray CPUs (default: all)")
    p.add_argument("--sequential", action="store_true", help="also run the plain loop")
    args = p.parse_args()
    measured = [measure(sweep, args.num_cpus) for sweep in args.sweeps]
    loops = [sequential(sweep) for sweep in args.sweeps] if args.sequential else []
    summaries = [s for s, _, _ in measured]
    first = summaries[0]
    print(f"\n{'sweep':<16}{'done':>8}{'wall s':>9}{'compute s':>11}{'wall/compute':>14}", end="")
    print(f"{'teacher gens':>14}{'model loads':>13}{'wall vs first':>15}")
    for s in summaries:
        print(
            f"{s.experiment:<16}{f'{s.finished}/{s.configurations}':>8}{s.wall_seconds:>9.1f}"
            f"{s.compute_seconds:>11.1f}{s.wall_seconds / max(s.compute_seconds, 1e-9):>14.2f}"
            f"{s.teacher_generations:>14d}{s.model_loads:>13d}"
            f"{s.wall_seconds / first.wall_seconds:>14.2f}×"
        )
        for failure in s.failed:
            print(f"  failed: {failure}")
    if loops:
        print(f"\n{'sweep':<16}{'sweep s':>9}{'loop s':>9}{'sweep/loop':>12}{'target':>9}", end="")
        print(f"{'fixed s/config (median, range)':>34}")
        for (s, costs, _), loop in zip(measured, loops, strict=True):
            spread = f"{statistics.median(costs):.2f} ({min(costs):.2f}–{max(costs):.2f})"
            print(
                f"{s.experiment:<16}{s.wall_seconds:>9.1f}{loop:>9.1f}"
                f"{s.wall_seconds / loop:>12.2f}{f'≤ {TARGET}':>9}{spread:>34}"
            )
    for s, _, memory in measured:
        print(f"\npeak resident memory, {s.experiment}: " + "; ".join(memory.lines()))


if __name__ == "__main__":
    main()
