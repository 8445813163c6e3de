"""Solvers for a backbone: built from a spec, loaded from a checkpoint, and their fitting needs.

A backbone only lends its σ range and channel count here (`sigma_min`, `sigma_max`, `shape`), so
this module needs no backbone import; fitting, sweeps and evaluators all build solvers through it.
"""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from spanlift.solvers.base import Solver
from spanlift.solvers.checkpoint import read_checkpoint
from spanlift.solvers.on_base import searches
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.spec import SolverSpec, build_solver, solver_settings


class SigmaRange(Protocol):
    sigma_min: float
    sigma_max: float
    shape: tuple[int, ...]


def build(spec: SolverSpec, backbone: SigmaRange, seed: int = 0) -> Solver:
    """The solver of `spec` over the backbone's σ range and channels, its initial weights drawn
    from `seed` (`build_solver`)."""
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0], seed)


def load_solver(spec: SolverSpec, checkpoint: Path | None, backbone: SigmaRange) -> Solver:
    """The solver of `spec`, or the one saved in `checkpoint` (its spec and weights) when given.

    A checkpoint holds every weight of the solver, a fitted base's too, so it is built without
    reading the base's own file (`base_checkpoint` names where the base came from, which may be
    on another machine or folder): a checkpoint loads wherever it is put."""
    if checkpoint is None:
        return build(spec, backbone)
    state = read_checkpoint(checkpoint)
    saved = SolverSpec.from_dict(state["spec"])
    standalone = {k: v for k, v in saved.settings.items() if k != "base_checkpoint"}
    solver = build(replace(saved, settings=standalone), backbone)
    solver.load_state_dict(state["state"])
    solver.spec = saved
    return solver


def is_learnable(solver: Solver) -> bool:
    """Whether a fit changes the solver: it has trainable parameters, or a search (GITS)."""
    return searches(solver) or any(p.requires_grad for p in solver.parameters())


def base_spec(spec: SolverSpec) -> SolverSpec:
    """The spec of the base of a solver built on one (settings `base`, `base_settings`)."""
    settings = {**solver_settings(SOLVERS.get(spec.name)), **spec.settings}
    return SolverSpec(
        settings["base"], spec.nfe, spec.schedule, dict(settings["base_settings"] or {})
    )


def needs_fitted_base(spec: SolverSpec, backbone: SigmaRange) -> bool:
    """A solver that loads its frozen base from `base_checkpoint` (SpanLift), given none, on a
    learnable base (DyWeight): the paper's two-stage fit, the base first."""
    settings = {**solver_settings(SOLVERS.get(spec.name)), **spec.settings}
    if "base_checkpoint" not in settings or settings["base_checkpoint"]:
        return False
    if not settings.get("freeze_base", True):
        return False
    return is_learnable(build(base_spec(spec), backbone))


def on_fitted_base(
    spec: SolverSpec, backbone: SigmaRange, fit_base: Callable[[SolverSpec], Path]
) -> SolverSpec:
    """`spec`, or for a solver that needs a fitted base, `spec` on the checkpoint `fit_base`
    returns for its base spec: the paper's two-stage fit (the base first, then the operator on
    the frozen fitted base)."""
    if not needs_fitted_base(spec, backbone):
        return spec
    base = fit_base(base_spec(spec))
    return replace(spec, settings={**spec.settings, "base_checkpoint": str(base)})
