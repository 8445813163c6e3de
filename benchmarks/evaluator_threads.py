"""How a sweep's evaluator CPUs should run: one actor with all their threads, or one actor of one
thread per CPU. A digits FID evaluation (sampling and `digits_eval` features) of `--samples`
seeds on `--num-cpus` CPUs, each way, median of `--repeats` after a warm-up; it chose the rule of
`SweepConfig.evaluator_actors` (one-thread actors on CPUs).

    python benchmarks/evaluator_threads.py [--samples 2000] [--nfe 5] [--num-cpus 2] [--repeats 3]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.pool import running_evaluators
from spanlift.platform.ray_runtime import start_ray
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec


def samples_per_second(
    actors: int, threads: int, cpus: int, spec: SolverSpec, samples: int, repeats: int, cache: Path
) -> list[float]:
    setup = EvaluatorSetup("digits", "digits_eval", cache, threads=threads)
    seeds = list(range(FID_FIRST_SEED, FID_FIRST_SEED + samples))
    with running_evaluators(setup, actors, cpus=cpus / actors) as pool:
        pool.solver_states(spec, None, seeds[:64], ("fid",), "warm-up")
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            pool.solver_states(spec, None, seeds, ("fid",), f"{actors} × {threads}")
            rates.append(samples / (time.perf_counter() - start))
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--nfe", type=int, default=5)
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    spec = SolverSpec("ipndm", args.nfe, "edm", {"order": 3})
    ways = [(1, args.num_cpus), (args.num_cpus, 1), (1, 1)]
    with tempfile.TemporaryDirectory(prefix="evaluator-threads-") as folder:
        start_ray(None, Path(folder), args.num_cpus, verbose=False)
        rates = {
            way: samples_per_second(
                *way, args.num_cpus, spec, args.samples, args.repeats, Path(folder)
            )
            for way in ways
        }
    print(f"\n{'actors × threads':<18}{'samples/s (median)':>20}{'range':>14}")
    for (actors, threads), record in rates.items():
        spread = f"{min(record):.0f}–{max(record):.0f}"
        print(f"{f'{actors} × {threads}':<18}{statistics.median(record):>20.0f}{spread:>14}")
    one, split = (statistics.median(rates[way]) for way in ways[:2])
    print(f"\none-thread actors / one actor with {args.num_cpus} threads: {split / one:.2f}×")


if __name__ == "__main__":
    main()
