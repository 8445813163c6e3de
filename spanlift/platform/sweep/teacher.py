"""A sweep's teacher sets: generated once, before any trial, in parallel Ray tasks.

The seeds are cut into chunks; each Ray task loads the backbone and runs the teacher solver on its
chunk (on a GPU when the task was given one). The driver gathers the endpoints under a progress
bar and writes the usual verified cache entry under the sweep's storage path. Trials only read it.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from tqdm import tqdm

from spanlift.backbones import Backbone, load_backbone
from spanlift.platform.fitting.teacher import (
    TeacherSet,
    cache_metadata,
    generate_teacher,
    seed_noise,
    teacher_folder,
    teacher_key,
    write_teacher,
)
from spanlift.platform.sweep.config import SweepConfig
from spanlift.seeds import TEST_SEED_OFFSET
from spanlift.solvers import SolverSpec


@dataclass(frozen=True)
class SweepTeachers:
    train: Path
    test: Path
    generated: int
    """Teacher generation passes this call ran: 1, or 0 when both entries were cached."""


def sweep_seeds(config: SweepConfig) -> tuple[range, range]:
    t = config.teacher
    return range(t.train_samples), range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + t.test_samples)


@ray.remote(max_retries=2)
def teacher_chunk(
    backbone: str, options: dict[str, Any], teacher: dict[str, Any], seeds: Sequence[int]
) -> np.ndarray:
    """Teacher endpoints for one chunk of seeds (a Ray task)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_backbone(backbone, **options)
    part = generate_teacher(
        model, seeds, SolverSpec.from_dict(teacher), progress=False, device=device
    )
    return part.endpoints.numpy()


def generate_parallel(
    config: SweepConfig, backbone: Backbone, seeds: Sequence[int], chunks: int, gpus: float
) -> TeacherSet:
    teacher = config.teacher.solver
    pieces = [list(c) for c in np.array_split(np.asarray(seeds), chunks) if len(c)]
    task = teacher_chunk.options(num_cpus=1, num_gpus=gpus)
    refs = [
        task.remote(config.backbone, config.backbone_options, teacher.to_dict(), piece)
        for piece in pieces
    ]
    order = {ref: i for i, ref in enumerate(refs)}
    endpoints: list[np.ndarray | None] = [None] * len(refs)
    pending = list(refs)
    with tqdm(total=len(seeds), desc=f"teacher {teacher.label()} nfe={teacher.nfe}") as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            endpoints[order[done[0]]] = ray.get(done[0])
            bar.update(len(pieces[order[done[0]]]))
    cond, observed = backbone.conditioning(seeds), backbone.observations(seeds)
    return TeacherSet(
        torch.as_tensor(list(seeds), dtype=torch.int64),
        seed_noise(seeds, backbone.shape),
        torch.from_numpy(np.concatenate(endpoints)),  # type: ignore[arg-type]
        teacher_key(backbone, teacher, seeds),
        None if cond is None else cond.float(),
        None if observed is None else observed.float(),
    )


def prepare_teachers(config: SweepConfig, cache_dir: Path) -> SweepTeachers:
    """The sweep's train and test teacher entries under `cache_dir`.

    Whatever is missing is generated in one parallel pass over the union of the missing seeds.
    """
    backbone, teacher = load_backbone(config.backbone, **config.backbone_options), config.teacher
    entries = {
        teacher_folder(cache_dir, backbone, teacher.solver, seeds): seeds
        for seeds in sweep_seeds(config)
    }
    missing = {folder: seeds for folder, seeds in entries.items() if not folder.exists()}
    if missing:
        resources = ray.cluster_resources()
        workers = int(resources.get("GPU", 0)) or int(resources.get("CPU", 1))
        seeds = [s for part in missing.values() for s in part]
        chunks = max(1, min(len(seeds) // 64, 2 * workers))
        gpus = 1.0 if resources.get("GPU", 0) >= 1 else 0.0
        result = generate_parallel(config, backbone, seeds, chunks, gpus)
        start = 0
        for folder, part in missing.items():
            piece = result.subset(slice(start, start + len(part)))
            piece.key = teacher_key(backbone, teacher.solver, part)
            write_teacher(folder, piece, cache_metadata(backbone, teacher.solver))
            start += len(part)
    train, test = entries
    return SweepTeachers(train, test, generated=int(bool(missing)))
