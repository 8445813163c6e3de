"""What every sweep pays before its first configuration: importing the trial's module (the driver
and each trial process do), and a local Ray from `start_ray` to its first task's result, with and
without Ray's dashboard (started only for sweeps with Ray Train fits). Each in a fresh process.

    python benchmarks/sweep_start.py [--repeats 3]

With `--sweep FILE`: `spanlift sweep FILE` run from scratch (a fresh folder and MLflow store),
its timeline from the command: each stage line (seconds of wall, and CPU seconds of the command's
process and of all its processes, Ray's included, read from /proc as the line arrives), when
Tune started the first trial, and, for the first trial with a fit, its fit's start (the trial
process's lookup and backbone done) and the part of its fit that was not fitting (Ray Train's
start, with `workers` > 1). On a loaded machine compare CPU seconds and shares, not wall.

    python benchmarks/sweep_start.py --sweep sweeps/gmm_smoke.yaml [--num-cpus 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system, reaped children included) of `pid`, and of `pid` with every
    process descending from it."""
    stats = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                stats[int(proc.name)] = (int(fields[1]), sum(map(int, fields[11:15])) / TICKS)
        except (OSError, IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    tree, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        tree += stats.get(current, (0, 0.0))[1]
        todo += children.get(current, [])
    return stats.get(pid, (0, 0.0))[1], tree


def stage_lines(sweep: str, folder: Path, num_cpus: int) -> tuple[float, list[tuple], list]:
    """`spanlift sweep` run in `folder`: its start, (seconds, own CPU, tree CPU, line) for each
    line it printed, and (seconds, own CPU, tree CPU) sampled as it ran."""
    command = [str(Path(sys.executable).parent / "spanlift"), "sweep", str(Path(sweep).resolve())]
    command += ["--storage", str(folder / "out"), "--tracking-uri", f"sqlite:///{folder}/m.db"]
    start = time.time()
    process = subprocess.Popen(
        [*command, "--num-cpus", str(num_cpus)],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    samples: list[tuple[float, float, float]] = []
    sampler = threading.Thread(target=sample_cpu, args=(process, start, samples), daemon=True)
    sampler.start()
    lines = []
    for line in process.stdout:
        lines.append((time.time() - start, *cpu_seconds(process.pid), line.strip()[:70]))
    if process.wait():
        raise SystemExit("\n".join(line[-1] for line in lines))
    sampler.join()
    return start, lines, samples


def sample_cpu(process: subprocess.Popen, start: float, samples: list) -> None:
    """(seconds, own CPU, tree CPU) of `process` every 0.25 s until it ends."""
    while process.poll() is None:
        samples.append((time.time() - start, *cpu_seconds(process.pid)))
        time.sleep(0.25)


def cpu_at(samples: list[tuple[float, float, float]], wall: float) -> tuple[float, float]:
    """The own and tree CPU seconds of the last sample taken by `wall`."""
    taken = [s for s in samples if s[0] <= wall] or samples[:1]
    return taken[-1][1], taken[-1][2]


def first_trial(folder: Path, start: float) -> dict[str, float]:
    """From Tune's experiment state: seconds from the command to the first trial's start, and,
    for the first trial with a fit, to its fit's start and the part of the fit not fitting."""
    state = next((folder / "out").glob("*/tune/experiment_state-*.json"))
    trials = [json.loads(t[1]) for t in json.loads(state.read_text())["trial_data"]]
    trials.sort(key=lambda t: t["start_time"])
    row = {"Tune starts the first trial": trials[0]["start_time"] - start}
    fitted = [t for t in trials if t["last_result"].get("fit_seconds")]
    if fitted:
        last = fitted[0]["last_result"]
        before = sum(last[f"phase.{p}_s"] for p in ("fit", "score", "evaluate", "record"))
        row["its first fit starts (±1 s)"] = last["timestamp"] - before - start
        row["its fit's start (fit less fitting)"] = last["phase.fit_s"] - last["fit_seconds"]
    return row


def timeline(sweep: str, num_cpus: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        start, lines, samples = stage_lines(sweep, Path(folder), num_cpus)
        trial = first_trial(Path(folder), start)
    print(f"{'wall s':>7s} {'CPU s':>6s} {'tree':>6s}  line of `spanlift sweep {sweep}`")
    for wall, own, tree, line in lines:
        if line.startswith("·") or line.startswith("✓"):
            print(f"{wall:7.2f} {own:6.2f} {tree:6.2f}  {line}")
    for name, wall in trial.items():
        at = (
            ""
            if name.startswith("its fit's")
            else "{:6.2f} {:6.2f}  ".format(*cpu_at(samples, wall))
        )
        print(f"{wall:7.2f} {at or ' ' * 15}{name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sweep", help="a sweep file: the timeline from its command instead")
    p.add_argument("--num-cpus", type=int, default=2)
    args = p.parse_args()
    if args.sweep:
        timeline(args.sweep, args.num_cpus)
        return
    repeats = args.repeats
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
