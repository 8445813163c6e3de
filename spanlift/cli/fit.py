"""`spanlift fit` (one solver) and `spanlift demo` (the digits comparison): fit by endpoint
teacher matching, in this process, and score on held-out seeds."""

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
    command,
    field_values,
    parse_settings,
)
from spanlift.errors import SettingsError

FIT_OPTIONS = ("iterations", "batch_size", "lr", "seed", "weight_decay", "validation", "loss")
"""The fit settings `spanlift fit` and `spanlift demo` take as options (the others keep their
defaults; a sweep file's `fit:` section sets any)."""

TEACHER_OPTIONS = ("train_samples", "test_samples")

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
    command(sub, "fit", summary, cmd_fit, add_one_fit_options)
    summary = "fit and compare solvers on the embedded digits backbone"
    command(sub, "demo", summary, cmd_demo, add_demo_options)


def add_one_fit_options(parser: argparse.ArgumentParser) -> None:
    add_solver_options(parser)
    add_fit_options(parser, out="runs/fit")


def add_demo_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nfe", type=int, nargs="+", default=[3], help="NFE budgets")
    add_schedule_option(parser)
    add_fit_options(parser, out="runs/demo")


def add_fit_options(parser: argparse.ArgumentParser, out: str) -> None:
    """The backbone, the fit settings (FIT_OPTIONS), the teacher sets and where results go."""
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
    add_field_options(parser, TeacherConfig, TEACHER_OPTIONS)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="teacher cache folder")
    parser.add_argument("--out", type=Path, default=Path(out), help="folder for checkpoints")


def fit_settings(args: argparse.Namespace) -> Any:
    """The FitSettings the options ask for; bad sample counts and loss options refused."""
    from spanlift.platform.fitting.fit import FitSettings

    if args.train_samples < 1 or args.test_samples < 1:
        raise SettingsError(
            f"--train-samples and --test-samples must be positive, got {args.train_samples} and {args.test_samples}"
        )
    for pair in args.loss_option:
        if not pair.partition("=")[0] or "=" not in pair:
            raise SettingsError(f"--loss-option expects key=value, got {pair!r}")
    return FitSettings(
        **field_values(args, FitSettings, FIT_OPTIONS),
        loss_options=parse_settings(args.loss_option),
    )


def teacher_sets(args: argparse.Namespace, backbone: Any) -> tuple[Any, Any]:
    """(train, test): the teacher's endpoints on the training and the held-out seeds."""
    from spanlift.platform.sampling.teacher import load_or_generate
    from spanlift.seeds import TEST_SEED_OFFSET

    train = load_or_generate(args.cache, backbone, range(args.train_samples))
    test_seeds = range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + args.test_samples)
    return train, load_or_generate(args.cache, backbone, test_seeds)


def cmd_fit(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import compare, format_table
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.loading import build

    spec = SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set))
    settings = fit_settings(args)
    backbone = load_backbone(args.backbone, **parse_settings(args.backbone_option))
    build(spec, backbone)  # reject a bad spec before generating the teacher
    train, test = teacher_sets(args, backbone)
    rows = compare([spec], backbone, train, test, settings, args.out)
    print(format_table(rows))
    if rows[0].checkpoint:
        print(f"checkpoint: {rows[0].checkpoint}")


def cmd_demo(args: argparse.Namespace) -> None:
    from spanlift.backbones import load_backbone
    from spanlift.platform.fitting.compare import compare, format_table
    from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
    from spanlift.solvers import SolverSpec

    settings = fit_settings(args)
    backbone = load_backbone(args.backbone, **parse_settings(args.backbone_option))
    train, test = teacher_sets(args, backbone)
    specs = [
        SolverSpec(name, nfe, args.schedule, settings_)
        for nfe in args.nfe
        for name, settings_ in DEMO_SOLVERS
        if name != "heun" or nfe % 2 == 1  # Heun spends 2N − 1 evaluations
    ]
    grid = args.out / "samples.png"
    rows = compare(specs, backbone, train, test, settings, args.out, grid=grid)
    teacher = f"{DEFAULT_TEACHER.label()}, NFE {DEFAULT_TEACHER.nfe}"
    print(f"\nEndpoint RMSE against the teacher ({teacher}) on {len(test)} held-out seeds:")
    print(format_table(rows))
    print(f"samples (teacher first, same seeds per column): {grid}")
