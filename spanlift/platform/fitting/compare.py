"""Fit (where learnable) and score a list of solvers against the same teacher: the comparison table.

A SpanLift whose base is itself learnable (DyWeight) and has no `base_checkpoint` is fitted in two
stages, as in the paper: the base first, then the operator on the frozen fitted base.
"""

from dataclasses import dataclass
from pathlib import Path

from spanlift.backbones import Backbone
from spanlift.platform.fitting.fit import FitResult, FitSettings, fit
from spanlift.platform.sampling.sample_grid import save_sample_grid
from spanlift.platform.sampling.score import score
from spanlift.platform.sampling.teacher import TeacherSet, teacher_for
from spanlift.solvers import Solver, SolverSpec, read_checkpoint, save_solver
from spanlift.solvers.loading import build, is_learnable, on_fitted_base


@dataclass
class Row:
    solver: str
    nfe: int
    rmse: float
    fit_seconds: float
    ms_per_image: float
    checkpoint: str = ""


def fit_spec(
    spec: SolverSpec,
    backbone: Backbone,
    train: TeacherSet,
    settings: FitSettings,
    workdir: Path,
    progress: bool = True,
    fitted: dict[str, Path] | None = None,
) -> tuple[Solver, float]:
    """The solver of `spec`, fitted if it has parameters; returns it and the fit time in seconds.

    Fitted solvers are checkpointed under `workdir` and recorded in `fitted` (spec key → path), so
    a base that was already fitted in this comparison is loaded, not fitted again.
    """
    fitted = {} if fitted is None else fitted
    seconds, requested = 0.0, spec

    def fit_base(base: SolverSpec) -> Path:
        nonlocal seconds
        if base.key() not in fitted:
            seconds = fit_spec(base, backbone, train, settings, workdir, progress, fitted)[1]
        return fitted[base.key()]

    spec = on_fitted_base(spec, backbone, fit_base)
    solver = build(spec, backbone)
    if spec.key() in fitted:
        solver.load_state_dict(read_checkpoint(fitted[spec.key()])["state"])
    elif is_learnable(solver):
        teacher = teacher_for(solver, train, backbone, workdir / "teacher-cache")
        result = fit(solver, backbone, teacher, settings, progress=progress)
        seconds += result.seconds
        fitted[spec.key()] = save_solver(
            workdir / f"{spec.name}-nfe{spec.nfe}-{spec.key()}.pt",
            solver,
            metadata=fit_record(result, settings),
        )
    if spec.key() in fitted:  # also under the spec asked for, without the added base_checkpoint
        fitted[requested.key()] = fitted[spec.key()]
    return solver, seconds


def fit_record(result: FitResult, settings: FitSettings) -> dict:
    """What a fitted checkpoint keeps of its fit: settings, curves, the kept iteration."""
    return {
        "fit": settings.to_dict(),
        "losses": result.losses,
        "validation": result.validation,
        "best_iteration": result.best_iteration,
        "fit_seconds": result.seconds,
    }


def compare(
    specs: list[SolverSpec],
    backbone: Backbone,
    train: TeacherSet,
    test: TeacherSet,
    settings: FitSettings,
    workdir: Path,
    progress: bool = True,
    grid: Path | None = None,
) -> list[Row]:
    """Fit where learnable, then score each spec on `test`; optionally save a PNG of samples."""
    for spec in specs:  # every spec is checked before any work starts
        build(spec, backbone)
    rows, samples = [], {}
    fitted: dict[str, Path] = {}
    for spec in specs:
        solver, seconds = fit_spec(spec, backbone, train, settings, workdir, progress, fitted)
        checkpoint = str(fitted.get(spec.key(), ""))
        result, images = score(solver, backbone, test)
        rows.append(
            Row(spec.label(), solver.nfe, result.rmse, seconds, result.ms_per_image, checkpoint)
        )
        samples.update(images)
    if grid:
        save_sample_grid(samples, grid)
    return rows


def format_table(rows: list[Row]) -> str:
    """Rows sorted by NFE then RMSE, as an aligned text table."""
    width = max([len("solver"), *(len(r.solver) for r in rows)])
    header = f"{'solver':<{width}} {'NFE':>3} {'RMSE vs teacher':>16} {'fit s':>7} {'ms/img':>7}"
    lines = [header, "-" * len(header)]
    for r in sorted(rows, key=lambda r: (r.nfe, r.rmse)):
        lines.append(
            f"{r.solver:<{width}} {r.nfe:>3} {r.rmse:>16.4f} {r.fit_seconds:>7.1f} {r.ms_per_image:>7.2f}"
        )
    return "\n".join(lines)
