"""A sweep's teacher sets: generated once, before any trial, in parallel Ray tasks (an analytic
backbone's in the driver, cheaper than a task's process).

One entry per seed role (training, validation, test; `spanlift.seeds`). The seeds are cut into
chunks; each Ray task loads the backbone and runs the teacher solver on its chunk (on a GPU when
the task was given one). The driver gathers the endpoints under a progress bar and writes the usual
verified cache entries under the sweep's storage (published to its bucket when it is one, for
trials on any node to fetch). Trials only read them.
Trajectory-supervised solvers of the grid (AMED, EPD) also get entries of the training and the
validation seeds with the teacher's states at their grid σ, one pair per distinct grid, made the
same way.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from tqdm import tqdm

from spanlift.backbones import Backbone, load_backbone
from spanlift.errors import CacheError
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.platform.sampling.teacher import (
    TeacherSet,
    cache_metadata,
    generate_teacher,
    read_teacher,
    requested_sigmas,
    supervision_sigmas,
    teacher_folder,
    teacher_key,
    write_teacher,
)
from spanlift.platform.storage import Storage
from spanlift.platform.sweep.config import SweepConfig
from spanlift.seeds import role_seeds
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build


@dataclass(frozen=True)
class FitTeachers:
    """The entries a fit reads: its training seeds, and the validation seeds that choose its kept
    state."""

    train: Path
    validation: Path


@dataclass(frozen=True)
class SweepTeachers:
    train: Path
    validation: Path
    test: Path
    generated: int
    """Teacher generation passes this call ran: 1, or 0 when every entry was cached."""
    trajectories: dict[tuple[float, ...], FitTeachers] = field(default_factory=dict)
    """Training and validation entries with the teacher's states, by the σ they hold."""

    def for_solver(self, sigmas: tuple[float, ...]) -> FitTeachers:
        """The entries a solver supervised at `sigmas` (none: the endpoint) fits on."""
        if not sigmas:
            return FitTeachers(self.train, self.validation)
        if sigmas not in self.trajectories:
            raise CacheError(
                f"the sweep prepared no teacher states at σ = {', '.join(map(str, sigmas))}"
            )
        return self.trajectories[sigmas]


@lru_cache(maxsize=8)
def read_entry(folder: Path) -> TeacherSet:
    """A sweep's teacher entry, read and verified once per process (entries never change: their
    names are their contents' hashes)."""
    return read_teacher(folder)


def sweep_seeds(config: SweepConfig) -> dict[str, range]:
    """The sweep's seeds by role: train, validation, test (`spanlift.seeds.role_seeds`)."""
    t = config.teacher
    return role_seeds(t.train_samples, t.validation_samples, t.test_samples)


@ray.remote(max_retries=2)
def teacher_chunk(
    backbone: str,
    options: dict[str, Any],
    teacher: dict[str, Any],
    seeds: Sequence[int],
    state_sigmas: tuple[float, ...] = (),
) -> tuple[np.ndarray, np.ndarray | None]:
    """Teacher endpoints (and states at `state_sigmas`) for one chunk of seeds (a Ray task)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_backbone(backbone, **options)
    part = generate_teacher(
        model,
        seeds,
        SolverSpec.from_dict(teacher),
        progress=False,
        device=device,
        state_sigmas=state_sigmas,
    )
    return part.endpoints.numpy(), None if part.states is None else part.states.numpy()


def analytic(backbone: Backbone) -> bool:
    """A backbone without parameters (a closed-form denoiser, e.g. the Gaussian mixture): its
    teacher costs the driver milliseconds, less than starting a Ray task's process."""
    return next(iter(backbone.parameters()), None) is None


