"""`spanlift analyze halvorsen | ratio | out-of-span`: each writes `<analysis>.png` and
`<analysis>.csv` to --out (default runs/analyze/<analysis>), prints its table, and unless
--no-tracking records one MLflow run (params, key figures as metrics, both files as artifacts).

    spanlift analyze halvorsen
    spanlift analyze ratio --checkpoint runs/fit/spanlift.pt [--checkpoint …] [--backbone digits]
    spanlift analyze out-of-span --checkpoint A.pt --solver dyweight --nfe 5 --solver heun --nfe 5
"""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanlift.cli.options import (
    add_backbone_options,
    add_schedule_option,
    add_tracking_options,
    command,
    parse_settings,
    positive,
)
from spanlift.cli.paths import FOLDER, INPUT, path_option
from spanlift.errors import CheckpointError, SettingsError

OUT_ROOT = Path("runs") / "analyze"
KEPT = "an analysis writes its table, plot and MLflow run as it ends; run it again for them"


class SolverAction(argparse.Action):
    """`--solver NAME [--nfe N] [--set K=V …]`: each --solver opens an entry that the --nfe and
    --set options after it fill in (before any --solver, they set the defaults of all)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, value: Any, option: Any = None
    ) -> None:
        entries = list(getattr(namespace, "solvers", None) or [])
        if option == "--solver":
            entries.append({"name": value, "nfe": None, "settings": []})
        elif not entries:
            defaults = dict(getattr(namespace, "solver_defaults", None) or {"settings": []})
            if option == "--nfe":
                defaults["nfe"] = value
            else:
                defaults["settings"] = [*defaults["settings"], value]
            namespace.solver_defaults = defaults
        elif option == "--nfe":
            entries[-1] = {**entries[-1], "nfe": value}
        else:
            entries[-1] = {**entries[-1], "settings": [*entries[-1]["settings"], value]}
        namespace.solvers = entries


def add_commands(sub: Any) -> None:
    """The `analyze` command and its analyses, on the subparsers `sub` of `spanlift`."""
    analyze = sub.add_parser("analyze", help="the paper's analyses: a PNG and a CSV each, tracked")
    analyses = analyze.add_subparsers(dest="analysis", required=True)
    add_halvorsen(analyses)
    add_ratio(analyses)
    add_out_of_span(analyses)


def add_halvorsen(analyses: Any) -> None:
    summary = "the linear-span limitation on the Halvorsen ODE (one step, K = 2)"
    command(analyses, "halvorsen", summary, cmd_halvorsen, halvorsen_options, kept=KEPT)


def halvorsen_options(halvorsen: argparse.ArgumentParser) -> None:
    halvorsen.add_argument("--a", type=float, default=1.89, help="Halvorsen's a")
    halvorsen.add_argument(
        "--train-states", type=int, default=2000, help="states the learned updates are fitted on"
    )
    halvorsen.add_argument(
        "--held-out-states", type=int, default=256, help="states the updates are scored on"
    )
    halvorsen.add_argument(
        "--spread",
        type=float,
        default=0.5,
        help="std of the training trajectories' initial points around x(0)",
    )
    halvorsen.add_argument("--hidden", type=int, default=64, help="MLP hidden units")
    halvorsen.add_argument("--seed", type=int, default=0, help="seed of states and fits")
    add_common_options(halvorsen)


def add_ratio(analyses: Any) -> None:
    summary = "SpanLift's ‖P⊥c βΔop‖/‖P⊥c αΔbase‖ per step, c the teacher chord"
    command(analyses, "ratio", summary, cmd_ratio, ratio_options, kept=KEPT)


def ratio_options(ratio: argparse.ArgumentParser) -> None:
    from spanlift.platform.sampling.teacher import DEFAULT_TEACHER

    path_option(
        ratio,
        "--checkpoint",
        INPUT,
        action="append",
        required=True,
        help="a SpanLift checkpoint (spanlift fit --out); repeat for several",
    )
    add_model_options(ratio)
    ratio.add_argument(
        "--teacher-solver", help=f"teacher solver (default {DEFAULT_TEACHER.label()})"
    )
    ratio.add_argument(
        "--teacher-nfe", type=int, help=f"teacher NFE (default {DEFAULT_TEACHER.nfe})"
    )
    ratio.add_argument(
        "--teacher-set", action="append", default=[], metavar="KEY=VALUE", help="teacher setting"
    )
    add_common_options(ratio)


def add_out_of_span(analyses: Any) -> None:
    summary = "‖P⊥Δ‖/‖Δ‖ per step for any solver (Δop for SpanLift), K = 3"
    command(analyses, "out-of-span", summary, cmd_out_of_span, out_of_span_options, kept=KEPT)


def out_of_span_options(span: argparse.ArgumentParser) -> None:
    path_option(
        span, "--checkpoint", INPUT, action="append", default=[], help="a fitted solver; repeatable"
    )
    span.add_argument(
        "--solver",
        action=SolverAction,
        help="a solver built from its settings (not fitted); repeatable, each followed by its "
        "--nfe and --set options",
    )
    span.add_argument("--nfe", type=int, action=SolverAction, help="NFE of the --solver before it")
    span.add_argument(
        "--set",
        "--setting",
        action=SolverAction,
        metavar="KEY=VALUE",
        help="a setting of the --solver before it",
    )
    add_schedule_option(span, "σ grid of the --solver entries")
    add_model_options(span)
    add_common_options(span)
    span.set_defaults(solvers=[], solver_defaults={"settings": []})


def add_common_options(p: argparse.ArgumentParser) -> None:
    name = p.prog.split()[-1]
    path_option(p, "--out", FOLDER, help=f"output folder (default {OUT_ROOT / name})")
    p.add_argument("--experiment", default="analyze", help="MLflow experiment")
    add_tracking_options(p)


def add_model_options(p: argparse.ArgumentParser) -> None:
    add_backbone_options(p)
    p.add_argument(
        "--samples", type=int, default=256, help="held-out samples (the first FID seeds)"
    )
    p.add_argument("--batch-size", type=int, default=256, help="samples per rollout batch")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")


@dataclass
class Output:
    """Where an analysis writes, and the MLflow client it records to (None: not tracked)."""

    folder: Path
    analysis: str
    experiment: str
    client: Any = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, analysis: str) -> "Output":
        """Checks the tracking store before any work, so a bad URI costs no compute."""
        client = None
        if not args.no_tracking:
            from spanlift.platform.tracking.runs import connect
            from spanlift.platform.tracking.store_uri import resolve_tracking_uri

            client = connect(resolve_tracking_uri(args.tracking_uri))
        folder = args.out or OUT_ROOT / analysis
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder, analysis, args.experiment, client)

    @property
    def png(self) -> Path:
        return self.folder / f"{self.analysis}.png"

    @property
    def csv(self) -> Path:
        return self.folder / f"{self.analysis}.csv"

    def record(
        self,
        params: dict[str, Any],
        metrics: dict[str, float],
        histories: dict[str, list[float]] | None = None,
    ) -> None:
        print(f"wrote {self.png}, {self.csv}")
        if self.client is None:
            return
        from spanlift.platform.analysis.record import record_analysis

        run_id = record_analysis(
            self.client,
            self.experiment,
            self.analysis,
            params,
            metrics,
            [self.png, self.csv],
            histories,
        )
        print(
            f"MLflow run {run_id} in experiment {self.experiment!r} at {self.client.tracking_uri}"
        )


def cmd_halvorsen(args: argparse.Namespace) -> None:
    from dataclasses import asdict

    from spanlift.platform.analysis.halvorsen import (
        HalvorsenSetup,
        halvorsen_analysis,
        plot_halvorsen,
    )
    from spanlift.platform.analysis.record import metric_key

    for flag in ("train_states", "held_out_states", "hidden"):
        positive("--" + flag.replace("_", "-"), getattr(args, flag))
    if not args.spread > 0:
        raise SettingsError(f"--spread: expected a positive number, got {args.spread}")
    output = Output.from_args(args, "halvorsen")
    setup = HalvorsenSetup(
        a=args.a,
        train_states=args.train_states,
        held_out_states=args.held_out_states,
        spread=args.spread,
        hidden=args.hidden,
        seed=args.seed,
    )
    result = halvorsen_analysis(setup)
    table = result.table()
    table.to_csv(output.csv, index=False)
    plot_halvorsen(result, output.png)

    ref = result.reference
    print(
        f"Halvorsen a = {setup.a}: one step t = {setup.t_i} → {setup.t_i + setup.h:.1f} "
        f"(h = {setup.h}) from x_i = x({setup.t_i}) = {vector(ref.x[0])}, x(0) = "
        f"{vector(setup.initial)}"
    )
    print(
        f"u_i = {vector(ref.u[0])}, u_i−1 = {vector(ref.u_previous[0])}, "
        f"Δ* = {vector(ref.target[0])}  (‖Δ*‖² = {ref.target[0] @ ref.target[0]:.4f})"
    )
    shown = table.drop(columns=["delta_x", "delta_y", "delta_z"])
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(
        f"floor ‖r⊥‖² = {result.floor:.4f}: no update inside V_i = span(u_i, u_i−1) gets below it "
        f"(held-out mean {result.held_out_floor:.4f})"
    )
    w = result.scalar_weights
    print(
        f"DyWeight-like weights ({w[0]:.4f}, {w[1]:.4f}) and the SpanLift-like residual "
        f"({setup.hidden} tanh units, training RMSE {result.train_fit_rmse:.4f}) fitted on "
        f"{setup.train_states} states; nearest to x_i at distance {result.train_distance:.4f}"
    )
    metrics = {
        "floor": result.floor,
        "held_out_floor": result.held_out_floor,
        "dyweight_w0": w[0],
        "dyweight_w1": w[1],
        "train_fit_rmse": result.train_fit_rmse,
        "train_distance": result.train_distance,
    }
    for row in table.to_dict("records"):
        for column in ("mismatch", "in_span_mismatch", "out_of_span_residual", "held_out_mismatch"):
            metrics[metric_key(column, row["update"])] = row[column]
    params = {k: v for k, v in asdict(setup).items()}
    output.record(params, metrics)


def vector(values: Any) -> str:
    return "(" + ", ".join(f"{v:.4f}" for v in values) + ")"


def model_and_seeds(args: argparse.Namespace) -> tuple[Any, range, Any]:
    """The backbone on the chosen device, the held-out seeds (the first FID seeds), the device."""
    import torch

    from spanlift.backbones import load_backbone
    from spanlift.seeds import FID_FIRST_SEED

    positive("--samples", args.samples)
    positive("--batch-size", args.batch_size)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backbone = load_backbone(args.backbone, **parse_settings(args.backbone_option))
    seeds = range(FID_FIRST_SEED, FID_FIRST_SEED + args.samples)
    return backbone.to(device), seeds, device


def load_checkpoint(path: Path, backbone: Any) -> Any:
    """The solver saved at `path` (spec and weights), built over `backbone`'s σ range."""
    from spanlift.solvers import SolverSpec, read_checkpoint
    from spanlift.solvers.loading import load_solver

    try:
        spec = SolverSpec.from_dict(read_checkpoint(path)["spec"])
    except CheckpointError as exc:  # torch's reason can run over many lines: its first sentence
        raise CheckpointError(str(exc).splitlines()[0].split(". ")[0]) from None
    try:
        solver = load_solver(spec, path, backbone)
    except (RuntimeError, KeyError) as exc:
        reason = str(exc).strip().splitlines()[0][:200]
        raise CheckpointError(
            f"checkpoint {path} ({spec.label()}) does not fit this backbone: {reason}"
        ) from None
    solver.eval()
    return solver


