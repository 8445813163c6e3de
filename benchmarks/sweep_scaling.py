"""How a sweep's cost grows: wall time for 6, 12, 24 and 48 configurations, and evaluator
throughput for 1, 2 and 4 actors, with one plot of both (docs/scaling.png).

Sweeps: the Gaussian-mixture backbone (closed-form denoiser, so the fits are short and the
sweep's own cost shows), every configuration a DyWeight fit at NFE 3 with its own fit seed, so
all cost the same; resources as sweeps/gmm_smoke.yaml but one Train worker per trial. Each size
runs from scratch in a fresh folder and MLflow store on one local Ray. Printed: wall, wall per
configuration and its ratio to the smallest size's (flat: no MLflow query or Tune state that grows
with the sweep).

Evaluators: FID features of a fixed set of digits images (the `digits` detector) on 1, 2 and 4
actors sharing `--num-cpus` CPUs (each actor's threads: its share, at least 1), after a warm-up.

    python benchmarks/sweep_scaling.py [--sizes 6 12 24 48] [--actors 1 2 4] [--num-cpus 2]
        [--images 20000] [--plot docs/scaling.png]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from spanlift.backbones import load_backbone
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.pool import running_evaluators
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.sweep.driver import run_sweep

ROOT = Path(__file__).resolve().parent.parent


def gmm_sweep(configurations: int, iterations: int) -> dict:
    """A grid of `configurations` DyWeight fits at NFE 3 on the mixture, one fit seed each."""
    return {
        "experiment": f"gmm-scaling-{configurations}",
        "backbone": "gmm",
        "teacher": {
            "solver": "ipndm",
            "settings": {"order": 4},
            "nfe": 35,
            "train_samples": 256,
            "test_samples": 64,
        },
        "solvers": [
            {"name": "dyweight", "nfe": 3, "fit": {"seed": seed}, "label": f"dyweight-{seed}"}
            for seed in range(configurations)
        ],
        "search": {"algorithm": "grid", "metric": "rmse", "mode": "min"},
        "fit": {"iterations": iterations, "batch_size": 16, "lr": 0.005, "seed": 0},
        "resources": {
            "trial_cpu": 0.1,
            "workers": 1,
            "worker_cpu": 0.8,
            "max_failures": 1,
            "evaluator_cpu": 0.1,
        },
    }


def sweep_wall(configurations: int, iterations: int, num_cpus: int) -> tuple[float, int]:
    """(wall seconds, configurations finished) of one fresh sweep of that size."""
    with tempfile.TemporaryDirectory(prefix="sweep-scaling-") as folder:
        path = Path(folder) / "sweep.yaml"
        path.write_text(yaml.safe_dump(gmm_sweep(configurations, iterations)))
        summary = run_sweep(
            str(path),
            tracking_uri=f"sqlite:///{folder}/mlflow.db",
            storage=f"{folder}/runs",
            num_cpus=num_cpus,
        )
        return summary.wall_seconds, summary.finished


def evaluator_rate(actors: int, images, num_cpus: int, cache: Path, repeats: int) -> list[float]:
    """Images/s of digits-detector features over `images` on `actors` actors, per repeat."""
    setup = EvaluatorSetup("digits", "digits", cache, threads=max(1, num_cpus // actors))
    with running_evaluators(setup, actors, cpus=num_cpus / actors) as pool:
        pool.image_states(images[: 2 * actors], ("fid",), "warm-up")
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            pool.image_states(images, ("fid",), f"{actors} actor(s)")
            rates.append(len(images) / (time.perf_counter() - start))
        return rates


def plot(sizes, walls, actors, rates, path: Path) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    per = [w / n for w, n in zip(walls, sizes, strict=True)]
    left.plot(sizes, walls, "o-", label="sweep wall (s)")
    left.set_xlabel("configurations")
    left.set_ylabel("seconds")
    left.set_xscale("log", base=2)
    left.set_xticks(sizes, [str(s) for s in sizes])
    twin = left.twinx()
    twin.plot(sizes, per, "s--", color="tab:orange", label="per configuration (s)")
    twin.set_ylabel("seconds per configuration")
    twin.set_ylim(0, max(per) * 1.3)
    left.set_title("GMM sweep (DyWeight fits, NFE 3)")
    left.legend(loc="upper left")
    twin.legend(loc="lower right")
    medians = [statistics.median(r) for r in rates]
    right.errorbar(
        actors,
        medians,
        yerr=[
            [m - min(r) for m, r in zip(medians, rates, strict=True)],
            [max(r) - m for m, r in zip(medians, rates, strict=True)],
        ],
        fmt="o-",
        capsize=4,
    )
    right.set_xticks(actors)
    right.set_xlabel("evaluator actors")
    right.set_ylabel("images/s (median, range)")
    right.set_ylim(0, max(max(r) for r in rates) * 1.2)
    right.set_title("FID features, digits detector")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[6, 12, 24, 48])
    p.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--iterations", type=int, default=20, help="fit iterations per configuration")
    p.add_argument("--images", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3, help="evaluator passes per actor count")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "scaling.png")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="scaling-") as folder:
        start_ray(None, Path(folder), args.num_cpus, verbose=False)
        images = load_backbone("digits").reference_images()
        images = images.repeat(args.images // len(images) + 1, 1, 1, 1)[: args.images]
        rates = [
            evaluator_rate(n, images, args.num_cpus, Path(folder), args.repeats)
            for n in args.actors
        ]
        print_rates(args.actors, rates)
        walls: list[float] = []
        for n in args.sizes:  # each size printed and plotted as it finishes
            wall, done = sweep_wall(n, args.iterations, args.num_cpus)
            walls.append(wall)
            print_walls(args.sizes[: len(walls)], walls, [done])
            plot(args.sizes[: len(walls)], walls, args.actors, rates, args.plot)
    print(f"plot: {args.plot}")


def print_rates(actors: list[int], rates: list[list[float]]) -> None:
    print(f"\n{'actors':>7}{'images/s (median)':>19}{'range':>18}{'vs 1':>7}")
    first = statistics.median(rates[0])
    for n, record in zip(actors, rates, strict=True):
        median = statistics.median(record)
        spread = f"{min(record):.0f}–{max(record):.0f}"
        print(f"{n:>7}{median:>19.0f}{spread:>18}{median / first:>6.2f}×", flush=True)


def print_walls(sizes: list[int], walls: list[float], finished: list[int]) -> None:
    """The newest size's line: wall, per configuration and against the smallest size's."""
    n, wall, base = sizes[-1], walls[-1], walls[0] / sizes[0]
    if len(walls) == 1:
        print(
            f"\n{'configurations':>15}{'finished':>10}{'wall s':>9}{'s / config':>12}{'vs first':>10}"
        )
    print(
        f"{n:>15}{finished[-1]:>10}{wall:>9.1f}{wall / n:>12.2f}{wall / n / base:>9.2f}×",
        flush=True,
    )


if __name__ == "__main__":
    main()
