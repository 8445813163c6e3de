"""Ray and MLflow overhead of a sweep: its wall time against the compute done inside its trials.

Runs a sweep YAML (default: the demo, sweeps/digits_nfe.yaml) from scratch in a fresh folder, with
a fresh MLflow store, and prints wall time, the summed in-trial compute (fit + evaluation
seconds), their ratio, and how many times the teacher was generated (the design says: once).

    python benchmarks/sweep_overhead.py [sweeps/digits_nfe.yaml] [--num-cpus 2]
"""

import argparse
import tempfile
from pathlib import Path

from spanlift.platform.sweep.driver import run_sweep

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweep", nargs="?", default=str(ROOT / "sweeps" / "digits_nfe.yaml"))
    p.add_argument("--num-cpus", type=int, default=None, help="local Ray CPUs (default: all)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as folder:
        summary = run_sweep(
            args.sweep,
            tracking_uri=f"sqlite:///{folder}/mlflow.db",
            storage=f"{folder}/runs",
            num_cpus=args.num_cpus,
        )
    compute, wall = summary.compute_seconds, summary.wall_seconds
    print(
        f"\nsweep {summary.experiment}: {summary.finished}/{summary.configurations} "
        f"configurations finished, {len(summary.failed)} failed"
    )
    print(f"wall time                      {wall:8.1f} s")
    print(f"in-trial compute (fit + eval)  {compute:8.1f} s")
    print(f"wall / compute                 {wall / max(compute, 1e-9):8.2f}")
    print(f"teacher generations            {summary.teacher_generations:8d}")


if __name__ == "__main__":
    main()
