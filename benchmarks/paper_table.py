"""The paper's protocol on digits: every learned solver of `sweeps/digits_paper.yaml`, mean ± std
over fit seeds, FID against the digits with the sweep's evaluation detector (one the losses never
use), endpoint RMSE against the teacher on held-out seeds, and FID(SpanLift) / FID(DyWeight).

    python benchmarks/paper_table.py [--nfe 3 4 5 6] [--seeds 3] [--samples 10000] [--workers 2]
    python benchmarks/paper_table.py --curve 75 150 300 600 --nfe 3   # FID against fit length

The solvers, their settings and losses, the teacher, the fit settings and the FID detector all come
from the sweep file (`--sweep`), so the table and `spanlift sweep sweeps/digits_paper.yaml` run
the same protocol; here each configuration is fitted once per seed (fit seed s: its batches, its
initialisation) on the same teacher set. Fits run in `--workers` processes of one thread each,
SpanLift after the DyWeight base it sits on; FIDs on `--workers` Ray evaluator actors. With
`--curve`, DyWeight and SpanLift at the first NFE (MSE loss, seed 0) are fitted for each budget and
scored the same way: the budget where the ranking stops changing is the one to use (`--iterations`).
"""

import argparse
import csv
import os
import statistics
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from matplotlib.figure import Figure

from spanlift.backbones import load_backbone
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.pool import running_evaluators
from spanlift.platform.evaluation.sample_metrics import evaluate_samples
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import load_or_generate
from spanlift.platform.sweep.config import SweepConfig, load_sweep
from spanlift.platform.sweep.evaluation import reference_set
from spanlift.platform.sweep.teacher import sweep_seeds
from spanlift.solvers import SolverSpec, build_solver, read_checkpoint, save_solver
from spanlift.solvers.loading import is_learnable

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Job:
    """One configuration fitted with one seed."""

    label: str
    spec: SolverSpec
    fit: FitSettings
    seed: int
    folder: Path


@dataclass
class Row:
    label: str
    nfe: int
    seed: int
    iterations: int
    rmse: float
    fit_seconds: float
    best_iteration: int
    checkpoint: str
    fid: float = float("nan")


def learns(spec: SolverSpec) -> bool:
    return is_learnable(build_solver(spec, 0.002, 80.0, 1))


def jobs_of(config: SweepConfig, nfes: list[int], seeds: int, out: Path, iterations: int | None):
    """(label, spec, fit settings, seed) of every configuration of the sweep at `nfes`; analytic
    solvers once (seed 0): another seed would give the same samples."""
    for seed in range(seeds):
        for entry in config.solvers:
            fit = config.fit_of(entry).updated(
                {"seed": seed, **({"iterations": iterations} if iterations else {})}
            )
            for spec in entry.grid():
                if spec.nfe in nfes and (seed == 0 or learns(spec)):
                    label = entry.label or entry.name
                    yield Job(label, spec, fit, seed, out / f"seed{seed}" / f"nfe{spec.nfe}")


def run_job(job: Job, sweep: str, cache: Path) -> Row:
    """Fit one configuration (its fitted base from the same folder) and score it on the test seeds."""
    torch.set_num_threads(1)
    config = load_sweep(sweep)
    backbone = load_backbone(config.backbone, **config.backbone_options)
    teacher = config.teacher.solver
    sets = {
        role: load_or_generate(cache, backbone, seeds, teacher, progress=False)
        for role, seeds in sweep_seeds(config).items()
    }
    test = sets["test"]
    folder = job.folder / job.fit.loss
    folder.mkdir(parents=True, exist_ok=True)
    fitted = fit_spec(
        job.spec, backbone, sets["train"], job.fit, folder, False, validation=sets["validation"]
    )
    solver, seconds = fitted.solver, fitted.seconds
    path = fitted.path or save_solver(folder / f"{job.spec.key()}.pt", solver)
    best = read_checkpoint(path)["metadata"].get("best_iteration", 0)
    return Row(
        job.label,
        job.spec.nfe,
        job.seed,
        job.fit.iterations,
        endpoint_rmse(solver, backbone, test),
        seconds,
        best,
        str(path),
    )


