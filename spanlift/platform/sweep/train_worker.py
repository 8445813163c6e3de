"""The Ray Train worker loop: the core `fit` on one rank, with Ray checkpoints and resume.

Every rank loads the backbone and the sweep's training and validation teacher sets, builds the solver and calls `fit`
(which wraps it in DDP: gloo on CPU, NCCL on GPU). Rank 0 saves the fit state as a
`ray.train.Checkpoint` every `checkpoint_every` iterations, and the metrics (loss, lr) go to Tune
with it; after a worker dies, Ray Train restarts
the group and every rank continues from that state. A diverged fit is reported, not raised, so
Ray Train does not retry a deterministic failure; the trial turns it into a failed trial.
A worker fetches what it reads (the teacher entry, a fitted base) from the sweep's storage when it
is a bucket, and on a GPU reports its memory peak and utilisation with its metrics.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray.train
import ray.train.torch
import torch

from spanlift.backbones import load_backbone
from spanlift.errors import TrainingDivergedError
from spanlift.platform.fitting.compare import base_fit_seconds
from spanlift.platform.fitting.fit import Best, FitSettings, FitState, fit, validation_resolves
from spanlift.platform.sampling.teacher import read_teacher
from spanlift.platform.storage import Storage
from spanlift.platform.sweep.gpu_telemetry import GpuTelemetry
from spanlift.platform.sweep.teacher import FitTeachers
from spanlift.solvers import Solver, SolverSpec, build_solver, save_solver

STATE_FILE = "fit_state.pt"
SOLVER_FILE = "solver.pt"


def load_fit_state(checkpoint: ray.train.Checkpoint | None) -> FitState | None:
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return torch.load(Path(folder) / STATE_FILE, map_location="cpu", weights_only=True)


def fit_worker(config: dict[str, Any]) -> None:
    """`train_loop_per_worker` of the trial's TorchTrainer; `config` is `fit_loop_config(...)`."""
    device = ray.train.torch.get_device()
    backbone = load_backbone(config["backbone"], **config["backbone_options"]).to(device)
    spec = SolverSpec.from_dict(config["spec"])
    storage: Storage = config["storage"]
    storage.fetch_stored(spec.settings.get("base_checkpoint"))
    for entry in (config["teacher"], config["validation"]):
        storage.fetch_stored(entry)
    settings = FitSettings(**config["fit"])
    solver = build_solver(
        spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0], settings.seed
    ).to(device)
    teacher = read_teacher(Path(config["teacher"]))
    validation = read_teacher(Path(config["validation"]))
    resume = load_fit_state(ray.train.get_checkpoint())
    resumed_from = resume["iteration"] if resume else 0
    is_chief = ray.train.get_context().get_world_rank() == 0
    gpu = GpuTelemetry(torch.device(device))
    report = Reporter(solver, gpu, resumed_from, is_chief)
    try:
        with gpu:
            fit(
                solver,
                backbone,
                teacher,
                settings,
                report=report,
                progress=False,
                resume=resume,
                validation=validation,
            )
    except TrainingDivergedError as exc:
        report.diverged(exc)


@dataclass(frozen=True)
class Reporter:
    """How a rank tells Ray Train of its fit: the chief with a checkpoint of the fit state and
    the solver, every rank with the metrics (GPU telemetry and where the fit resumed from)."""

    solver: Solver
    gpu: GpuTelemetry
    resumed_from: int
    is_chief: bool

    def __call__(self, metrics: dict[str, float], state: FitState | None) -> None:
        # Each ray.train.report waits for the controller to collect it (it polls every ~2 s),
        # so metrics travel only with checkpoints: every `checkpoint_every` iterations.
        if state is None:
            return
        metrics = {**metrics, **self.gpu.metrics(), "resumed_from": self.resumed_from}
        if not self.is_chief:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state, Path(folder) / STATE_FILE)
            history = {
                "losses": state["losses"],
                "fit_seconds": state["seconds"],
                "validation": state["validation"],
                "validation_seconds": state["validation_seconds"],
                "best_iteration": state["best"]["iteration"],
                "memory": state["memory"],
                "iterations_run": state["iteration"],
                "stopped_by": state["stopped_by"],
                "kept_states": state["kept"],
                "base_fit_seconds": base_fit_seconds(self.solver.spec),
                "validation_resolves": validation_resolves(Best.from_dict(state["best"])),
            }
            save_solver(Path(folder) / SOLVER_FILE, self.solver, metadata=history)
            ray.train.report(
                {**metrics, "fit_seconds": state["seconds"]},
                checkpoint=ray.train.Checkpoint.from_directory(folder),
            )

    def diverged(self, exc: TrainingDivergedError) -> None:
        """Report a fit that diverged: Ray Train's result keeps the metrics of the last
        checkpointed report, so the chief attaches one."""
        metrics = {"diverged": str(exc), "resumed_from": self.resumed_from}
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "diverged.txt").write_text(str(exc))
            checkpoint = ray.train.Checkpoint.from_directory(folder) if self.is_chief else None
            ray.train.report(metrics, checkpoint=checkpoint)


def fit_loop_config(
    spec: SolverSpec,
    backbone: str,
    options: dict,
    entries: FitTeachers,
    fit: FitSettings,
    storage: Storage,
) -> dict[str, Any]:
    """The workers' `train_loop_config`: what they load (`entries`: the training and validation
    teacher entries, `sweep.teacher.FitTeachers`) and how they fit."""
    return {
        "storage": storage,
        "spec": spec.to_dict(),
        "backbone": backbone,
        "backbone_options": options,
        "teacher": str(entries.train),
        "validation": str(entries.validation),
        "fit": fit.to_dict(),
    }
