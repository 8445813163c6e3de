"""`spanlift fit` (one solver) and `spanlift demo` (the digits comparison): fit by endpoint
teacher matching, in this process, the kept state chosen on validation seeds, and score on the
validation and the held-out test seeds (`spanlift.seeds`), as a sweep's trial does: the same
settings, fit seed and threads give a sweep's numbers. `spanlift fit` records each replicate as a
sweep's trial does (`platform/fitting/record.py`), so the leaderboard ranks it and
`spanlift rerun` repeats it."""

import argparse
from pathlib import Path
from typing import Any

from spanlift.cli.options import (
    DEFAULT_CACHE,
    add_backbone_options,
    add_field_options,
    add_key_values,
    add_schedule_option,
    add_solver_options,
    add_tracking_options,
    command,
    field_values,
    parse_settings,
)
from spanlift.cli.paths import FOLDER, path_option
from spanlift.errors import SettingsError

FIT_OPTIONS = ("iterations", "batch_size", "lr", "seed", "weight_decay", "loss", "patience")
MEMORY_OPTIONS = ("checkpoint", "precision", "micro_batch")
"""The fit's memory settings (platform/fitting/memory.py), options of `spanlift fit` too."""
"""The fit settings `spanlift fit` and `spanlift demo` take as options (the others keep their
defaults; a sweep file's `fit:` section sets any)."""

TEACHER_OPTIONS = ("train_samples", "validation_samples", "test_samples")

DEMO_SOLVERS = [
    ("euler", {}),
    ("heun", {}),
    ("ipndm", {"order": 3}),
    ("dpm_solver_pp", {"order": 3}),
    ("unipc", {"order": 3}),
    ("dyweight", {"order": 3}),
    ("spanlift", {"base": "dyweight", "operator": "spatial", "kernel_size": 3}),
]


def add_commands(sub: Any) -> None:
    """`spanlift fit` and `spanlift demo`."""
    summary = "fit one solver by endpoint teacher matching and score it"
    command(sub, "fit", summary, cmd_fit, add_one_fit_options, kept=fits_kept)
    summary = "fit and compare solvers on the embedded digits backbone"
    command(sub, "demo", summary, cmd_demo, add_demo_options, kept=fits_kept)


def fits_kept(args: argparse.Namespace) -> str:
    """What Ctrl-C leaves: the fits that finished and the teacher sets, which a new run reuses,
    and the runs of the replicates that finished."""
    recorded = "" if getattr(args, "no_tracking", True) else "; finished replicates are recorded"
    return (
        f"finished fits are kept in {args.out} and teacher sets in {args.cache}{recorded}; the "
        "same command continues from them"
    )


def add_one_fit_options(parser: argparse.ArgumentParser) -> None:
    from spanlift.platform.fitting.fit import FitSettings
    from spanlift.seeds import VALIDATION_SAMPLES

    add_solver_options(parser)
    add_fit_options(parser, out="runs/fit", validation_samples=VALIDATION_SAMPLES)
    add_field_options(parser, FitSettings, MEMORY_OPTIONS)
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="fit seeds of replicates, e.g. 0 1 2: one fit each, then their mean and 95%% "
        "interval (default: --seed alone)",
    )
    parser.add_argument("--experiment", default="fit", help="MLflow experiment of the fits' runs")
    add_tracking_options(parser)


def add_demo_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nfe", type=int, nargs="+", default=[3], help="NFE budgets")
    add_schedule_option(parser)
    add_fit_options(parser, out="runs/demo")


def add_fit_options(
    parser: argparse.ArgumentParser, out: str, validation_samples: int | None = None
) -> None:
    """The backbone, the fit settings (FIT_OPTIONS), the teacher sets and where results go;
    `validation_samples`: the command's default validation seeds (None: a sweep's)."""
    from spanlift.platform.fitting.fit import FitSettings
    from spanlift.platform.fitting.losses import LOSSES
    from spanlift.platform.sweep.config import TeacherConfig

    add_backbone_options(parser)
    add_field_options(parser, FitSettings, FIT_OPTIONS, choices={"loss": LOSSES})
    add_key_values(
        parser,
        "--loss-option",
        "loss option, e.g. dinov2_path=models/dinov2-base or c=0.1 (values read as YAML)",
    )
    defaults = {} if validation_samples is None else {"validation_samples": validation_samples}
    add_field_options(parser, TeacherConfig, TEACHER_OPTIONS, defaults=defaults)
    path_option(parser, "--cache", FOLDER, default=DEFAULT_CACHE, help="teacher cache folder")
    path_option(parser, "--out", FOLDER, default=Path(out), help="folder for checkpoints")
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="PyTorch's deterministic algorithms during the fit (a GPU fit then repeats exactly)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (a sweep's trial uses its worker_cpu's whole CPUs; the same number "
        "gives the same float rounding); default: torch's",
    )


