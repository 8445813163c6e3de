"""The solver registry: name → class. Adding a solver is one file and one `register` line."""

from spanlift.registry import Registry

SOLVERS: Registry = Registry("solver")
