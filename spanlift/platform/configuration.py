"""What produced a result, as one key: the identity of fitted weights and of MLflow runs.

    fit key  = hash(backbone, training teacher set, fit settings, workers, solver spec)
    run key  = hash(fit key parts, test teacher set, evaluation settings, given checkpoint)

The teacher part is always `teacher_identity(solver, train, test)`: the teacher solver, and the
training and test sets where the result has them (a sweep names its cache entries, the nowcast
suite its number of training windows, `spanlift eval` neither).

A fitted checkpoint is cached under its fit key (evaluation settings do not change the weights);
an MLflow run is found again by its run key. Both are looked up only among results made by the
same version of the code (`code_version`, stored beside them), unless the user reuses results
across versions on purpose.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import spanlift
from spanlift.solvers import SolverSpec

CODE_VERSION_ENV = "SPANLIFT_CODE_VERSION"
RESULT_CODE = ("solvers", "backbones", "platform/fitting", "platform/sweep/train_worker.py")
"""The code that determines a fitted solver and its scores: any change to it is a new version."""


def digest(parts: Any, length: int = 20) -> str:
    """A short SHA-256 of JSON-able `parts` (keys sorted)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@cache
def code_version() -> str:
    """A hash of the source files in RESULT_CODE, or `$SPANLIFT_CODE_VERSION` when set (a
    cluster whose nodes run one release can pin it)."""
    pinned = os.environ.get(CODE_VERSION_ENV)
    if pinned:
        return pinned
    root = Path(spanlift.__file__).parent
    files = sorted(
        path
        for part in RESULT_CODE
        for path in ([root / part] if part.endswith(".py") else (root / part).rglob("*.py"))
    )
    sha = hashlib.sha256()
    for path in files:
        sha.update(str(path.relative_to(root)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:12]


def teacher_identity(
    solver: SolverSpec, train: str | int | None = None, test: str | None = None
) -> dict[str, Any]:
    """The teacher part of a configuration: its solver, and the training and test sets (by cache
    entry or size) when the result has them; absent sets are left out, so keys stay as they were."""
    sets = {"train": train, "test": test}
    return {"solver": solver.to_dict(), **{k: v for k, v in sets.items() if v is not None}}


@dataclass(frozen=True)
class Configuration:
    """Everything that produces a result, as plain data."""

    backbone: str
    backbone_options: dict[str, Any]
    solver: SolverSpec
    teacher: dict[str, Any]  # `teacher_identity(...)`
    fit: dict[str, Any] = field(default_factory=dict)  # {}: nothing is fitted
    evaluation: dict[str, Any] = field(default_factory=dict)
    checkpoint: str = ""  # SHA-256 of a checkpoint given by the user

    def _fit_parts(self) -> dict[str, Any]:
        spec = self.solver
        return {
            "backbone": [self.backbone, self.backbone_options],
            "teacher": {k: v for k, v in self.teacher.items() if k != "test"},
            "fit": self.fit,
            "solver": [spec.name, spec.nfe, spec.schedule, spec.key()],
        }

    def fit_key(self) -> str:
        """The identity of the fitted weights."""
        return digest(self._fit_parts())

    def _run_parts(self) -> dict[str, Any]:
        return {
            **self._fit_parts(),
            "test": self.teacher.get("test", ""),
            "evaluation": self.evaluation,
            "checkpoint": self.checkpoint,
        }

    def key(self) -> str:
        """The identity of the evaluated result: the MLflow run."""
        return digest(self._run_parts())

    def replicate_key(self) -> str:
        """The identity of the result up to the fit seed: the runs that are replicates of one
        configuration share it."""
        parts = self._run_parts()
        parts["fit"] = {k: v for k, v in self.fit.items() if k != "seed"}
        return digest(parts)
