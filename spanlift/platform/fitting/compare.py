"""Fit (where learnable) and score a list of solvers against the same teacher: the comparison table.

A SpanLift whose base is itself learnable and has no `base_checkpoint` is fitted in two stages, as
in the paper: the base first, then the operator on the frozen fitted base. Fitted solvers are kept
in the results' fit cache (results/fit_cache.py) in the working folder.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from spanlift.backbones import Backbone
from spanlift.platform.configuration import Configuration, digest, teacher_identity
from spanlift.platform.fitting.fit import FitResult, FitSettings, fit
from spanlift.platform.results.fit_cache import FitCache, Fitted
from spanlift.platform.sampling.sample_grid import save_sample_grid
from spanlift.platform.sampling.score import score
from spanlift.platform.sampling.teacher import TeacherSet, teacher_for
from spanlift.solvers import Solver, SolverSpec, save_solver
from spanlift.solvers.loading import build


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
) -> Fitted:
    """The solver of `spec`, fitted on `train` if it has parameters (a base it needs first).

    Fitted solvers are kept in the fit cache in `workdir`, so a base or solver already fitted
    the same way, by this comparison or an earlier one, is loaded, not fitted again.
    """

    def fit_here(solver: Solver, out: Path) -> Fitted:
        teacher = teacher_for(solver, train, backbone, workdir / "teacher-cache")
        result = fit(solver, backbone, teacher, settings, progress=progress)
        save_solver(out, solver, metadata=fit_record(result, settings))
        return Fitted.from_checkpoint(solver, out, result.seconds)

    return FitCache(workdir, fit_configuration(spec, backbone, train, settings)).fitted(
        spec, backbone, fit_here
    )


def fit_configuration(
    spec: SolverSpec, backbone: Backbone, train: TeacherSet, settings: FitSettings
) -> Configuration:
    """What produces `spec`'s fitted weights here: the backbone, the training teacher set (its
    cache key and the digest of its endpoints, so a subset or an unsaved set is its own), the
    fit settings."""
    endpoints = hashlib.sha256(
        train.endpoints.detach().cpu().contiguous().numpy().tobytes()
    ).hexdigest()
    return Configuration(
        backbone.identity(),
        {},
        spec,
        teacher_identity(train.teacher, digest([train.key, endpoints])),
        fit=settings.to_dict(),
    )


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
    for spec in specs:
        fitted = fit_spec(spec, backbone, train, settings, workdir, progress)
        checkpoint = str(fitted.path or "")
        result, images = score(fitted.solver, backbone, test)
        rows.append(
            Row(
                spec.label(), spec.nfe, result.rmse, fitted.seconds, result.ms_per_image, checkpoint
            )
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