def fit_all(jobs: list[Job], sweep: str, cache: Path, workers: int) -> list[Row]:
    """Every job in `workers` processes; SpanLift jobs after the others, so their DyWeight base
    (same seed, NFE and loss) is fitted once and found in the folder."""
    first = [j for j in jobs if j.spec.name != "spanlift"]
    second = [j for j in jobs if j.spec.name == "spanlift"]
    rows = []
    with ProcessPoolExecutor(workers) as pool:
        for group in (first, second):
            futures = [pool.submit(run_job, job, sweep, cache) for job in group]
            for job, future in zip(group, futures, strict=True):
                rows.append(future.result())
                r = rows[-1]
                print(
                    f"  fitted {job.label} nfe={job.spec.nfe} seed={job.seed}: RMSE {r.rmse:.4f} "
                    f"({r.fit_seconds:.0f} s)",
                    flush=True,
                )
    return rows


def score_fid(rows: list[Row], config: SweepConfig, workers: int, out: Path) -> None:
    """FID of every fitted row, `config.evaluation.samples` samples each, on Ray actors."""
    evaluation = config.evaluation
    setup = EvaluatorSetup(
        config.backbone, evaluation.detector or "", out / "eval-cache", config.backbone_options
    )
    start_ray(None, out, workers, verbose=False)
    with running_evaluators(setup, workers, cpus=1) as pool:
        for row in rows:
            spec = SolverSpec.from_dict(read_checkpoint(Path(row.checkpoint))["spec"])
            report = evaluate_samples(
                pool,
                spec,
                Path(row.checkpoint),
                evaluation.samples,
                ("fid",),
                reference_set(config),
            )
            row.fid = report.metrics()["fid"]
            print(f"  FID {row.label} nfe={row.nfe} seed={row.seed}: {row.fid:.2f}", flush=True)
    params = report.params()
    print(f"detector {params['fid.detector']}, reference {params['fid.reference']}")


def mean_std(values: list[float], digits: int) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {std:.{digits}f}"


def print_table(rows: list[Row], metric: str, nfes: list[int], digits: int = 2) -> None:
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        cells[row.label, row.nfe].append(getattr(row, metric))
    labels = list(dict.fromkeys(r.label for r in rows))
    width = max(len(label) for label in labels)
    print(f"\n{metric}, mean ± std over seeds")
    print(f"{'solver':<{width}} " + " ".join(f"{'NFE ' + str(n):>17}" for n in nfes))
    for label in labels:
        row = (mean_std(cells[label, n], digits) if cells[label, n] else "–" for n in nfes)
        print(f"{label:<{width}} " + " ".join(f"{c:>17}" for c in row))


def print_ratios(rows: list[Row], nfes: list[int]) -> None:
    """FID(SpanLift)/FID(DyWeight) per loss and NFE, from the seed means; the paper: 5.69/8.16."""
    fid = defaultdict(list)
    for row in rows:
        fid[row.label, row.nfe].append(row.fid)
    print("\nFID(SpanLift) / FID(DyWeight)   (the paper, CIFAR-10 at NFE 3: 5.69 / 8.16 = 0.70)")
    for loss in ("MSE", "feature"):
        spanlift, dyweight = f"SpanLift ({loss})", f"DyWeight ({loss})"
        ratios = [
            f"NFE {n}: {statistics.mean(fid[spanlift, n]) / statistics.mean(fid[dyweight, n]):.2f}"
            for n in nfes
            if fid[spanlift, n] and fid[dyweight, n]
        ]
        print(f"  {loss:<8} " + "   ".join(ratios))


def curve(config: SweepConfig, args: argparse.Namespace, cache: Path) -> list[Row]:
    """DyWeight and SpanLift (MSE) at the first NFE, fitted for each budget of `--curve`."""
    entries = [e for e in config.solvers if (e.label or e.name) in CURVE_LABELS]
    picked = replace(config, solvers=tuple(entries))
    jobs = [
        replace(job, folder=args.out / f"curve-{budget}" / f"nfe{job.spec.nfe}")
        for budget in args.curve
        for job in jobs_of(picked, args.nfe[:1], 1, args.out, budget)
    ]
    return fit_all(jobs, str(args.sweep), cache, args.workers)