def generate_in_process(
    config: SweepConfig, backbone: Backbone, seeds: Sequence[int], state_sigmas: tuple[float, ...]
) -> TeacherSet:
    """The teacher set generated here, on one thread as a Ray task of `generate_parallel` runs
    (`num_cpus=1`), so its numbers are the tasks' own."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return generate_teacher(
            backbone, seeds, config.teacher.solver, progress=False, state_sigmas=state_sigmas
        )
    finally:
        torch.set_num_threads(threads)


def generate_parallel(
    config: SweepConfig,
    backbone: Backbone,
    seeds: Sequence[int],
    chunks: int,
    gpus: float,
    state_sigmas: tuple[float, ...] = (),
) -> TeacherSet:
    """The teacher set of `seeds` from `chunks` Ray tasks (`teacher_chunk`), each holding one CPU
    and `gpus` GPUs."""
    teacher = config.teacher.solver
    pieces = [list(c) for c in np.array_split(np.asarray(seeds), chunks) if len(c)]
    task = teacher_chunk.options(num_cpus=1, num_gpus=gpus)
    refs = [
        task.remote(
            config.backbone, config.backbone_options, teacher.to_dict(), piece, state_sigmas
        )
        for piece in pieces
    ]
    order = {ref: i for i, ref in enumerate(refs)}
    parts: list[tuple[np.ndarray, np.ndarray | None]] = [None] * len(refs)  # type: ignore[list-item]
    pending = list(refs)
    what = f"teacher {teacher.label()} nfe={teacher.nfe}" + (
        " (trajectory)" if state_sigmas else ""
    )
    with tqdm(total=len(seeds), desc=what) as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            parts[order[done[0]]] = ray.get(done[0])
            bar.update(len(pieces[order[done[0]]]))
    cond, observed = backbone.conditioning(seeds), backbone.observations(seeds)
    endpoints, states = zip(*parts, strict=True)
    return TeacherSet(
        torch.as_tensor(list(seeds), dtype=torch.int64),
        seed_noise(seeds, backbone.shape),
        torch.from_numpy(np.concatenate(endpoints)),
        teacher_key(backbone, teacher, seeds, state_sigmas),
        None if cond is None else cond.float(),
        None if observed is None else observed.float(),
        torch.from_numpy(np.concatenate(states)) if state_sigmas else None,
        requested_sigmas(state_sigmas),
        teacher,
    )


def generate_on_ray(
    config: SweepConfig, backbone: Backbone, seeds: Sequence[int], state_sigmas: tuple[float, ...]
) -> TeacherSet:
    """`generate_parallel` over the cluster: chunks of at least 64 seeds, two per GPU (else per
    CPU), each task on a GPU where the cluster has one."""
    resources = ray.cluster_resources()
    workers = int(resources.get("GPU", 0)) or int(resources.get("CPU", 1))
    gpus = 1.0 if resources.get("GPU", 0) >= 1 else 0.0
    chunks = max(1, min(len(seeds) // 64, 2 * workers))
    return generate_parallel(config, backbone, seeds, chunks, gpus, state_sigmas)


def trajectory_requests(config: SweepConfig, backbone: Backbone) -> set[tuple[float, ...]]:
    """The distinct σ grids at which the sweep's trajectory-supervised solvers are matched."""
    return {s for spec in config.trials() if (s := supervision_sigmas(build(spec, backbone)))}


def prepare_teachers(config: SweepConfig, storage: Storage) -> SweepTeachers:
    """The sweep's train, validation and test teacher entries in `storage` (paths in its local
    folder), and the training and validation entries with states that its trajectory-supervised
    solvers need.

    Whatever is missing is generated in parallel passes over the union of the missing seeds: one
    for the endpoint entries, one per distinct trajectory grid; an `analytic` backbone's, here.
    """
    backbone, teacher = load_backbone(config.backbone, **config.backbone_options), config.teacher
    generated: list[bool] = []

    def entries(roles: dict[str, range], state_sigmas: tuple[float, ...] = ()) -> dict[str, Path]:
        """The entry of each role's seeds, the missing ones generated in one pass."""
        folders = {
            role: teacher_folder(storage.local, backbone, teacher.solver, seeds, state_sigmas)
            for role, seeds in roles.items()
        }
        missing = [role for role, folder in folders.items() if not storage.exists(folder)]
        if missing:
            seeds = [s for role in missing for s in roles[role]]
            result = (
                generate_in_process(config, backbone, seeds, state_sigmas)
                if analytic(backbone)
                else generate_on_ray(config, backbone, seeds, state_sigmas)
            )
            start = 0
            for role in missing:
                part = result.subset(slice(start, start + len(roles[role])))
                part.key = teacher_key(backbone, teacher.solver, roles[role], state_sigmas)
                metadata = cache_metadata(backbone, teacher.solver)
                storage.publish(write_teacher(folders[role], part, metadata))
                start += len(roles[role])
        generated.append(bool(missing))
        return folders

    roles = sweep_seeds(config)
    endpoint = entries(roles)
    fitted_on = {role: roles[role] for role in ("train", "validation")}
    trajectories = {
        sigmas: FitTeachers(**entries(fitted_on, sigmas))
        for sigmas in sorted(trajectory_requests(config, backbone))
    }
    return SweepTeachers(
        endpoint["train"],
        endpoint["validation"],
        endpoint["test"],
        generated=int(any(generated)),
        trajectories=trajectories,
    )
