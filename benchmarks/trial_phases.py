"""Where a sweep trial's time goes: the median seconds of each phase of its configurations, and
the fixed cost per configuration (its wall in the sweep less its fit and scoring).

A GMM sweep of `--configurations` DyWeight fits (each its own fit seed, so none is reused) and
two analytic solvers, from scratch in a fresh folder and MLflow store on a local Ray. Each
configuration's run logs its phases (`phase.<name>_s`, `spanlift/platform/sweep/trial.py`):

    lookup     the MLflow query for a finished run of the configuration
    backbone   the backbone, loaded once per trial process
    record     opening the run, logging metrics and artifacts (the last part is not in the run's
               own metric: it is measured around the logging, and reported to Tune)
    fit        the fit (in the trial's process; on Ray Train workers with `workers` > 1: their
               start included)
    score      RMSE on the validation and test seeds, latency, sample images
    evaluate   sample metrics on the evaluators (none here)

The fixed cost of a configuration is its run's wall (from opening the run to finishing it, plus
the lookup before) less its fit and scoring seconds: what the sweep spends on it beyond the work
a plain loop would do. Printed with the sweep's wall per configuration (everything, the teacher
and Ray's start included, over the configurations).

    python benchmarks/trial_phases.py [--configurations 12] [--iterations 20] [--num-cpus 2]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import mlflow
import yaml
from sweep_scaling import gmm_sweep  # benchmarks/ is on sys.path as a script

from spanlift.platform.sweep.driver import run_sweep

PHASES = ("lookup", "backbone", "record", "fit", "score", "evaluate")


def profile(configurations: int, iterations: int, num_cpus: int) -> dict[str, float]:
    """One fresh sweep: the median of each phase, fit and scoring seconds, run durations, and the
    sweep's wall per configuration."""
    data = gmm_sweep(configurations, iterations)
    data["solvers"] += [{"name": "ipndm", "nfe": 3}, {"name": "euler", "nfe": 3}]
    with tempfile.TemporaryDirectory(prefix="trial-phases-") as folder:
        path = Path(folder) / "sweep.yaml"
        path.write_text(yaml.safe_dump(data))
        uri = f"sqlite:///{folder}/mlflow.db"
        start = time.perf_counter()
        summary = run_sweep(
            str(path), tracking_uri=uri, storage=f"{folder}/runs", num_cpus=num_cpus
        )
        wall = time.perf_counter() - start
        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=[summary.experiment])
        runs = runs[runs["tags.spanlift.command"] != "sweep"]
    durations = (runs["end_time"] - runs["start_time"]).dt.total_seconds()
    medians = {
        f"phase {name}": float(runs[f"metrics.phase.{name}_s"].median())
        for name in PHASES
        if f"metrics.phase.{name}_s" in runs
    }
    lookup = runs.get("metrics.phase.lookup_s", 0.0)
    fixed = durations + lookup - runs["metrics.fit_seconds"] - runs["metrics.eval_seconds"]
    medians |= {
        "fit_seconds": float(runs["metrics.fit_seconds"].median()),
        "eval_seconds": float(runs["metrics.eval_seconds"].median()),
        "run duration": float(durations.median()),
        "fixed cost": float(fixed.median()),
    }
    count = len(runs)
    medians["sweep wall per configuration"] = summary.wall_seconds / count
    medians["command wall"] = wall
    medians["configurations"] = count
    return medians


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configurations", type=int, default=12, help="DyWeight fits (plus 2)")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    rows = [
        profile(args.configurations, args.iterations, args.num_cpus) for _ in range(args.repeats)
    ]
    heads = "".join(f"{'run ' + str(i + 1):>10}" for i in range(len(rows)))
    print(f"\n{'median seconds per configuration':<36}{heads}")
    for name in rows[0]:
        print(f"{name:<36}" + "".join(f"{row[name]:>10.3f}" for row in rows))
    walls = [row["sweep wall per configuration"] for row in rows]
    fixed = [row["fixed cost"] for row in rows]
    print(
        f"\nfixed cost per configuration: median {statistics.median(fixed):.2f} s; "
        f"sweep wall per configuration: median {statistics.median(walls):.2f} s"
    )


if __name__ == "__main__":
    main()
