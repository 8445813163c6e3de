"""The sweep's parallel teacher pass against one plain loop over the same seeds, and its cache.

For a sweep file's teacher (default: the demo grid's, iPNDM(4) at NFE 35 on digits, 1 024 train
and 256 test seeds), per repeat:

- loop: `generate_teacher` over all the seeds in this process (torch's own threads), what a user
  without spanlift's sweep would run;
- parallel: `prepare_teachers` into an empty cache folder on a local Ray of `--num-cpus` CPUs
  (chunks as Ray tasks, one CPU each; the entries written and verified as a sweep writes them);
- cache hit: `prepare_teachers` again on the filled folder, and reading both entries back as the
  trials do.

Printed: images/s of each, the parallel pass over the loop (target ≥ 1.8× on 2 workers) and the
regeneration over the cache hit (target ≥ 50×), median and range over `--repeats`; the endpoints
of both passes are asserted equal to float32 rounding.

    python benchmarks/teacher_vs_loop.py [SWEEP.yaml] [--num-cpus 2] [--repeats 3]
        [--train-samples N] [--test-samples N]
"""

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from spanlift.backbones import load_backbone
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.sampling.teacher import generate_teacher, read_teacher
from spanlift.platform.storage import open_storage
from spanlift.platform.sweep.config import SweepConfig, load_sweep
from spanlift.platform.sweep.teacher import prepare_teachers, sweep_seeds

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"parallel / loop": 1.8, "regeneration / cache hit": 50.0}


def timed(run):
    start = time.perf_counter()
    value = run()
    return value, time.perf_counter() - start


def one_repeat(config: SweepConfig, folder: Path) -> tuple[dict[str, float], float]:
    """Seconds of the loop, the parallel pass and the cache hit; and the largest endpoint gap."""
    backbone = load_backbone(config.backbone, **config.backbone_options)
    seeds = [s for role in sweep_seeds(config).values() for s in role]
    loop, loop_s = timed(
        lambda: generate_teacher(backbone, seeds, config.teacher.solver, progress=False)
    )
    entries, parallel_s = timed(lambda: prepare_teachers(config, open_storage(str(folder))))

    def written_entries(prepared: Any) -> list[Path]:
        return [prepared.train, prepared.validation, prepared.test]

    _, hit_s = timed(
        lambda: [
            read_teacher(f)
            for f in written_entries(prepare_teachers(config, open_storage(str(folder))))
        ]
    )
    written = torch.cat([read_teacher(f).endpoints for f in written_entries(entries)])
    gap = float((written - loop.endpoints).abs().max() / loop.endpoints.abs().max())
    return {"loop": loop_s, "parallel": parallel_s, "cache hit": hit_s}, gap


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweep", nargs="?", type=Path, default=ROOT / "sweeps" / "digits_nfe.yaml")
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--train-samples", type=int, default=None)
    p.add_argument("--test-samples", type=int, default=None)
    p.add_argument("--tolerance", type=float, default=1e-5)
    args = p.parse_args()
    config = load_sweep(args.sweep)
    sizes = {
        "train_samples": args.train_samples or config.teacher.train_samples,
        "test_samples": args.test_samples or config.teacher.test_samples,
    }
    config = replace(config, teacher=replace(config.teacher, **sizes))
    images = sum(sizes.values())
    with tempfile.TemporaryDirectory(prefix="teacher-vs-loop-") as folder:
        start_ray(None, Path(folder), args.num_cpus, verbose=False)
        runs = [one_repeat(config, Path(folder) / f"cache{r}") for r in range(args.repeats)]
    times = {side: [t[side] for t, _ in runs] for side in runs[0][0]}
    teacher = config.teacher.solver
    print(f"\nteacher {teacher.label()} NFE {teacher.nfe} on {config.backbone}: {images} seeds")
    print(f"{'':<12}{'seconds':>10}{'images/s':>12}")
    for side, record in times.items():
        median = statistics.median(record)
        print(f"{side:<12}{median:>10.3f}{images / median:>12.1f}")
    ratios = {
        "parallel / loop": [a / b for a, b in zip(times["loop"], times["parallel"], strict=True)],
        "regeneration / cache hit": [
            a / b for a, b in zip(times["parallel"], times["cache hit"], strict=True)
        ],
    }
    for name, record in ratios.items():
        print(
            f"{name:<26}{statistics.median(record):>8.2f}×  range {min(record):.2f}–"
            f"{max(record):.2f}  target ≥ {TARGETS[name]}×"
        )
    gap = max(g for _, g in runs)
    if gap > args.tolerance:
        raise SystemExit(f"FAILED: parallel and loop endpoints differ by {gap:.1e}")
    print(f"parallel endpoints equal to the loop's within {args.tolerance:.0e} (largest {gap:.1e})")


if __name__ == "__main__":
    main()
