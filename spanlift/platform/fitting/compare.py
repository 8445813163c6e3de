"""Fit (where learnable) and score a list of solvers against the same teacher: the comparison table.

A SpanLift whose base is itself learnable and has no `base_checkpoint` is fitted in two stages, as
in the paper: the base first, then the operator on the frozen fitted base. Fitted solvers are kept
in the results' fit cache (results/fit_cache.py) in the working folder.
"""

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from spanlift.backbones import Backbone
from spanlift.platform.configuration import Configuration, digest, teacher_identity
from spanlift.platform.evaluation.sample_grid import save_sample_grid
from spanlift.platform.fitting.fit import (
    FitResult,
    FitSettings,
    endpoint_rmse,
    fit,
    on_device,
    rollout,
)
from spanlift.platform.fitting.teacher import TeacherSet, teacher_for
from spanlift.platform.results.fit_cache import FitCache, Fitted
from spanlift.solvers import Solver, SolverSpec, save_solver
from spanlift.solvers.loading import build

GRID_COLUMNS = 8


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


@torch.no_grad()
def latency_ms(
    solver: Solver,
    backbone: Backbone,
    noise: torch.Tensor,
    cond: torch.Tensor | None = None,
    repeats: int = 3,
) -> float:
    """Best-of-`repeats` wall time of one rollout of `noise`, per image, in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        rollout(solver, backbone, noise, cond)
        times.append(time.perf_counter() - start)
    return 1000 * min(times) / len(noise)


@dataclass(frozen=True)
class Score:
    """A solver scored against a teacher set: the comparison's and a sweep trial's numbers."""

    rmse: float
    nfe: int
    ms_per_image: float

    def metrics(self) -> dict[str, float]:
        return {"rmse": self.rmse, "nfe": float(self.nfe), "ms_per_image": self.ms_per_image}


@torch.no_grad()
def score(
    solver: Solver,
    backbone: Backbone,
    test: TeacherSet,
    images: int = GRID_COLUMNS,
    device: str | torch.device = "cpu",
) -> tuple[Score, dict[str, torch.Tensor]]:
    """Endpoint RMSE on `test`, latency per image over 64 seeds, and the first `images` samples
    (uint8) of the teacher and of the solver, for a sample grid."""
    rmse = endpoint_rmse(solver, backbone, test, device=device)
    first = test.subset(slice(0, 64))
    noise, cond = first.noise.to(device), on_device(first.cond, device)
    ms = latency_ms(solver, backbone, noise, cond)
    shown = first.subset(slice(0, images))
    endpoints = rollout(solver, backbone, shown.noise.to(device), on_device(shown.cond, device))
    samples = {
        "teacher": backbone.to_images(shown.endpoints.to(device)).cpu(),
        f"{solver.spec.label()} nfe={solver.nfe}": backbone.to_images(endpoints).cpu(),
    }
    return Score(rmse, solver.nfe, ms), samples


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
