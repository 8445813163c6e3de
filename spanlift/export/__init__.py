"""Fitted or analytic spanlift solvers for other libraries: `SpanLiftScheduler`, a solver as a
diffusers scheduler (scheduler.py), written by `spanlift export` (docs/export.md).

diffusers is an optional extra: `spanlift.export.scheduler` imports it, this package does not."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("SpanLiftScheduler", "export_diffusers"):
        import importlib

        return getattr(importlib.import_module("spanlift.export.scheduler"), name)
    raise AttributeError(f"module 'spanlift.export' has no attribute {name!r}")
