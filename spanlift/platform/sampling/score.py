"""A solver scored against teacher sets: endpoint errors per seed, RMSE, latency, sample images.

    e_s  = sqrt(mean over pixels (Φ_S(x_s) − Φ*(x_s))²)     the error of seed s
    RMSE = sqrt(mean_s e_s²)                                 over the teacher set's seeds

On the test seeds the score reports RMSE, the median and 90th percentile of e_s and keeps every
e_s (a run stores them, so two solvers can be compared on the same seeds); on the validation
seeds, the RMSE every choice is made on (`val_rmse`). The comparison table and a sweep trial
report these numbers.
"""

import math
import time
from dataclasses import dataclass

import torch

from spanlift.backbones import Backbone
from spanlift.platform.sampling.rollout import on_device, rollout
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.sampling.tensor_memory import resolved_batch
from spanlift.solvers import Solver

GRID_COLUMNS = 8
"""Samples per solver in a sample grid."""


@torch.no_grad()
def sample_errors(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """e_s = sqrt(mean over pixels (Φ_S(x_s) − Φ*(x_s))²) for every seed of the teacher set
    (float64, in the set's order)."""
    errors = []
    for start in range(0, len(teacher), batch_size):
        part = teacher.subset(slice(start, start + batch_size))
        endpoint = rollout(solver, backbone, part.noise.to(device), on_device(part.cond, device))
        error = (endpoint - part.endpoints.to(device)).double()
        errors.append(error.square().flatten(1).mean(dim=1).sqrt().cpu())
    return torch.cat(errors)


def score_batch(
    setting: int | str,
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    device: str | torch.device = "cpu",
) -> int:
    """Seeds rolled out at once when scoring: `setting`, or for "auto" the most (up to 256)
    a rollout holds on the device (`tensor_memory.PassCost`)."""

    def rollout_of(samples: int) -> torch.Tensor:
        return sample_errors(solver, backbone, teacher.subset(slice(0, samples)), samples, device)

    return resolved_batch(setting, rollout_of, len(teacher), torch.device(device), 256)


def rmse_of(errors: torch.Tensor) -> float:
    """RMSE = sqrt(mean_s e_s²) from the per-seed errors (every seed has as many pixels)."""
    return math.sqrt(float(errors.square().mean()))


def endpoint_rmse(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
) -> float:
    """sqrt(mean (Φ_S(x_T) − Φ*(x_T))²) over a teacher set."""
    return rmse_of(sample_errors(solver, backbone, teacher, batch_size, device))


@torch.no_grad()
def latency_ms(
    solver: Solver,
    backbone: Backbone,
    noise: torch.Tensor,
    cond: torch.Tensor | None = None,
    repeats: int = 3,
) -> float:
    """Best-of-`repeats` wall time of one rollout of `noise`, per image, in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        rollout(solver, backbone, noise, cond)
        times.append(time.perf_counter() - start)
    return 1000 * min(times) / len(noise)


@dataclass(frozen=True)
class Score:
    """A solver scored on the test seeds (and the validation seeds when given): the comparison's
    and a sweep trial's numbers."""

    rmse: float
    nfe: int
    ms_per_image: float
    seeds: torch.Tensor
    """The test seeds, in the order of `errors`."""
    errors: torch.Tensor
    """e_s of each test seed."""
    val_rmse: float | None = None

    def metrics(self) -> dict[str, float]:
        """rmse, error_median, error_p90, nfe, ms_per_image and, when scored, val_rmse."""
        quantiles = torch.quantile(self.errors, torch.tensor([0.5, 0.9], dtype=self.errors.dtype))
        validation = {} if self.val_rmse is None else {"val_rmse": self.val_rmse}
        return {
            "rmse": self.rmse,
            "error_median": float(quantiles[0]),
            "error_p90": float(quantiles[1]),
            "nfe": float(self.nfe),
            "ms_per_image": self.ms_per_image,
            **validation,
        }


@torch.no_grad()
def score(
    solver: Solver,
    backbone: Backbone,
    test: TeacherSet,
    images: int = GRID_COLUMNS,
    device: str | torch.device = "cpu",
    validation: TeacherSet | None = None,
    batch_size: int = 256,
) -> tuple[Score, dict[str, torch.Tensor]]:
    """Errors and RMSE on `test` (and RMSE on `validation` when given), `batch_size` seeds at a
    time, latency per image over min(64, batch_size) seeds, and the first `images` samples
    (uint8) of the teacher and of the solver, for a sample grid."""
    errors = sample_errors(solver, backbone, test, batch_size, device)
    val_rmse = (
        None
        if validation is None
        else endpoint_rmse(solver, backbone, validation, batch_size, device)
    )
    first = test.subset(slice(0, min(64, batch_size)))
    noise, cond = first.noise.to(device), on_device(first.cond, device)
    ms = latency_ms(solver, backbone, noise, cond)
    shown = first.subset(slice(0, images))
    endpoints = rollout(solver, backbone, shown.noise.to(device), on_device(shown.cond, device))
    samples = {
        "teacher": backbone.to_images(shown.endpoints.to(device)).cpu(),
        f"{solver.spec.label()} nfe={solver.nfe}": backbone.to_images(endpoints).cpu(),
    }
    result = Score(rmse_of(errors), solver.nfe, ms, test.seeds.clone(), errors, val_rmse)
    return result, samples