CURVE_LABELS = ("DyWeight (MSE)", "SpanLift (MSE)")


def plot_curve(rows: list[Row], path: Path) -> Path:
    fig = Figure(figsize=(5, 3.5))
    ax = fig.subplots()
    for label in CURVE_LABELS:
        points = sorted((r.iterations, r.fid) for r in rows if r.label == label)
        ax.plot(*zip(*points, strict=True), marker="o", label=label)
    ax.set(xscale="log", xlabel="fit iterations", ylabel="FID (held-out seeds)")
    ax.set_title(f"digits, NFE {rows[0].nfe}: FID against fit length", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def read_rows(path: Path, seeds: int) -> list[Row]:
    """The rows of an earlier run's CSV, those of the first `seeds` seeds."""
    with path.open() as f:
        rows = [Row(**{k: FIELDS[k](v) for k, v in row.items()}) for row in csv.DictReader(f)]
    return [r for r in rows if r.seed < seeds]


FIELDS = Row.__annotations__  # name → int, float or str: each parses its CSV text


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    print(f"rows: {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "digits_paper.yaml")
    p.add_argument("--nfe", type=int, nargs="+", default=[3, 4, 5, 6])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--iterations", type=int, help="fit iterations (default: the sweep file's)")
    p.add_argument("--samples", type=int, help="FID samples (default: the sweep file's)")
    p.add_argument("--workers", type=int, default=2, help="fitting processes and FID actors")
    p.add_argument("--curve", type=int, nargs="+", help="fit budgets for the FID curve")
    p.add_argument("--detector", help="FID detector (default: the sweep file's)")
    p.add_argument(
        "--rescore", type=Path, help="a table.csv of an earlier run: only score its rows' FID"
    )
    p.add_argument("--out", type=Path, default=Path("runs/benchmarks/paper_table"))
    args = p.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    args.out = args.out.resolve()
    config = load_sweep(args.sweep)
    if args.samples:
        config = replace(config, evaluation=replace(config.evaluation, samples=args.samples))
    if args.detector:
        config = replace(config, evaluation=replace(config.evaluation, detector=args.detector))
    if args.rescore:
        rows = read_rows(args.rescore, args.seeds)
        score_fid(rows, config, args.workers, args.out)
        write_csv(rows, args.out / f"rescored-{config.evaluation.detector}.csv")
        print_table(rows, "fid", sorted({r.nfe for r in rows}))
        print_ratios(rows, sorted({r.nfe for r in rows}))
        return
    cache = args.out / "cache"
    backbone = load_backbone(config.backbone, **config.backbone_options)
    for seeds in sweep_seeds(config).values():  # once, before the workers read it
        load_or_generate(cache, backbone, seeds, config.teacher.solver)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.curve:
        rows = curve(config, args, cache)
        score_fid(rows, config, args.workers, args.out)
        write_csv(rows, args.out / "curve.csv")
        print(f"curve: {plot_curve(rows, args.out / 'fid_vs_iterations.png')}")
        for row in sorted(rows, key=lambda r: (r.iterations, r.label)):
            print(
                f"  {row.iterations:>5} iterations  {row.label:<16} FID {row.fid:8.2f}  RMSE {row.rmse:.4f}"
            )
        return
    jobs = list(jobs_of(config, args.nfe, args.seeds, args.out, args.iterations))
    print(f"{len(jobs)} fits on {args.workers} processes", flush=True)
    rows = fit_all(jobs, str(args.sweep), cache, args.workers)
    score_fid(rows, config, args.workers, args.out)
    write_csv(rows, args.out / "table.csv")
    print_table(rows, "fid", args.nfe)
    print_table(rows, "rmse", args.nfe, digits=4)
    print_ratios(rows, args.nfe)


if __name__ == "__main__":
    main()
