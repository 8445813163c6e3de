"""Fit (where learnable) and score a list of solvers against the same teacher: the comparison table.

Each solver is fitted on the training seeds, its kept state chosen on the validation seeds, and
scored on both the validation and the held-out test seeds (`spanlift.seeds`), as a sweep does. A
SpanLift whose base is itself learnable and has no `base_checkpoint` is fitted in two stages, as
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
from spanlift.platform.sampling.score import Score, score
from spanlift.platform.sampling.teacher import TeacherSet, supervision_sigmas, teacher_for
from spanlift.platform.sampling.validation_blocks import ValidationBlocks, first_block
from spanlift.platform.tracking.fit_clock import FitClock
from spanlift.solvers import Solver, SolverSpec, read_checkpoint, save_solver
from spanlift.solvers.loading import build


@dataclass
class Row:
    solver: str
    nfe: int
    rmse: float
    fit_seconds: float
    ms_per_image: float
    checkpoint: str = ""
    val_rmse: float | None = None
    seed: int = 0
    spec: SolverSpec | None = None  # what was asked for
    fitted: Fitted | None = None  # the solver as fitted (its curves, its checkpoint)
    scored: Score | None = None  # its errors per test seed, what a run records


def fit_spec(
    spec: SolverSpec,
    backbone: Backbone,
    train: TeacherSet,
    settings: FitSettings,
    workdir: Path,
    progress: bool = True,
    validation: TeacherSet | ValidationBlocks | None = None,
) -> Fitted:
    """The solver of `spec`, fitted on `train` if it has parameters (a base it needs first), its
    kept state chosen on `validation` (default: a held-out part of `train`, `FitSettings`;
    `ValidationBlocks`: seeds added while a comparison is undecided).

    Fitted solvers are kept in the fit cache in `workdir`, so a base or solver already fitted
    the same way, by this comparison or an earlier one, is loaded, not fitted again.
    """
    cache = workdir / "teacher-cache"

    def fit_here(solver: Solver, out: Path) -> Fitted:
        teacher = teacher_for(solver, train, backbone, cache)
        held = held_out_for(solver, validation, backbone, cache)
        result = fit(solver, backbone, teacher, settings, progress=progress, validation=held)
        save_solver(out, solver, metadata=fit_record(result, settings, solver))
        return Fitted.from_checkpoint(solver, out, result.seconds)

    configuration = fit_configuration(spec, backbone, train, settings, validation)
    return FitCache(workdir, configuration).fitted(spec, backbone, fit_here)


def held_out_for(
    solver: Solver,
    validation: TeacherSet | ValidationBlocks | None,
    backbone: Backbone,
    cache: Path,
) -> TeacherSet | ValidationBlocks | None:
    """The validation seeds with what the solver is supervised by (`teacher_for`): a
    trajectory-supervised solver's blocks carry the teacher's states at its grid."""
    if isinstance(validation, ValidationBlocks):
        sigmas = supervision_sigmas(solver)
        return validation.with_states(sigmas) if sigmas else validation
    return None if validation is None else teacher_for(solver, validation, backbone, cache)


def validation_digest(validation: TeacherSet | ValidationBlocks) -> str:
    """The identity of a fit's validation seeds: a set's (`set_digest`; blocks of one block,
    that block's), else the blocks' keys."""
    if isinstance(validation, ValidationBlocks) and validation.count > 1:
        return validation.digest()
    return set_digest(first_block(validation))


def set_digest(teacher: TeacherSet) -> str:
    """A teacher set's identity: its cache key and the digest of its endpoints, so a subset or
    an unsaved set is its own. The endpoints' bytes are hashed where they lie (a mapped entry's
    pages), not copied."""
    endpoints = teacher.endpoints.detach().cpu().contiguous().numpy()
    return digest([teacher.key, hashlib.sha256(endpoints.data).hexdigest()])


def fit_configuration(
    spec: SolverSpec,
    backbone: Backbone,
    train: TeacherSet,
    settings: FitSettings,
    validation: TeacherSet | ValidationBlocks | None = None,
) -> Configuration:
    """What produces `spec`'s fitted weights here: the backbone, the training (and validation)
    teacher sets, the fit settings."""
    held = "" if validation is None else f"|{validation_digest(validation)}"
    sets = set_digest(train) + held
    return Configuration(
        backbone.identity(),
        {},
        spec,
        teacher_identity(train.teacher, sets),
        fit=settings.identity(),
    )


def fit_record(result: FitResult, settings: FitSettings, solver: Solver) -> dict:
    """What a fitted checkpoint keeps of its fit: settings, curves (the validation loss with the
    fit seconds of each point), the kept iteration, how long it ran and what ended it, the states
    it kept on its way (`FitResult.kept`), a two-stage fit's base fit seconds, the gain its
    validation seeds resolve and how many it used."""
    return {
        "fit": settings.to_dict(),
        "losses": result.losses,
        "validation": result.validation,
        "validation_seconds": result.validation_seconds,
        "best_iteration": result.best_iteration,
        "fit_seconds": result.seconds,
        "memory": result.memory,
        "iterations_run": result.iterations_run,
        "stopped_by": result.stopped_by,
        "kept_states": result.kept,
        "base_fit_seconds": base_fit_seconds(solver.spec),
        "validation_resolves": result.validation_resolves,
        "validation_seeds": result.validation_seeds,
    }


def base_fit_seconds(spec: SolverSpec) -> float:
    """The seconds the fitted base of a two-stage solver took, whole (its checkpoint's record,
    its own base's fit included: `FitClock.total`; 0 for a solver on no fitted base, or a base
    checkpoint that records none), so the states of the second stage are timed from the start of
    the whole fit."""
    path = spec.settings.get("base_checkpoint")
    if not path or not Path(path).is_file():
        return 0.0
    return FitClock.of(read_checkpoint(Path(path))["metadata"]).total


def compare(
    specs: list[SolverSpec],
    backbone: Backbone,
    train: TeacherSet,
    test: TeacherSet,
    settings: FitSettings,
    workdir: Path,
    progress: bool = True,
    grid: Path | None = None,
    validation: TeacherSet | ValidationBlocks | None = None,
) -> list[Row]:
    """Fit where learnable (kept state chosen on `validation`), then score each spec on `test`
    (and on `validation`, its first block for `ValidationBlocks`); optionally save a PNG of
    samples."""
    for spec in specs:  # every spec is checked before any work starts
        build(spec, backbone)
    rows, samples = [], {}
    for spec in specs:
        fitted = fit_spec(spec, backbone, train, settings, workdir, progress, validation)
        checkpoint = str(fitted.path or "")
        held = first_block(validation)
        result, images = score(fitted.solver, backbone, test, validation=held)
        rows.append(
            Row(
                spec.label(),
                spec.nfe,
                result.rmse,
                fitted.seconds,
                result.ms_per_image,
                checkpoint,
                result.val_rmse,
                settings.seed,
                spec,
                fitted,
                result,
            )
        )
        samples.update(images)
    if grid:
        save_sample_grid(samples, grid)
    return rows


def format_table(rows: list[Row]) -> str:
    """Rows sorted by NFE then validation RMSE (what a choice reads), as an aligned text table
    with the test RMSE beside it; a seed column when the rows have several fit seeds."""
    width = max([len("solver"), *(len(r.solver) for r in rows)])
    seeded = len({r.seed for r in rows}) > 1
    seed_head = f" {'seed':>4}" if seeded else ""
    header = (
        f"{'solver':<{width}}{seed_head} {'NFE':>3} {'val RMSE':>9} {'test RMSE':>10} "
        f"{'fit s':>7} {'ms/img':>7}"
    )
    lines = [header, "-" * len(header)]
    ordered = sorted(rows, key=lambda r: (r.nfe, r.val_rmse if r.val_rmse is not None else r.rmse))
    for r in ordered:
        seed = f" {r.seed:>4}" if seeded else ""
        val = f"{r.val_rmse:>9.4f}" if r.val_rmse is not None else f"{'-':>9}"
        lines.append(
            f"{r.solver:<{width}}{seed} {r.nfe:>3} {val} {r.rmse:>10.4f} "
            f"{r.fit_seconds:>7.1f} {r.ms_per_image:>7.2f}"
        )
    return "\n".join(lines)
