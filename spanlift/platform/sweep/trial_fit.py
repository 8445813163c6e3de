"""A single-worker fit in the trial's own process, resumable from its state in the sweep's storage.

    <sweep>/train/<fitted checkpoint's name>.state.pt      the fit's full state (`FitState`)

The trial holds the worker's CPU (and GPU) share itself, so a one-worker fit costs no Ray Train
controller, placement group or worker group (10–50 s a trial on a laptop, for fits that take
seconds). Every `checkpoint_every` iterations the fit's state is written atomically and published
to the storage (a bucket, when the sweep has one); a trial that died mid-fit and is run again, on
this node or another, continues from it exactly. The state is removed once the fitted solver is
kept in the fit cache.
"""

from pathlib import Path

import torch

from spanlift.backbones import Backbone
from spanlift.files import atomic_write
from spanlift.platform.fitting.compare import fit_record
from spanlift.platform.fitting.fit import FitSettings, FitState, fit
from spanlift.platform.results.fit_cache import Fitted
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.storage import Storage
from spanlift.solvers import Solver, save_solver


def state_path(storage: Storage, out: Path) -> Path:
    """Where the fit that will be saved at `out` keeps its state while it runs."""
    return storage.local / "train" / f"{out.stem}.state.pt"


def read_state(storage: Storage, path: Path) -> FitState | None:
    """The state an earlier attempt left (fetched from the storage), or None."""
    if not storage.fetch(path):
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def fit_in_trial(
    solver: Solver,
    backbone: Backbone,
    train: TeacherSet,
    validation: TeacherSet,
    settings: FitSettings,
    storage: Storage,
    out: Path,
) -> Fitted:
    """Fit `solver` here, continuing an earlier attempt's state when there is one; save it to
    `out` and return it as fitted."""
    path = state_path(storage, out)
    resume = read_state(storage, path)

    def keep_state(metrics: dict[str, float], state: FitState | None) -> None:
        if state is None:
            return
        with atomic_write(path) as partial:
            torch.save(state, partial)
        storage.publish(path)

    result = fit(
        solver,
        backbone,
        train,
        settings,
        report=keep_state,
        progress=False,
        resume=resume,
        validation=validation,
    )
    with atomic_write(out) as partial:
        save_solver(partial, solver, metadata=fit_record(result, settings, solver))
    resumed_from = resume["iteration"] if resume else 0
    storage.discard(path)
    return Fitted.from_checkpoint(solver, out, result.seconds, resumed_from)