def fit_settings(args: argparse.Namespace) -> Any:
    """The FitSettings the options ask for; bad sample counts and loss options refused."""
    from spanlift.platform.fitting.fit import FitSettings

    counts = (args.train_samples, args.validation_samples, args.test_samples)
    if min(counts) < 1:
        raise SettingsError(
            "--train-samples, --validation-samples and --test-samples must be positive, got "
            + ", ".join(map(str, counts))
        )
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise SettingsError(f"--threads must be positive, got {args.threads}")
    for pair in args.loss_option:
        if not pair.partition("=")[0] or "=" not in pair:
            raise SettingsError(f"--loss-option expects key=value, got {pair!r}")
    return FitSettings(
        **field_values(args, FitSettings, FIT_OPTIONS + MEMORY_OPTIONS),
        loss_options=parse_settings(args.loss_option),
        deterministic=args.deterministic,
    )


def roles(args: argparse.Namespace) -> dict[str, range]:
    """The training, validation and test seeds the options ask for (`spanlift.seeds`)."""
    from spanlift.seeds import role_seeds

    return role_seeds(args.train_samples, args.validation_samples, args.test_samples)


def teacher_sets(args: argparse.Namespace, backbone: Any) -> dict[str, Any]:
    """The teacher's endpoints on the training and test seeds, by role, and the validation
    seeds as blocks (their first generated now, the others when a fit's comparison needs them,
    `sampling/validation_blocks.py`)."""
    from spanlift.platform.sampling.teacher import load_or_generate
    from spanlift.platform.sampling.validation_blocks import ValidationBlocks

    seeds = roles(args)
    sets = {role: load_or_generate(args.cache, backbone, seeds[role]) for role in ("train", "test")}
    sets["validation"] = ValidationBlocks(args.cache, backbone, seeds["validation"])
    sets["validation"].block(0)
    return sets


def cmd_fit(args: argparse.Namespace) -> None:
    from dataclasses import replace

    import torch

    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import format_table
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.loading import build, is_learnable

    spec = SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set))
    settings = fit_settings(args)
    seeds = check_seeds(args.seeds or [settings.seed])
    if args.threads:
        torch.set_num_threads(args.threads)
    options = parse_settings(args.backbone_option)
    backbone = load_backbone(args.backbone, **options)
    if not is_learnable(build(spec, backbone)):  # a bad spec fails here, before the teacher
        seeds = seeds[:1]
    runs = fit_runs(args)  # a bad store fails here, before the teacher
    jobs = side_by_side(args, seeds)
    announced = announce(args, spec, backbone, settings, seeds, jobs, None)
    sets = teacher_sets(args, backbone)
    if not announced:  # the teacher was cached: the fit cache says what is left
        announce(args, spec, backbone, settings, seeds, jobs, sets)
    record = fit_recorder(runs, args, backbone, options, sets)
    if jobs > 1:
        torch.set_num_threads(1)  # the replicates' threads, as their runs record them
        fitted = fitted_side_by_side(args, spec, backbone, settings, seeds, options, jobs)
    else:
        fitted = (fitted_here(args, spec, backbone, sets, replace(settings, seed=s)) for s in seeds)
    rows, recorded = [], []
    for row in fitted:  # each replicate recorded as it finishes
        rows.append(row)
        recorded += [(row.seed, *record(row, replace(settings, seed=row.seed)))] if record else []
    print(format_table(rows))
    resolution = resolution_line(rows, args.validation_samples)
    if resolution:
        print(resolution)
    if len(rows) > 1:
        print(replicate_summary(rows))
    for row in rows:
        if row.checkpoint:
            print(f"checkpoint{f' (seed {row.seed})' if len(rows) > 1 else ''}: {row.checkpoint}")
    shown = f"1 per fit, {jobs} fits side by side" if jobs > 1 else torch.get_num_threads()
    print(f"threads: {shown}")
    if recorded:
        print_runs(args, runs, recorded)


