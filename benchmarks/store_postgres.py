"""A sweep's store work in PostgreSQL against SQLite: creating the store, recording runs from
several processes at once, and the leaderboard's query.

A throwaway PostgreSQL server is started in a temporary folder (tests/postgres_server.py, with
PostgreSQL's default durability: fsync on, as SQLite's default is) beside a SQLite file in
another. For each store:

- **create**: the first `connect()` of an empty store, which creates and migrates MLflow's
  tables;
- **record**: `--runs` runs recorded as a sweep's trials record them (`ConfigurationRuns.open`,
  then `finish` with two metrics and a 200-point loss history, no artifacts), split over K
  processes running at once for each K of `--processes`, each having opened the store first;
  printed: the wall time of the recording, runs per second, a process's time to open the store
  (a new MLflow client, as each trial makes; on 2 cores K processes share them), the median and
  90th percentile of one run's recording time, and the runs that failed
  (SQLite lets one writer in at a time; a writer that waits past its timeout fails);
- **leaderboard**: `leaderboard()` over every recorded run, the median of `--repeats`.

    python benchmarks/store_postgres.py [--runs 96] [--processes 1 4] [--repeats 3]

About a minute on 2 cores with the defaults. Nothing is asserted: the figures are printed.
"""

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the throwaway server is the tests' own

SOLVERS = ("euler", "heun", "ipndm", "dpm_solver_pp")
HISTORY = 200


def record_runs(uri: str, experiment: str, keys: list[str], start) -> dict:
    """Open the store (a new client, as each trial makes), wait for every process (`start`, a
    barrier), then record one run per key as a trial does: the seconds to open, when recording
    began and ended, each run's seconds, and how many failed."""
    from spanlift.platform.tracking.runs import ConfigurationRuns

    began = time.perf_counter()
    runs = ConfigurationRuns(uri, experiment)
    opened = time.perf_counter() - began
    start.wait()
    began, seconds, failed = time.time(), [], 0
    for key in keys:
        index = int(key.rsplit("-", 1)[1])
        solver, nfe = SOLVERS[index % len(SOLVERS)], 3 + index // len(SOLVERS) % 4
        params = {"backbone": "gmm", "nfe": nfe, "solver": solver, "configuration": solver}
        clock = time.perf_counter()
        try:
            run = runs.open(key, f"{solver} nfe={nfe}", params, {"spanlift.code_version": "bench"})
            metrics = {"rmse": 0.1 + 0.01 * (index % 7), "val_rmse": 0.2 + 0.01 * (index % 5)}
            loss = [1.0 / (1 + i) for i in range(HISTORY)]
            runs.finish(run, metrics, [], histories={"loss": loss})
        except Exception:  # a writer that could not get in: counted, as a trial's retry would be
            failed += 1
            continue
        seconds.append(time.perf_counter() - clock)
    return {
        "opened": opened,
        "began": began,
        "ended": time.time(),
        "seconds": seconds,
        "failed": failed,
    }


def record(uri: str, experiment: str, runs: int, processes: int, offset: int) -> dict:
    """`runs` runs recorded by `processes` processes at once; the wall time from the first
    process's start of recording to the last one's end."""
    keys = [f"run-{offset + i}" for i in range(runs)]
    shares = [keys[i::processes] for i in range(processes)]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["spanlift.platform.tracking.runs"])
    with context.Manager() as manager, context.Pool(processes) as pool:
        start = manager.Barrier(processes)
        outcomes = pool.starmap(record_runs, [(uri, experiment, s, start) for s in shares])
    wall = max(o["ended"] for o in outcomes) - min(o["began"] for o in outcomes)
    seconds = sorted(s for o in outcomes for s in o["seconds"])
    return {
        "wall": wall,
        "open": statistics.median(o["opened"] for o in outcomes),
        "per_second": len(seconds) / wall,
        "median": statistics.median(seconds),
        "p90": seconds[int(0.9 * (len(seconds) - 1))],
        "failed": sum(o["failed"] for o in outcomes),
    }


def measure(uri: str, args: argparse.Namespace) -> dict:
    """Creating the store, recording for each K, and the leaderboard over all runs."""
    from spanlift.platform.tracking.leaderboard import leaderboard
    from spanlift.platform.tracking.runs import connect, experiment_id

    start = time.perf_counter()
    client = connect(uri)
    created = time.perf_counter() - start
    experiment_id(client, "store-bench", create=True)
    recorded = {}
    for i, processes in enumerate(args.processes):
        recorded[processes] = record(uri, "store-bench", args.runs, processes, i * args.runs)
    board = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        entries = leaderboard(client, "store-bench", "rmse", "min")
        board.append(time.perf_counter() - start)
    assert entries, "the leaderboard found no runs"
    return {"created": created, "recorded": recorded, "board": statistics.median(board)}


def report(name: str, figures: dict, runs: int) -> None:
    print(f"{name}: store created in {figures['created']:.2f} s")
    for processes, r in figures["recorded"].items():
        print(
            f"  {runs} runs by {processes} process(es): {r['wall']:.2f} s, "
            f"{r['per_second']:.1f} runs/s (opening the store {r['open']:.2f} s before), one run median {1000 * r['median']:.0f} ms, "
            f"p90 {1000 * r['p90']:.0f} ms, failed {r['failed']}"
        )
    total = runs * len(figures["recorded"])
    print(f"  leaderboard over {total} runs: {figures['board']:.2f} s (median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=96)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from tests.postgres_server import postgres_server, unavailable

    reason = unavailable()
    if reason:
        sys.exit(f"store_postgres: {reason}")
    with postgres_server(durable=True) as server, tempfile.TemporaryDirectory() as folder:
        postgres = server.create_database("bench")
        sqlite = f"sqlite:///{Path(folder) / 'mlflow.db'}"
        for name, uri in (("PostgreSQL", postgres), ("SQLite", sqlite)):
            report(name, measure(uri, args), args.runs)


if __name__ == "__main__":
    main()
