"""A sweep's evaluation section at work: what its evaluators load, what a fitted replicate is
evaluated with, and how the section enters a run key.

    test seeds        the section's sample metrics (FID, LPIPS, ImageReward, skill), on the
                      evaluators, from seed 2·10⁹ (`evaluation.samples` of them)
    validation seeds  the searched one again (`val_<metric>`), when the sweep searches on a sample
                      metric: the validation range continued (`validation_sample_seeds`)
    the solver        its per-step diagnostics, in the trial's process
"""

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple

from spanlift.backbones import Backbone
from spanlift.platform.evaluation.evaluator import SAMPLE_METRICS, EvaluatorSetup
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.evaluation.sample_metrics import SampleReport, evaluate_samples
from spanlift.platform.results.fit_cache import Fitted
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.teacher import sweep_seeds
from spanlift.platform.tracking.metrics import EVALUATION_METRICS
from spanlift.seeds import describe
from spanlift.solvers import Solver


class Evaluated(NamedTuple):
    """What a replicate's evaluation adds to its run."""

    metrics: dict[str, float]
    params: dict[str, Any]
    files: list[Path]


def evaluator_setup(config: SweepConfig, root: Path) -> EvaluatorSetup:
    """What the sweep's evaluator actors load: the backbone, the detector, LPIPS and ImageReward
    files, the teacher LPIPS compares with, their threads (`SweepConfig.evaluator_actors`)."""
    evaluation = config.evaluation
    return EvaluatorSetup(
        config.backbone,
        evaluation.detector or "",
        root / "eval-cache",
        config.backbone_options,
        threads=config.evaluator_actors()[3],
        batch_size=evaluation.batch_size,
        lpips_weights=evaluation.lpips_weights,
        image_reward_weights=evaluation.image_reward_weights,
        teacher=config.teacher.solver,
        skill_convention=evaluation.skill_convention,
    )


def reference_set(config: SweepConfig) -> ReferenceSet:
    """What the sweep's FIDs are measured against."""
    evaluation = config.evaluation
    return ReferenceSet.from_setting(
        evaluation.reference, evaluation.reference_samples, config.teacher.solver
    )


def evaluation_settings(config: SweepConfig) -> dict[str, Any]:
    """The evaluation section in the run key; a statistics file enters by name and content
    digest, so a changed file makes a new result."""
    if not config.evaluation.metrics:
        return {}
    settings, reference = asdict(config.evaluation), reference_set(config)
    del settings["batch_size"]  # how many at once changes memory, not the result
    if reference.kind == "file":
        settings["reference"] = reference.describe()
    return settings


def searched_family(config: SweepConfig) -> str | None:
    """The evaluation entry (fid, lpips, skill, …) whose metric the sweep searches on, measured
    on validation seeds too; None when it searches on the endpoint RMSE."""
    return next(
        (
            name
            for name in config.evaluation.metrics
            if name in SAMPLE_METRICS and config.metric in EVALUATION_METRICS[name]
        ),
        None,
    )


def validation_sample_seeds(config: SweepConfig) -> range:
    """The validation seeds of a searched sample metric: the validation range continued."""
    first = sweep_seeds(config)["validation"].start
    count = config.evaluation.validation_samples or config.evaluation.samples
    return range(first, first + count)


def evaluation_params(config: SweepConfig) -> dict[str, Any]:
    """What a replicate's run records of its evaluation before it runs: the FID's sample count,
    and the validation seeds of a searched sample metric."""
    metrics, family = config.evaluation.metrics, searched_family(config)
    seeds = {f"{family}.validation_seeds": describe(validation_sample_seeds(config))}
    return {
        **({"fid.samples": config.evaluation.samples} if "fid" in metrics else {}),
        **(seeds if family else {}),
    }


def evaluate_fitted(
    fitted: Fitted, config: SweepConfig, backbone: Backbone, pool: EvaluatorPool, folder: Path
) -> Evaluated:
    """The evaluation of a fitted replicate: its sample metrics on the test seeds, the searched
    one on validation seeds, its diagnostics; their files written to `folder`."""
    report = test_metrics(fitted, config, pool)
    files, ratio = diagnostics(fitted.solver, config, backbone, folder)
    metrics = {**(report.metrics() if report else {}), **ratio}
    return Evaluated(
        {**metrics, **validation_metric(fitted, config, pool)},
        report.params() if report else {},
        [*files, *skill_file(report, folder)],
    )


def test_metrics(fitted: Fitted, config: SweepConfig, pool: EvaluatorPool) -> SampleReport | None:
    """The section's sample metrics (FID, LPIPS, ImageReward, skill) on the evaluators, on their
    test seeds; None when none are asked."""
    evaluation = config.evaluation
    metrics = tuple(m for m in evaluation.metrics if m in SAMPLE_METRICS)
    if not metrics:
        return None
    reference = reference_set(config)
    return evaluate_samples(pool, fitted.spec, fitted.path, evaluation.samples, metrics, reference)


def validation_metric(fitted: Fitted, config: SweepConfig, pool: EvaluatorPool) -> dict[str, float]:
    """`val_<metric>` of a searched sample metric, measured on validation seeds; {} when the
    sweep searches on the endpoint RMSE (scored on validation seeds with the test seeds)."""
    family = searched_family(config)
    if family is None:
        return {}
    seeds, reference = validation_sample_seeds(config), reference_set(config)
    report = evaluate_samples(
        pool, fitted.spec, fitted.path, len(seeds), (family,), reference, seeds.start
    )
    value = report.metrics().get(config.metric)
    return {} if value is None else {config.search_metric: value}


def diagnostics(
    solver: Solver, config: SweepConfig, backbone: Backbone, folder: Path
) -> tuple[list[Path], dict[str, float]]:
    """Per-step diagnostics (CSV + PNG) of a fitted solver whose step has parts, when the section
    asks for them, and their mean out-of-span ratio as a metric; ([], {}) otherwise."""
    if "diagnostics" not in config.evaluation.metrics or not solver.has_parts:
        return [], {}
    from spanlift.platform.evaluation.diagnostics import write_diagnostics  # matplotlib: here

    table, files = write_diagnostics(solver, backbone, folder, "spanlift")
    ratio = float(table["out_of_span"].mean())
    return files, ({"out_of_span_ratio": ratio} if math.isfinite(ratio) else {})


def skill_file(report: SampleReport | None, folder: Path) -> list[Path]:
    """The skill scores per threshold, pool and lead time as NetCDF, when they were computed."""
    if report is None or report.skill is None:
        return []
    path = folder / "skill-scores.nc"
    report.skill.to_dataset().to_netcdf(path, engine="h5netcdf")
    return [path]
