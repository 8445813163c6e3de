"""The qualitative figure of a leaderboard: the same test seeds sampled by the teacher and by each
ranked solver at each NFE, one row each, in rank order (`spanlift leaderboard --samples F.png`).

Each row's solver is its chosen configuration's first replicate: the fitted checkpoint the run
stored, or, for an analytic solver, its spec; the backbone, the teacher and the seeds come from
the run's `configuration.json` (runs recorded before it existed cannot be drawn: one line says
so).
"""

import tempfile
from pathlib import Path

import torch
from mlflow.tracking import MlflowClient

from spanlift.backbones import Backbone, load_backbone
from spanlift.platform.sampling.rollout import rollout, seed_noise
from spanlift.platform.sampling.sample_grid import save_sample_grid
from spanlift.platform.tracking.entry import Entry
from spanlift.platform.tracking.run_files import checkpoint_of, resolved_of
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import load_solver

SEEDS_SHOWN = 8


@torch.no_grad()
def samples_of(
    backbone: Backbone, spec: SolverSpec, checkpoint: Path | None, seeds: list[int]
) -> torch.Tensor:
    """uint8 samples of the solver from the seeds' noise (and conditioning)."""
    solver = load_solver(spec, checkpoint, backbone)
    noise = seed_noise(seeds, backbone.shape)
    return backbone.to_images(rollout(solver, backbone, noise, backbone.conditioning(seeds)))


def sample_figure(client: MlflowClient, entries: list[Entry], path: Path) -> Path:
    """The figure of the module docstring, for the entries of the first backbone and group."""
    first = entries[0]
    shown = [e for e in entries if (e.backbone, e.scale) == (first.backbone, first.scale)]
    with tempfile.TemporaryDirectory() as folder:
        resolved = resolved_of(client, first.run_id, Path(folder))
        backbone = load_backbone(resolved.backbone, **resolved.backbone_options)
        seeds = list(resolved.seed_range("test"))[:SEEDS_SHOWN]
        teacher = SolverSpec.from_dict(resolved.teacher)
        rows = {
            f"teacher {teacher.label()} nfe={teacher.nfe}": samples_of(
                backbone, teacher, None, seeds
            )
        }
        for e in sorted(shown, key=lambda e: (e.nfe, e.rank)):
            spec = SolverSpec.from_dict(resolved_of(client, e.run_id, Path(folder)).solver)
            checkpoint = checkpoint_of(client, e.run_id, Path(folder))
            rows[f"NFE {e.nfe} · {e.rank}. {e.solver}"] = samples_of(
                backbone, spec, checkpoint, seeds
            )
        return save_sample_grid(rows, path)
