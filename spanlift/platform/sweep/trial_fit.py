"""A single-worker fit in the trial's own process, resumable from its state in the sweep's storage,
and the fitted solver scored there too (`InTrialProcess`).

    <sweep>/train/<fitted checkpoint's name>.state.pt      the fit's full state (`FitState`)

The trial holds the worker's CPU (and GPU) share itself, so a one-worker fit costs no Ray Train
controller, placement group or worker group (10–50 s a trial on a laptop, for fits that take
seconds). Every `checkpoint_every` iterations the fit's state is written atomically and published
to the storage (a bucket, when the sweep has one); a trial that died mid-fit and is run again, on
this node or another, continues from it exactly. The state is removed once the fitted solver is
kept in the fit cache.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from spanlift.backbones import Backbone
from spanlift.files import atomic_write
from spanlift.platform.fitting.compare import fit_record
from spanlift.platform.fitting.fit import FitSettings, FitState, fit
from spanlift.platform.results.fit_cache import Fitted
from spanlift.platform.sampling.score import Score, score, score_batch
from spanlift.platform.sampling.teacher import TeacherSet, supervision_sigmas
from spanlift.platform.storage import Storage
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.teacher import SweepTeachers, read_entry
from spanlift.solvers import Solver, save_solver


@dataclass(frozen=True)
class InTrialProcess:
    """Fits and scores a replicate in the trial's own process, on its device (`device`), with the
    backbone loaded there."""

    config: SweepConfig
    teachers: SweepTeachers
    storage: Storage
    backbone: Backbone
    device: torch.device

    def fit_solver(self, solver: Solver, out: Path) -> Fitted:
        """`solver` fitted on the teacher entries it needs (`fit_in_trial`), saved at `out`."""
        entries = self.teachers.for_solver(supervision_sigmas(solver))
        train, validation = read_entry(entries.train), read_entry(entries.validation)
        solver = solver.to(self.device)
        return fit_in_trial(
            solver, self.backbone, train, validation, self.config.fit, self.storage, out
        )

    def score_solver(self, fitted: Fitted) -> tuple[Score, dict[str, torch.Tensor]]:
        """The fitted solver scored on the test and validation seeds (`sampling.score.score`)."""
        test, validation = read_entry(self.teachers.test), read_entry(self.teachers.validation)
        solver, backbone, device = fitted.solver.to(self.device), self.backbone, self.device
        size = score_batch(self.config.evaluation.batch_size, solver, backbone, test, device)
        return score(solver, backbone, test, device=device, validation=validation, batch_size=size)


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
