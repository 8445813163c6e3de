"""A sweep's teacher sets: generated once, before any trial, in parallel Ray tasks.

The seeds are cut into chunks; each Ray task loads the backbone and runs the teacher solver on its
chunk (on a GPU when the task was given one). The driver gathers the endpoints under a progress
bar and writes the usual verified cache entry under the sweep's storage (published to its bucket
when it is one, for trials on any node to fetch). Trials only read it.
Trajectory-supervised solvers of the grid (AMED, EPD) also get an entry of the training seeds with
the teacher's states at their grid σ, one per distinct grid, made the same way.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
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
    requested_sigmas,
    supervision_sigmas,
    teacher_folder,
    teacher_key,
    write_teacher,
)
from spanlift.platform.storage import Storage
from spanlift.platform.sweep.config import SweepConfig
from spanlift.seeds import TEST_SEED_OFFSET
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build


@dataclass(frozen=True)
class SweepTeachers:
    train: Path
    test: Path
    generated: int
    """Teacher generation passes this call ran: 1, or 0 when every entry was cached."""
    trajectories: dict[tuple[float, ...], Path] = field(default_factory=dict)
    """Training-seed entries with the teacher's states, by the σ they hold."""

    def for_solver(self, sigmas: tuple[float, ...]) -> Path:
        """The training entry a solver supervised at `sigmas` (none: the endpoint) fits on."""
        if not sigmas:
            return self.train
        if sigmas not in self.trajectories:
            raise CacheError(
                f"the sweep prepared no teacher states at σ = {', '.join(map(str, sigmas))}"
            )
        return self.trajectories[sigmas]


def sweep_seeds(config: SweepConfig) -> tuple[range, range]:
    t = config.teacher
    return range(t.train_samples), range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + t.test_samples)


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


def generate_parallel(
    config: SweepConfig,
    backbone: Backbone,
    seeds: Sequence[int],
    chunks: int,
    gpus: float,
    state_sigmas: tuple[float, ...] = (),
) -> TeacherSet:
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


def trajectory_requests(config: SweepConfig, backbone: Backbone) -> set[tuple[float, ...]]:
    """The distinct σ grids at which the sweep's trajectory-supervised solvers are matched."""
    return {s for spec in config.trials() if (s := supervision_sigmas(build(spec, backbone)))}


def prepare_teachers(config: SweepConfig, storage: Storage) -> SweepTeachers:
    """The sweep's train and test teacher entries in `storage` (paths in its local folder).

    Whatever is missing is generated in one parallel pass over the union of the missing seeds.
    """
    backbone, teacher = load_backbone(config.backbone, **config.backbone_options), config.teacher
    cache_dir = storage.local
    entries = {
        teacher_folder(cache_dir, backbone, teacher.solver, seeds): seeds
        for seeds in sweep_seeds(config)
    }
    missing = {folder: seeds for folder, seeds in entries.items() if not storage.exists(folder)}
    resources = ray.cluster_resources()
    workers = int(resources.get("GPU", 0)) or int(resources.get("CPU", 1))
    gpus = 1.0 if resources.get("GPU", 0) >= 1 else 0.0

    def generate(seeds: list[int], state_sigmas: tuple[float, ...] = ()) -> TeacherSet:
        chunks = max(1, min(len(seeds) // 64, 2 * workers))
        return generate_parallel(config, backbone, seeds, chunks, gpus, state_sigmas)

    if missing:
        result = generate([s for part in missing.values() for s in part])
        start = 0
        for folder, part in missing.items():
            piece = result.subset(slice(start, start + len(part)))
            piece.key = teacher_key(backbone, teacher.solver, part)
            storage.publish(write_teacher(folder, piece, cache_metadata(backbone, teacher.solver)))
            start += len(part)
    train_seeds = sweep_seeds(config)[0]
    trajectories = {}
    for sigmas in sorted(trajectory_requests(config, backbone)):
        folder = teacher_folder(cache_dir, backbone, teacher.solver, train_seeds, sigmas)
        if not storage.exists(folder):
            missing[folder] = train_seeds
            written = write_teacher(
                folder,
                generate(list(train_seeds), sigmas),
                cache_metadata(backbone, teacher.solver),
            )
            storage.publish(written)
        trajectories[sigmas] = folder
    train, test = entries
    return SweepTeachers(train, test, generated=int(bool(missing)), trajectories=trajectories)
