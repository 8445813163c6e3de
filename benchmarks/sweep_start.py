"""What every sweep pays before its first configuration: importing the trial's module (the driver
and each trial process do), and a local Ray from `start_ray` to its first task's result, with and
without Ray's dashboard (started only for sweeps with Ray Train fits). Each in a fresh process.

    python benchmarks/sweep_start.py [--repeats 3]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

IMPORT = """
import time
t = time.perf_counter()
import spanlift.platform.sweep.trial
print(time.perf_counter() - t)
"""

RAY_START = """
import sys, time
from pathlib import Path
import ray
from spanlift.platform.ray_runtime import start_ray
t = time.perf_counter()
start_ray(None, Path(sys.argv[1]), num_cpus=2, verbose=False, dashboard=sys.argv[2] == "on")
ray.get(ray.remote(lambda: 1).remote())
print(time.perf_counter() - t)
ray.shutdown()
"""


def seconds(code: str, *args: str) -> float:
    """The figure a fresh Python process running `code` prints last."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return float(done.stdout.split()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    repeats = p.parse_args().repeats
    rows = {"import spanlift.platform.sweep.trial": [seconds(IMPORT) for _ in range(repeats)]}
    for dashboard in ("off", "on"):
        runs = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                runs.append(seconds(RAY_START, str(Path(folder)), dashboard))
        rows[f"local Ray to its first task, dashboard {dashboard}"] = runs
    print(f"{'seconds':48s} {'median':>7s}  runs")
    for name, runs in rows.items():
        print(f"{name:48s} {statistics.median(runs):7.2f}  {', '.join(f'{r:.2f}' for r in runs)}")


if __name__ == "__main__":
    main()
