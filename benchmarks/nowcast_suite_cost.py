"""Wall time and peak resident memory of `spanlift nowcast eval`, cold (empty teacher cache) and
warm (the teacher sets cached by the cold run), run as a user runs it.

Memory is sampled every 0.2 s with psutil: the driver's own RSS, and the RSS summed over the
driver and every process it started (Ray's GCS, raylet and the evaluator actors).

    python benchmarks/nowcast_suite_cost.py --data data/sevir_synth [--code PATH] [-- eval options]

`--code` runs another checkout of spanlift (PYTHONPATH) on the same data, for a before/after.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_SECONDS = 0.2


def measure(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, int, int]:
    """(wall seconds, driver peak RSS, peak RSS of driver + descendants, exit status); the
    command's output goes to `cwd`/eval.log."""
    start = time.perf_counter()
    log = (cwd / "eval.log").open("w")
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    driver = psutil.Process(process.pid)
    driver_peak = tree_peak = 0
    while process.poll() is None:
        try:
            own = driver.memory_info().rss
            children = sum(rss_of(child) for child in driver.children(recursive=True))
        except psutil.NoSuchProcess:
            break
        driver_peak, tree_peak = max(driver_peak, own), max(tree_peak, own + children)
        time.sleep(SAMPLE_SECONDS)
    process.wait()
    log.close()
    if process.returncode:
        print((cwd / "eval.log").read_text()[-3000:], file=sys.stderr)
    return time.perf_counter() - start, driver_peak, tree_peak, process.returncode


def rss_of(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.NoSuchProcess:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="SEVIR folder or store")
    parser.add_argument("--code", type=Path, default=ROOT, help="spanlift checkout to run")
    parser.add_argument("eval_options", nargs="*", help="more `nowcast eval` options (after --)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.code.resolve())}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        command = [
            sys.executable, "-m", "spanlift.cli", "nowcast", "eval",
            "--data", str(args.data.resolve()), "--num-cpus", "2",
            "--cache", str(work / "cache"), "--out", str(work / "out"),
            "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}", *args.eval_options,
        ]  # fmt: skip
        print(f"spanlift from {args.code}; {' '.join(command[2:])}")
        for run in ("cold", "warm"):
            wall, driver, tree, status = measure(command, env, work)
            print(
                f"{run}: {wall / 60:.0f} min {wall % 60:4.1f} s wall, driver peak RSS "
                f"{driver / 2**30:.2f} GiB, driver + Ray processes {tree / 2**30:.2f} GiB, "
                f"exit {status}"
            )


if __name__ == "__main__":
    main()