ANNOUNCED = 60.0
"""Estimated seconds from which `spanlift fit` says how long it will take before it starts."""


def announce(
    args: argparse.Namespace,
    spec: Any,
    backbone: Any,
    settings: Any,
    seeds: list[int],
    jobs: int,
    sets: dict | None,
) -> bool:
    """Print what the command will take (`fitting/estimate.py`) when that is ANNOUNCED seconds
    or more, and whether it did. Before the teacher sets exist (`sets` None) every fit counts;
    after, those the fit cache holds do not."""
    from spanlift.platform.fitting import estimate
    from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
    from spanlift.platform.sampling.validation_blocks import FIRST_BLOCK

    seed_sets = list(roles(args).values())
    seed_sets[1] = seed_sets[1][:FIRST_BLOCK]
    teacher = estimate.uncached_seeds(args.cache, backbone, seed_sets, DEFAULT_TEACHER)
    if sets is None and not teacher:
        return False
    stages = [fit_stages(args, spec, backbone, settings, seed, sets) for seed in seeds]
    first = min(FIRST_BLOCK, args.validation_samples)
    work = estimate.Work(
        teacher * DEFAULT_TEACHER.nfe,
        sum(estimate.fit_work(settings, spec.nfe, n, 1, first) for n in stages),
        sum(1 for n in stages if n) * (args.test_samples + first) * spec.nfe,
    )
    per_evaluation = estimate.seconds_per_evaluation(backbone)
    per_fit = (  # replicates side by side run one thread each
        estimate.seconds_per_evaluation(backbone, threads=1) if jobs > 1 else per_evaluation
    )
    seconds = work.seconds(per_evaluation, jobs, per_fit)
    if seconds >= ANNOUNCED:
        print(
            f"this will take {estimate.said(seconds)} here: {teacher} teacher seeds at NFE "
            f"{DEFAULT_TEACHER.nfe}, {sum(stages)} fits of {settings.iterations} iterations "
            f"({jobs} at a time); estimated from one timed denoiser call",
            flush=True,
        )
    return seconds >= ANNOUNCED


def fit_stages(
    args: argparse.Namespace, spec: Any, backbone: Any, settings: Any, seed: int, sets: Any
) -> int:
    """The fits one replicate still needs: all its stages before the teacher sets exist."""
    from dataclasses import replace

    from spanlift.platform.fitting.compare import fit_configuration
    from spanlift.platform.fitting.estimate import stages_to_fit
    from spanlift.platform.results.fit_cache import FitCache

    if sets is None:
        return stages_to_fit(spec, backbone, None)
    replicate = replace(settings, seed=seed)
    configuration = fit_configuration(spec, backbone, sets["train"], replicate, sets["validation"])
    return stages_to_fit(spec, backbone, FitCache(args.out, configuration))


def side_by_side(args: argparse.Namespace, seeds: list[int]) -> int:
    """How many replicates fit at once: one per core the process may use, at most one per fit
    seed, when torch's threads are left to it (`--threads` fits one after another)."""
    import os

    if args.threads is not None or len(seeds) < 2:
        return 1
    return max(1, min(len(seeds), len(os.sched_getaffinity(0))))


def fitted_here(
    args: argparse.Namespace, spec: Any, backbone: Any, sets: dict, settings: Any
) -> Any:
    """The comparison row of one replicate, fitted in this process."""
    from spanlift.platform.fitting.compare import compare

    (row,) = compare(
        [spec],
        backbone,
        sets["train"],
        sets["test"],
        settings,
        args.out,
        validation=sets["validation"],
    )
    return row


def fitted_side_by_side(
    args: argparse.Namespace,
    spec: Any,
    backbone: Any,
    settings: Any,
    seeds: list[int],
    options: dict,
    jobs: int,
) -> Any:
    """The replicates' rows in seed order, fitted in `jobs` processes of one thread each
    (`fitting/replicates.py`): the numbers of `--threads 1`."""
    from spanlift.platform.fitting.replicates import Replicates, fit_side_by_side
    from spanlift.solvers.loading import needs_fitted_base

    shared = Replicates(args.backbone, options, roles(args), args.cache, args.out, settings)
    print(f"fitting {len(seeds)} replicates, {jobs} side by side, one torch thread each")
    return fit_side_by_side(spec, shared, seeds, jobs, needs_fitted_base(spec, backbone))


