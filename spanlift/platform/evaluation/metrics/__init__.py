"""Evaluation metrics by name, as a sweep's `evaluation.metrics` and `spanlift eval --metrics`
name them: one module each in this package, found when it is imported, so adding one is adding
its file (`base.py`: their shape; docs/evaluation.md: how to add one)."""

from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    EvaluationMetric,
    Finished,
    Options,
    Row,
    SampleMetric,
    SolverMetric,
    Traits,
    chosen,
    made,
    option_owner,
    option_values,
    path_fields,
)
from spanlift.registry import import_modules

import_modules(__name__, __path__)

__all__ = [
    "METRICS",
    "Batch",
    "Done",
    "EvaluationMetric",
    "Finished",
    "Options",
    "Row",
    "SampleMetric",
    "SolverMetric",
    "Traits",
    "chosen",
    "made",
    "option_owner",
    "option_values",
    "path_fields",
]
