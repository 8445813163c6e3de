"""The solver registry: name → class. Adding a solver is one file in this package with one
`register` line; the registration names the class (`Solver.name`)."""

from spanlift.registry import ClassRegistry

SOLVERS: ClassRegistry = ClassRegistry("solver")
