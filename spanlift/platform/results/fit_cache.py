"""Fitted checkpoints kept by what produced them: one cache for sweeps, comparisons and suites.

    <folder>/<solver>-nfe<N>-<fit key>-<code version>.pt

The fit key is the configuration's (`Configuration.fit_key`: backbone, training teacher set, fit
settings, solver spec), so a changed fit is never served old weights, and the code version keeps
another version's weights out unless reuse across versions is asked for. A SpanLift that needs a
fitted base gets it from the same cache, fitted first if missing (the paper's two-stage fit).
With a bucket storage, `folder` is the bucket's local copy: a kept fit missing here is fetched
from the bucket, a new one published. On one node, one process at a time fits a given solver
(a lock file beside its checkpoint): another that needs it waits and reads the result.
"""

import fcntl
import fnmatch
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spanlift.platform.configuration import Configuration, code_version
from spanlift.platform.storage import Storage
from spanlift.platform.tracking.fit_clock import TOTAL_SECONDS, FitClock
from spanlift.platform.tracking.histories import (
    SECONDS_HISTORY,
    TRAIN_HISTORY,
    VALIDATION_HISTORY,
)
from spanlift.solvers import Solver, SolverSpec, read_checkpoint
from spanlift.solvers.loading import SigmaRange, build, is_learnable, on_fitted_base


@dataclass(frozen=True)
class Fitted:
    """A solver as fitted: built once, with the checkpoint's weights when it has parameters."""

    solver: Solver
    path: Path | None = None  # None: nothing to fit
    seconds: float = 0.0  # fit compute of this call, base included; 0 when taken from the cache
    resumed_from: int = 0  # iteration the last (re)start continued from; 0: a fresh fit
    losses: tuple[float, ...] = ()  # the loss at each iteration of the (last) fit
    validation: dict[int, float] = field(default_factory=dict)  # held-out loss by iteration
    best_iteration: int | None = None  # the iteration whose state was kept
    gpu: dict[str, float] = field(default_factory=dict)  # GPU memory peak and use of the fit
    memory: dict[str, Any] = field(default_factory=dict)  # the fit's memory plan, as recorded
    iterations_run: int | None = None  # iterations the fit ran (None: not recorded)
    stopped_by: str | None = None  # "rule" (stopping rule) or "cap" (iterations)
    validation_seconds: dict[int, float] = field(default_factory=dict)  # fit seconds of each
    # validation, by iteration
    base_seconds: float = 0.0  # a two-stage fit's base fit seconds, as its checkpoint records
    validation_resolves: float | None = None  # the relative gain its validation seeds resolve
    checkpoint_seconds: float = 0.0  # what the fit that made the checkpoint took, base included
    validation_seeds: int | None = None  # the validation seeds its comparisons used

    @classmethod
    def from_checkpoint(
        cls,
        solver: Solver,
        path: Path,
        seconds: float = 0.0,
        resumed_from: int = 0,
        gpu: dict[str, float] | None = None,
    ) -> "Fitted":
        """`solver` with the weights saved in `path`, its curves read from the metadata."""
        saved = read_checkpoint(path)
        solver.load_state_dict(saved["state"])
        metadata = saved["metadata"]
        return cls(
            solver,
            path,
            seconds,
            resumed_from,
            tuple(metadata.get("losses", [])),
            dict(metadata.get("validation", {})),
            metadata.get("best_iteration"),
            dict(gpu or {}),
            dict(metadata.get("memory", {})),
            metadata.get("iterations_run"),
            metadata.get("stopped_by"),
            dict(metadata.get("validation_seconds", {})),
            FitClock.of(metadata).base,
            metadata.get("validation_resolves"),
            FitClock.of(metadata).total,
            metadata.get("validation_seeds"),
        )

    @property
    def spec(self) -> SolverSpec:
        """The spec as fitted: a two-stage SpanLift's names its fitted base's checkpoint."""
        return self.solver.spec

    def metrics(self) -> dict[str, float]:
        """What the run records of the fit: `fit_seconds` is the fit compute of this call (0
        when the fit was taken from the cache); `fit.cached_seconds`, recorded then, what the
        fit that made the checkpoint took (wherever it ran), so the row still shows a cost;
        `fit.total_seconds`, what the whole fit took, a two-stage fit's base included whether
        this call fitted it or took it from the cache (`tracking/fit_clock.py`)."""
        kept = {} if self.best_iteration is None else {"fit_best_iteration": self.best_iteration}
        ran = {} if self.iterations_run is None else {"fit.iterations_run": self.iterations_run}
        if self.validation_resolves is not None:
            ran["fit.validation_resolves"] = self.validation_resolves
        if self.validation_seeds is not None:
            ran["fit.validation_seeds"] = self.validation_seeds
        if not self.seconds and self.checkpoint_seconds:
            ran["fit.cached_seconds"] = self.checkpoint_seconds
        if self.checkpoint_seconds:
            ran[TOTAL_SECONDS] = self.checkpoint_seconds
        return {
            "fit_seconds": self.seconds,
            "fit_resumed_from": float(self.resumed_from),
            **kept,
            **ran,
            **self.gpu,
        }

    def params(self) -> dict[str, Any]:
        """What the run records of how the fit used memory (`MemoryPlan.params`) and what ended
        it (`fit.stopped_by`: "rule" or "cap")."""
        ended = {"fit.stopped_by": self.stopped_by} if self.stopped_by else {}
        return {**self.memory, **ended}

    def histories(self) -> dict[str, Any] | None:
        """The train loss per iteration, the validation loss where it was measured and, at the
        same steps, the seconds since the whole fit started (`fit.seconds`: a two-stage fit's
        base first)."""
        clock = FitClock(self.base_seconds)
        seconds = {i: clock.since_start(s) for i, s in self.validation_seconds.items()}
        curves = {
            TRAIN_HISTORY: self.losses,
            VALIDATION_HISTORY: self.validation,
            SECONDS_HISTORY: seconds,
        }
        return {name: values for name, values in curves.items() if values} or None


