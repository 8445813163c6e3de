"""What a sweep's replicate is and what its MLflow run keeps: its configuration (the run key),
the params known before it runs, and its files."""

from pathlib import Path
from typing import Any

import torch

from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.fitting.losses import networks_param
from spanlift.platform.resolved import ResolvedConfiguration, write_resolved
from spanlift.platform.results.fit_cache import Fitted
from spanlift.platform.results.provenance import run_environment
from spanlift.platform.results.tracking import configuration_params
from spanlift.platform.sampling.sample_grid import save_sample_grid
from spanlift.platform.sampling.score import Score
from spanlift.platform.sweep.context import SweepContext
from spanlift.platform.tracking.per_sample import write_errors
from spanlift.platform.tracking.runs import REPLICATE_PARAM
from spanlift.solvers import SolverSpec


def configuration(spec: SolverSpec, context: SweepContext) -> Configuration:
    """Everything that produces the replicate's result."""
    config, teachers = context.config, context.teachers
    return Configuration(
        config.backbone,
        config.backbone_options,
        spec,
        teacher_identity(
            config.teacher.solver,
            f"{teachers.train.name}|{teachers.validation.name}",
            teachers.test.name,
        ),
        fit={**config.fit.identity(), "workers": config.resources.workers},
        evaluation=context.plan.evaluation_key,
    )


def run_params(result: Configuration, context: SweepContext, label: str = "") -> dict[str, Any]:
    """The MLflow params of a replicate: what ran (named `label` on the leaderboard, when it has
    one), the pretrained networks its loss used (`fit.loss_networks`), on which seeds of each role,
    what its metrics are measured against, what chose it, and where it ran (`env.*`)."""
    config = context.config
    return {
        **configuration_params(result),
        REPLICATE_PARAM: result.replicate_key(),
        "loss": config.fit.loss,
        **networks_param(config.fit.loss, config.fit.loss_options),
        **context.plan.params,
        **run_environment(context.device, deterministic=config.fit.deterministic),
        **({"solver": label} if label else {}),
    }


def replicate_files(
    fitted: Fitted,
    scored: Score,
    samples: dict[str, torch.Tensor],
    context: SweepContext,
    folder: Path,
) -> list[Path]:
    """The files a replicate's run keeps beside its evaluation's: the sample grid, the errors per
    test seed, what re-running it needs, the fitted checkpoint."""
    grid = save_sample_grid(samples, folder / "samples.png")
    errors = write_errors(folder, scored.seeds.numpy(), scored.errors.numpy())
    resolved = write_resolved(folder, resolved_configuration(fitted.spec, context))
    return [grid, errors, resolved, *([fitted.path] if fitted.path else [])]


def resolved_configuration(spec: SolverSpec, context: SweepContext) -> ResolvedConfiguration:
    """Everything re-running the replicate needs (`spanlift rerun`)."""
    config = context.config
    return ResolvedConfiguration(
        backbone=config.backbone,
        backbone_options=config.backbone_options,
        solver=spec.to_dict(),
        teacher=config.teacher.solver.to_dict(),
        seeds={role: [s.start, s.stop] for role, s in context.plan.seeds.items()},
        fit=config.fit.to_dict(),
        workers=config.resources.workers,
        threads=torch.get_num_threads(),
        device=str(context.device),
    )
