"""A recorded configuration fitted and scored again from its resolved configuration alone.

The teacher sets are regenerated (or read from a cache) for the recorded seeds of each role (the
validation seeds in blocks where the run used them), torch runs on the recorded number of
threads, and the solver is fitted from scratch, its base too (a two-stage SpanLift's recorded
`base_checkpoint` names a file of the machine that ran it, so the base is fitted again with the
same seed): the same code then gives the same numbers.
"""

from dataclasses import replace
from pathlib import Path

import torch

from spanlift.backbones import load_backbone
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.resolved import ResolvedConfiguration
from spanlift.platform.sampling.score import score
from spanlift.platform.sampling.teacher import load_or_generate
from spanlift.platform.sampling.validation_blocks import ValidationBlocks, first_block
from spanlift.solvers import SolverSpec

ROLES = ("train", "validation", "test")


def rerun(resolved: ResolvedConfiguration, cache: Path, workdir: Path) -> dict[str, float]:
    """The metrics of the configuration fitted and scored again (in `workdir`, teacher sets in
    `cache`): rmse, error_median, error_p90, val_rmse, nfe, ms_per_image."""
    torch.set_num_threads(resolved.threads)
    backbone = load_backbone(resolved.backbone, **resolved.backbone_options)
    teacher = SolverSpec.from_dict(resolved.teacher)
    sets = {
        role: load_or_generate(cache, backbone, resolved.seed_range(role), teacher, progress=False)
        for role in ROLES
        if role != "validation" or not resolved.validation_blocks
    }
    if resolved.validation_blocks:
        seeds = resolved.seed_range("validation")
        sets["validation"] = ValidationBlocks(cache, backbone, seeds, teacher, progress=False)
    spec = SolverSpec.from_dict(resolved.solver)
    spec = replace(
        spec, settings={k: v for k, v in spec.settings.items() if k != "base_checkpoint"}
    )
    fitted = fit_spec(
        spec,
        backbone,
        sets["train"],
        FitSettings(**resolved.fit),
        workdir,
        progress=False,
        validation=sets["validation"],
    )
    held = first_block(sets["validation"])
    scored, _ = score(fitted.solver, backbone, sets["test"], validation=held)
    return scored.metrics()
