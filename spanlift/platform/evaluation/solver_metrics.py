"""A solver's own metrics (`metrics/`, a `SolverMetric`): computed from the solver itself in the
calling process, not from a pass over samples on the evaluators (the span diagnostics)."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanlift.backbones import Backbone
from spanlift.errors import SettingsError
from spanlift.platform.evaluation.metrics import Finished, SolverMetric, chosen
from spanlift.solvers import Solver


def check_solver(metrics: Sequence[str], options: Mapping[str, Any], solver: Solver) -> None:
    """Refuse a solver metric asked for a solver it does not apply to, before any work."""
    for metric in chosen(metrics, options, SolverMetric):
        if not metric.applies_to(solver):
            raise SettingsError(f"--metrics {metric.name}: needs {metric.needs}, got {solver.name}")


def solver_metrics(
    metrics: Sequence[str],
    options: Mapping[str, Any],
    solver: Solver,
    backbone: Backbone,
    folder: Path,
    name: str,
) -> list[Finished]:
    """The solver metrics among `metrics` that apply to `solver`, their files in `folder` named
    after `name`; a metric that does not apply is left out."""
    return [
        metric.of_solver(solver, backbone, folder, name)
        for metric in chosen(metrics, options, SolverMetric)
        if metric.applies_to(solver)
    ]
