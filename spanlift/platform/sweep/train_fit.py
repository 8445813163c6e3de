"""A fit on Ray Train workers (`workers` > 1): a TorchTrainer of DDP ranks, resumable.

The trial's process starts the trainer and waits for it; the workers run `train_worker.fit_worker`
(gloo on CPU, NCCL on GPU) and report checkpoints to Ray Train, which restarts a worker group that
lost a worker from the newest one. The fitted solver is then scored on the sweep's evaluator
actors (`OnRayTrain`): the trial's process holds no GPU. A single-worker fit runs in the trial's
own process instead (`trial_fit.py`): Ray Train's controller and worker group buy nothing for one
worker.
"""

import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from spanlift.errors import TrainingDivergedError
from spanlift.files import atomic_write
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.results.fit_cache import Fitted
from spanlift.platform.sampling.score import Score
from spanlift.platform.sampling.teacher import supervision_sigmas
from spanlift.platform.storage import Storage
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.teacher import SweepTeachers
from spanlift.platform.sweep.train_worker import SOLVER_FILE, fit_loop_config, fit_worker
from spanlift.solvers import Solver

TRAIN_CHECKPOINTS_KEPT = 2
"""Ray Train checkpoints kept per fit: the newest to resume from, and one before it."""


@dataclass(frozen=True)
class OnRayTrain:
    """Fits a replicate on Ray Train workers and scores it on the sweep's evaluator actors."""

    config: SweepConfig
    teachers: SweepTeachers
    storage: Storage
    evaluators: EvaluatorPool

    def fit_solver(self, solver: Solver, out: Path) -> Fitted:
        """`solver` fitted by a TorchTrainer (`fit_on_ray_train`), saved at `out`."""
        return fit_on_ray_train(solver, self.config, self.teachers, self.storage, out)

    def score_solver(self, fitted: Fitted) -> tuple[Score, dict[str, torch.Tensor]]:
        """The fitted solver scored on an evaluator (`Evaluator.score`)."""
        test, validation = self.teachers.test, self.teachers.validation
        return self.evaluators.call("score", fitted.spec, fitted.path, test, validation)


def fit_on_ray_train(
    solver: Solver, config: SweepConfig, teachers: SweepTeachers, store: Storage, out: Path
) -> Fitted:
    """Fit `solver` with a TorchTrainer (resuming its earlier attempt) on the teacher entries it
    needs (with the teacher's states at its grid when it is trajectory-supervised); save the
    result to `out` and load it into `solver`."""
    resources, spec = config.resources, solver.spec
    entries = teachers.for_solver(supervision_sigmas(solver))
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        fit_worker,
        train_loop_config=fit_loop_config(
            spec, config.backbone, config.backbone_options, entries, config.fit, store
        ),
        scaling_config=ScalingConfig(
            num_workers=resources.workers,
            use_gpu=resources.use_gpu,
            resources_per_worker=resources.per_worker(),
        ),
        run_config=RunConfig(
            name=f"fit-{out.stem}-{trial_id}",
            **store.ray_storage("train"),
            failure_config=FailureConfig(max_failures=resources.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=TRAIN_CHECKPOINTS_KEPT),
            callbacks=[TuneReportCallback()],
        ),
    )
    result = trainer.fit()
    if "diverged" in (result.metrics or {}):
        raise TrainingDivergedError(result.metrics["diverged"])
    with result.checkpoint.as_directory() as folder, atomic_write(out) as partial:
        shutil.copyfile(Path(folder) / SOLVER_FILE, partial)
    seconds, resumed_from = (
        float(result.metrics["fit_seconds"]),
        int(result.metrics["resumed_from"]),
    )
    gpu = {k: float(v) for k, v in result.metrics.items() if k.startswith("gpu_")}
    return Fitted.from_checkpoint(solver, out, seconds, resumed_from, gpu)
