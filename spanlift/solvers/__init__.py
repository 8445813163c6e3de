"""Solvers for the probability-flow ODE in EDM σ-form. Knows nothing of Ray or MLflow.

Importing this package imports every module in it, so every solver registers itself (a new
solver is found by its file being here); look them up with `SOLVERS.get(name)`.
"""

from spanlift.registry import import_modules
from spanlift.solvers.base import NFECounter, Point, Solver
from spanlift.solvers.checkpoint import read_checkpoint, save_solver
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.spec import SolverSpec, build_solver, solver_settings

import_modules(__name__, __path__)

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
