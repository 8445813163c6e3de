"""`spanlift export`: a solver as a diffusers scheduler folder (docs/export.md).

    spanlift export RUN_ID --to diffusers DIR        a recorded run: its backbone, its fitted solver
    spanlift export CHECKPOINT --backbone sana --backbone-option path=… --to diffusers DIR
    spanlift export --solver ipndm --nfe 5 --backbone sana --backbone-option … --to diffusers DIR

DIR then loads with `SpanLiftScheduler.from_pretrained(DIR)` (spanlift/export/scheduler.py).
"""

import argparse
from pathlib import Path
from typing import Any

from spanlift.cli.options import (
    add_key_values,
    add_schedule_option,
    add_tracking_uri,
    command,
    parse_settings,
)
from spanlift.cli.paths import writable_folder

FORMATS = ("diffusers",)
DEFAULT_BACKBONE = "digits"


def add_commands(sub: Any) -> None:
    summary = "write a solver (a run's, a checkpoint's or an analytic one) as a diffusers scheduler"
    command(sub, "export", summary, cmd_export, add_export_options)


def add_export_options(parser: argparse.ArgumentParser) -> None:
    from spanlift.backbones import BACKBONES
    from spanlift.cli.options import among

    parser.add_argument(
        "source",
        nargs="?",
        help="an MLflow run id (a leaderboard row's run_id) or a solver checkpoint (.pt); "
        "none with --solver and --nfe",
    )
    parser.add_argument(
        "--to",
        nargs=2,
        required=True,
        metavar=("FORMAT", "DIR"),
        help=f"the format ({', '.join(FORMATS)}) and the folder to write",
    )
    parser.add_argument(
        "--backbone",
        help=f"the backbone the solver samples ({among(BACKBONES)}; default {DEFAULT_BACKBONE}); "
        "a run names its own",
    )
    add_key_values(
        parser, "--backbone-option", "backbone option, e.g. path=<folder> (see spanlift backbones)"
    )
    parser.add_argument("--solver", help="an analytic or untrained solver, with --nfe")
    parser.add_argument("--nfe", type=int, help="model evaluations the solver spends")
    add_schedule_option(parser)
    add_key_values(parser, "--set", "solver setting (see `spanlift solvers`)")
    add_tracking_uri(parser)


def cmd_export(args: argparse.Namespace) -> None:
    from spanlift.errors import SettingsError

    kind, folder = args.to
    if kind not in FORMATS:
        raise SettingsError(f"--to {kind}: unknown format; one of: {', '.join(FORMATS)}")
    writable_folder("--to diffusers", folder)
    if args.source is None and (args.solver is None or args.nfe is None):
        raise SettingsError("export needs a RUN_ID, a CHECKPOINT, or --solver NAME --nfe N")
    if args.source is not None and args.solver is not None:
        raise SettingsError(
            f"export {args.source}: the run or checkpoint names its solver; leave out --solver"
        )
    from spanlift.export.scheduler import export_diffusers

    solver, backbone = solver_and_backbone(args)
    scheduler = export_diffusers(solver, backbone, Path(folder))
    form = scheduler.form
    print(
        f"wrote {folder}: {scheduler.spec.label()} nfe={solver.spec.nfe} for {backbone.name} "
        f"({form.parameterisation}, latents {'×'.join(map(str, form.shape))})"
    )
    print(
        f"use it: pipe.scheduler = SpanLiftScheduler.from_pretrained({str(folder)!r}); "
        f"pipe(prompt, num_inference_steps={solver.spec.nfe})"
    )


def solver_and_backbone(args: argparse.Namespace) -> tuple[Any, Any]:
    """The solver to export and its loaded backbone, from a run, a checkpoint or a spec."""
    from spanlift.backbones import load_backbone
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.checkpoint import read_checkpoint
    from spanlift.solvers.loading import load_solver

    if args.source is not None and not Path(args.source).is_file():
        return from_run(args)
    backbone = load_backbone(
        args.backbone or DEFAULT_BACKBONE, **parse_settings(args.backbone_option)
    )
    if args.source is None:
        spec = SolverSpec(args.solver, args.nfe, args.schedule, parse_settings(args.set))
        return load_solver(spec, None, backbone), backbone
    checkpoint = Path(args.source)
    spec = SolverSpec.from_dict(read_checkpoint(checkpoint)["spec"])
    return load_solver(spec, checkpoint, backbone), backbone


def from_run(args: argparse.Namespace) -> tuple[Any, Any]:
    """A recorded run's solver (its checkpoint, or its spec for an analytic one) and backbone."""
    import tempfile

    from spanlift.backbones import load_backbone
    from spanlift.errors import SettingsError
    from spanlift.platform.tracking.run_files import checkpoint_of, resolved_of
    from spanlift.platform.tracking.runs import connect
    from spanlift.platform.tracking.store_uri import resolve_tracking_uri
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.loading import load_solver

    client = connect(resolve_tracking_uri(args.tracking_uri), read_only=True)
    try:
        client.get_run(args.source)
    except Exception:  # MLflow raises its own exception types for an unknown id
        raise SettingsError(
            f"{args.source!r} is neither a checkpoint file nor a run at {client.tracking_uri}"
        ) from None
    if args.backbone is not None or args.backbone_option:
        raise SettingsError(
            f"run {args.source} names its backbone; leave out --backbone and --backbone-option"
        )
    with tempfile.TemporaryDirectory() as folder:
        resolved = resolved_of(client, args.source, Path(folder))
        backbone = load_backbone(resolved.backbone, **resolved.backbone_options)
        spec = SolverSpec.from_dict(resolved.solver)
        checkpoint = checkpoint_of(client, args.source, Path(folder))
        return load_solver(spec, checkpoint, backbone), backbone