def unique(labels: list[str], hints: list[str]) -> list[str]:
    """`labels`, each repeated one followed by its hint (e.g. the checkpoint's file name)."""
    return [
        f"{label} ({hint})" if labels.count(label) > 1 else label
        for label, hint in zip(labels, hints, strict=True)
    ]


def cmd_ratio(args: argparse.Namespace) -> None:
    from spanlift.platform.analysis.chord_ratio import chord_ratio, chord_table, plot_chord_ratio
    from spanlift.platform.analysis.record import metric_key
    from spanlift.platform.sampling.teacher import DEFAULT_TEACHER, generate_teacher
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.capabilities import HasParts
    from spanlift.solvers.loading import build

    backbone, seeds, device = model_and_seeds(args)
    solvers = []
    for path in args.checkpoint:
        solver = load_checkpoint(path, backbone)
        if not isinstance(solver, HasParts):
            raise SettingsError(
                f"analyze ratio needs SpanLift checkpoints; {path} holds {solver.spec.label()}"
            )
        solvers.append(solver.to(device))
    name = args.teacher_solver or DEFAULT_TEACHER.name
    settings = dict(DEFAULT_TEACHER.settings) if name == DEFAULT_TEACHER.name else {}
    teacher_spec = SolverSpec(
        name,
        positive("--teacher-nfe", args.teacher_nfe or DEFAULT_TEACHER.nfe),
        DEFAULT_TEACHER.schedule,
        {**settings, **parse_settings(args.teacher_set)},
    )
    build(teacher_spec, backbone)  # a bad teacher fails before any work
    output = Output.from_args(args, "ratio")
    teacher = generate_teacher(
        backbone, seeds, teacher_spec, args.batch_size, sys.stderr.isatty(), device
    )
    labels = unique(
        [s.base.name for s in solvers],
        [p.name for p in args.checkpoint],
    )
    noise = teacher.noise.to(device)
    cond = None if teacher.cond is None else teacher.cond.to(device)
    ratios = {
        label: chord_ratio(solver, backbone, noise, teacher.endpoints, cond, args.batch_size)
        for label, solver in zip(labels, solvers, strict=True)
    }
    table = chord_table(ratios)
    table.to_csv(output.csv, index=False)
    plot_chord_ratio(table, output.png)
    print(
        f"‖P⊥c βΔop‖ / ‖P⊥c αΔbase‖ per step (c = teacher endpoint − x_0; teacher "
        f"{teacher_spec.label()} nfe={teacher_spec.nfe}), mean over {len(seeds)} held-out samples"
    )
    wide = table.pivot(index="step", columns="solver", values="ratio")[labels]
    print(wide.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-"))
    metrics, histories = {}, {}
    for label, frame in ratios.items():
        metrics[metric_key("ratio_mean", label)] = frame["ratio"].mean()
        metrics[metric_key("ratio_max", label)] = frame["ratio"].max()
        histories[metric_key("ratio", label)] = frame["ratio"].tolist()
    params = {
        "backbone": args.backbone,
        "backbone_options": ",".join(args.backbone_option),
        "samples": args.samples,
        "teacher": f"{teacher_spec.label()} nfe={teacher_spec.nfe}",
        "checkpoints": ",".join(str(p) for p in args.checkpoint),
        **{
            f"solver/{metric_key(label)}": s.spec.label()
            for label, s in zip(labels, solvers, strict=True)
        },
    }
    output.record(params, metrics, histories)


def out_of_span_label(spec: Any) -> str:
    """`<solver>+<base>` for a solver built around a base (its default base when unset), else
    the spec's label."""
    from spanlift.solvers import SOLVERS, solver_settings

    base = {**solver_settings(SOLVERS.get(spec.name)), **spec.settings}.get("base")
    return f"{spec.name}+{base}" if base else spec.label()


def cmd_out_of_span(args: argparse.Namespace) -> None:
    import torch

    from spanlift.platform.analysis.out_of_span import (
        format_out_of_span,
        out_of_span_table,
        plot_out_of_span,
        update_out_of_span,
    )
    from spanlift.platform.analysis.record import metric_key
    from spanlift.platform.sampling.rollout import seed_noise
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.loading import build

    defaults = args.solver_defaults
    if defaults.get("settings") and not args.solvers:
        raise SettingsError("--set must follow the --solver it sets")
    if not args.checkpoint and not args.solvers:
        raise SettingsError("analyze out-of-span: name at least one --checkpoint or --solver")
    backbone, seeds, device = model_and_seeds(args)
    solvers, labels, hints = [], [], []
    for path in args.checkpoint:
        solver = load_checkpoint(path, backbone)
        solvers.append(solver)
        labels.append(out_of_span_label(solver.spec))
        hints.append(path.name)
    for entry in args.solvers:
        nfe = entry["nfe"] or defaults.get("nfe")
        if nfe is None:
            raise SettingsError(f"--solver {entry['name']}: give its --nfe")
        settings = parse_settings([*defaults["settings"], *entry["settings"]])
        spec = SolverSpec(entry["name"], nfe, args.schedule, settings)
        solvers.append(build(spec, backbone))
        labels.append(out_of_span_label(spec))
        hints.append(f"nfe={nfe}")
    output = Output.from_args(args, "out-of-span")
    noise = seed_noise(seeds, backbone.shape).to(device)
    cond = backbone.conditioning(seeds)
    cond = None if cond is None else cond.to(device)
    labels = unique(labels, hints)
    with torch.no_grad():
        ratios = {
            label: update_out_of_span(solver.to(device), backbone, noise, cond, args.batch_size)
            for label, solver in zip(labels, solvers, strict=True)
        }
    table = out_of_span_table(ratios)
    table.to_csv(output.csv, index=False)
    plot_out_of_span(table, output.png)
    print(
        f"out-of-span ratio ‖P⊥ v‖/‖v‖ per step (v = Δop for SpanLift, the full update Δ "
        f"otherwise; V = span of the last 3 derivatives), mean over {len(seeds)} held-out samples"
    )
    print(format_out_of_span(table))
    metrics, histories = {}, {}
    for label, frame in ratios.items():
        metrics[metric_key("out_of_span_mean", label)] = frame["ratio"].mean()
        histories[metric_key("out_of_span", label)] = frame["ratio"].tolist()
    params = {
        "backbone": args.backbone,
        "backbone_options": ",".join(args.backbone_option),
        "samples": args.samples,
        "checkpoints": ",".join(str(p) for p in args.checkpoint),
        **{
            f"solver/{metric_key(label)}": f"{s.spec.label()} nfe={s.spec.nfe}"
            for label, s in zip(labels, solvers, strict=True)
        },
    }
    output.record(params, metrics, histories)