def fit_runs(args: argparse.Namespace) -> Any:
    """The experiment the fits are recorded in (created if new); None with --no-tracking."""
    if args.no_tracking:
        return None
    from spanlift.platform.results.tracking import open_experiment
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri

    return open_experiment(resolve_tracking_uri(args.tracking_uri), args.experiment)


def fit_recorder(
    runs: Any, args: argparse.Namespace, backbone: Any, options: dict, sets: dict
) -> Any:
    """What records a replicate, (row, its fit settings) → (run id, whether recorded now); None
    with --no-tracking."""
    if runs is None:
        return None
    from functools import partial

    from spanlift.platform.fitting.record import FitRecording, record_fit

    return partial(
        record_fit, FitRecording(runs, backbone, args.backbone, options, sets, roles(args))
    )


def print_runs(args: argparse.Namespace, runs: Any, recorded: list[tuple[int, str, bool]]) -> None:
    """Each replicate's run, and the leaderboard command that ranks them."""
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri

    uri = runs.client.tracking_uri
    for seed, run_id, new in recorded:
        before = "" if new else ", recorded before"
        print(
            f"MLflow run {run_id} (seed {seed}{before}) in experiment {args.experiment!r} at {uri}"
        )
    where = f" --tracking-uri {uri}" if uri != resolve_tracking_uri() else ""
    print(f"rank them: spanlift leaderboard --experiment {args.experiment}{where}")


def check_seeds(seeds: list[int]) -> list[int]:
    """Fit seeds: distinct and non-negative."""
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise SettingsError(f"--seeds must be distinct non-negative integers, got {seeds}")
    return seeds


def resolution_line(rows: list[Any], seeds: int) -> str | None:
    """What the validation seeds the fits used resolve (`fit.validation_resolves`, the range over
    replicates), e.g. `validation: 256 of 8192 seeds (added while a comparison was undecided)
    resolve a gain of 4.1% over the starting state (…)`; None when no fit recorded it (nothing
    fitted)."""
    fitted = [r.fitted for r in rows if r.fitted is not None]
    found = sorted(f.validation_resolves for f in fitted if f.validation_resolves is not None)
    if not found:
        return None
    used = sorted({f.validation_seeds or seeds for f in fitted})
    count = str(used[0]) if len(used) == 1 else f"{used[0]} to {used[-1]}"
    if used != [seeds]:
        count += f" of {seeds} seeds (added while a comparison was undecided)"
    else:
        count += " seeds"
    gain = f"{found[0]:.1%}" if found[0] == found[-1] else f"{found[0]:.1%} to {found[-1]:.1%}"
    return (
        f"validation: {count} resolve a gain of {gain} over the starting state "
        "(one paired standard error; fit.validation_resolves)"
    )


def replicate_summary(rows: list[Any]) -> str:
    """`mean over 3 seeds: val RMSE 0.1121 ± 0.0040, test RMSE 0.0965 ± 0.0031 (95 % t interval)`."""
    from spanlift.platform.statistics import replicate_interval

    def shown(values: list[float]) -> str:
        interval = replicate_interval(values)
        return f"{interval.mean:.4f} ± {interval.half_width:.4f}"

    val = shown([r.val_rmse for r in rows])
    return (
        f"mean over {len(rows)} seeds: val RMSE {val}, test RMSE {shown([r.rmse for r in rows])} "
        "(95 % Student t interval over the fit seeds)"
    )


def cmd_demo(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import compare, format_table
    from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
    from spanlift.solvers import SolverSpec

    settings = fit_settings(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    backbone = load_backbone(args.backbone, **parse_settings(args.backbone_option))
    sets = teacher_sets(args, backbone)
    specs = [
        SolverSpec(name, nfe, args.schedule, settings_)
        for nfe in args.nfe
        for name, settings_ in DEMO_SOLVERS
        if name != "heun" or nfe % 2 == 1  # Heun spends 2N − 1 evaluations
    ]
    grid = args.out / "samples.png"
    rows = compare(
        specs,
        backbone,
        sets["train"],
        sets["test"],
        settings,
        args.out,
        grid=grid,
        validation=sets["validation"],
    )
    teacher = f"{DEFAULT_TEACHER.label()}, NFE {DEFAULT_TEACHER.nfe}"
    print(
        f"\nEndpoint RMSE against the teacher ({teacher}) on {args.validation_samples} "
        f"validation and {len(sets['test'])} held-out test seeds:"
    )
    print(format_table(rows))
    print(f"samples (teacher first, same seeds per column): {grid}")
