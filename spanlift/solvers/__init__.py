"""Solvers for the probability-flow ODE in EDM σ-form. Knows nothing of Ray or MLflow.

Importing this package registers every solver; look them up with `SOLVERS.get(name)`.
"""

from spanlift.solvers import (  # noqa: F401
    amed,
    deis,
    diffusers_schedulers,
    dlms,
    dpm_solver_pp,
    dyweight,
    epd,
    euler,
    gits,
    gs,
    heun,
    ipndm,
    kdiffusion_samplers,
    ld3,
    pas,
    s4s_alt,
    spanlift,
    unipc,
)
from spanlift.solvers.base import NFECounter, Point, Solver
from spanlift.solvers.checkpoint import read_checkpoint, save_solver
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.spec import SolverSpec, build_solver, solver_settings

__all__ = [
    "SOLVERS",
    "NFECounter",
    "Point",
    "Solver",
    "SolverSpec",
    "build_solver",
    "read_checkpoint",
    "save_solver",
    "solver_settings",
]
