"""A solver scored against a teacher set: endpoint RMSE, latency per image, sample images.

    RMSE = sqrt(mean (Φ_S(x_T) − Φ*(x_T))²)   over the teacher set's seeds

The comparison table and a sweep trial's teacher evaluation report these numbers.
"""

import math
import time
from dataclasses import dataclass

import torch

from spanlift.backbones import Backbone
from spanlift.platform.sampling.rollout import on_device, rollout
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.solvers import Solver

GRID_COLUMNS = 8
"""Samples per solver in a sample grid."""


@torch.no_grad()
def endpoint_rmse(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
) -> float:
    """sqrt(mean (Φ_S(x_T) − Φ*(x_T))²) over a teacher set."""
    total = 0.0
    for start in range(0, len(teacher), batch_size):
        part = teacher.subset(slice(start, start + batch_size))
        endpoint = rollout(solver, backbone, part.noise.to(device), on_device(part.cond, device))
        error = endpoint - part.endpoints.to(device)
        total += error.square().sum().item()
    return math.sqrt(total / teacher.endpoints.numel())


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
    """A solver scored against a teacher set: the comparison's and a sweep trial's numbers."""

    rmse: float
    nfe: int
    ms_per_image: float

    def metrics(self) -> dict[str, float]:
        return {"rmse": self.rmse, "nfe": float(self.nfe), "ms_per_image": self.ms_per_image}


@torch.no_grad()
def score(
    solver: Solver,
    backbone: Backbone,
    test: TeacherSet,
    images: int = GRID_COLUMNS,
    device: str | torch.device = "cpu",
) -> tuple[Score, dict[str, torch.Tensor]]:
    """Endpoint RMSE on `test`, latency per image over 64 seeds, and the first `images` samples
    (uint8) of the teacher and of the solver, for a sample grid."""
    rmse = endpoint_rmse(solver, backbone, test, device=device)
    first = test.subset(slice(0, 64))
    noise, cond = first.noise.to(device), on_device(first.cond, device)
    ms = latency_ms(solver, backbone, noise, cond)
    shown = first.subset(slice(0, images))
    endpoints = rollout(solver, backbone, shown.noise.to(device), on_device(shown.cond, device))
    samples = {
        "teacher": backbone.to_images(shown.endpoints.to(device)).cpu(),
        f"{solver.spec.label()} nfe={solver.nfe}": backbone.to_images(endpoints).cpu(),
    }
    return Score(rmse, solver.nfe, ms), samples
