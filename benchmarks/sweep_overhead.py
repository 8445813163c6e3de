"""Ray and MLflow overhead of sweeps, and what evaluation adds: wall time against in-trial compute.

Runs each sweep YAML (default: the demo grid, sweeps/digits_nfe.yaml, then the same grid with FID,
sweeps/digits_fid.yaml) from scratch in a fresh folder with a fresh MLflow store, one after the
other, and prints for each: wall time, the summed in-trial compute (fit + RMSE scoring seconds),
their ratio, teacher generations (the design says: once) and model loads (backbone loads by trials
and their evaluator tasks; Train workers load their own); then each sweep's wall time against the
first's (the FID grid's target: at most 1.2×).

    python benchmarks/sweep_overhead.py [SWEEP.yaml ...] [--num-cpus 2]
"""

import argparse
import tempfile
from pathlib import Path

from spanlift.platform.sweep.driver import run_sweep
from spanlift.platform.sweep.summary import SweepSummary

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "sweeps" / "digits_nfe.yaml", ROOT / "sweeps" / "digits_fid.yaml"]


def measure(sweep: Path, num_cpus: int | None) -> SweepSummary:
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as folder:
        return run_sweep(
            str(sweep),
            tracking_uri=f"sqlite:///{folder}/mlflow.db",
            storage=f"{folder}/runs",
            num_cpus=num_cpus,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweeps", nargs="*", type=Path, default=DEFAULT)
    p.add_argument("--num-cpus", type=int, default=None, help="local Ray CPUs (default: all)")
    args = p.parse_args()
    summaries = [measure(sweep, args.num_cpus) for sweep in args.sweeps]
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


if __name__ == "__main__":
    main()