FitOne = Callable[[Solver, Path], Fitted]
"""Fits a freshly built learnable solver and saves it at the given path."""


@dataclass(frozen=True)
class FitCache:
    """The fitted checkpoints in `folder` of the configurations `template` stands for: the
    template with any solver spec in its place."""

    folder: Path
    template: Configuration
    reuse_across_versions: bool = False
    storage: Storage | None = None
    """The storage `folder` mirrors (None: the folder alone)."""

    def path(self, spec: SolverSpec, version: str | None = None) -> Path:
        """Where the fitted `spec` is kept (`version` `*`: any code version's)."""
        key = replace(self.template, solver=spec).fit_key()
        return self.folder / f"{spec.name}-nfe{spec.nfe}-{key}-{version or code_version()}.pt"

    def find(self, spec: SolverSpec) -> Path | None:
        """A kept fit of `spec`: this code version's, or any version's when reuse is allowed."""
        path = self.path(spec)
        if self.present(path):
            return path
        if not self.reuse_across_versions:
            return None
        pattern = self.path(spec, "*").name
        names = (
            self.storage.names(self.folder)
            if self.storage
            else [p.name for p in self.folder.glob("*")]
        )
        found = sorted(name for name in names if fnmatch.fnmatch(name, pattern))
        return next(
            (self.folder / name for name in found if self.present(self.folder / name)), None
        )

    def present(self, path: Path) -> bool:
        """Whether the checkpoint is on this node, fetched from the storage if it is only there."""
        return self.storage.fetch(path) if self.storage else path.exists()

    def fitted(self, spec: SolverSpec, backbone: SigmaRange, fit_one: FitOne) -> Fitted:
        """`spec` built once and fitted if it has parameters (base first): taken from the cache,
        or fitted by `fit_one` into it."""
        base_seconds = 0.0

        def fit_base(base: SolverSpec) -> Path:
            nonlocal base_seconds
            fitted = self.fitted(base, backbone, fit_one)
            base_seconds = fitted.seconds
            return fitted.path

        spec = on_fitted_base(spec, backbone, fit_base)
        solver = build(spec, backbone, seed=self.template.fit.get("seed", 0))
        if not is_learnable(solver):
            return Fitted(solver, seconds=base_seconds)
        cached = self.find(spec)
        if cached is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            with one_fit_at_a_time(self.path(spec)):
                cached = self.find(spec)  # kept by another process of this node meanwhile
                if cached is None:
                    fitted = fit_one(solver, self.path(spec))
                    if self.storage:
                        self.storage.publish(fitted.path)
                    return replace(fitted, seconds=base_seconds + fitted.seconds)
        return Fitted.from_checkpoint(solver, cached, base_seconds)


@contextmanager
def one_fit_at_a_time(path: Path) -> Iterator[None]:
    """Hold the lock of the fit kept at `path` on this node: two trials that need the same fit
    (a SpanLift's base and that base's own trial) fit it once, the second waiting for the
    first's result."""
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
