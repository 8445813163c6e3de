"""A sweep's evaluation section at work: what its evaluators load, what a fitted replicate is
evaluated with, and how the section enters a run key.

    test seeds        every sample metric asked for (`evaluation/metrics/`), on the evaluators,
                      from seed 2·10⁹ (`evaluation.samples` of them)
    validation seeds  the searched one again (`val_<metric>`), when the sweep searches on a sample
                      metric: the validation range continued (`validation_sample_seeds`)
    the solver        its own metrics (diagnostics), in the trial's process
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanlift.backbones import Backbone
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics import METRICS, Finished, SampleMetric, chosen
from spanlift.platform.evaluation.metrics.base import option_owner, option_values
from spanlift.platform.evaluation.metrics.reference import ReferenceSet
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.evaluation.sample_metrics import SampleReport, evaluate_samples
from spanlift.platform.evaluation.solver_metrics import solver_metrics
from spanlift.platform.results.fit_cache import Fitted
from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.teacher import sweep_seeds
from spanlift.platform.tracking.metrics import adds
from spanlift.seeds import describe


def evaluator_setup(config: SweepConfig, root: Path) -> EvaluatorSetup:
    """What the sweep's evaluator actors load: the backbone, the detector, each metric's options,
    the teacher metrics compare with, their threads (`SweepConfig.evaluator_actors`)."""
    evaluation = config.evaluation
    return EvaluatorSetup(
        config.backbone,
        evaluation.detector or "",
        root / "eval-cache",
        config.backbone_options,
        threads=config.evaluator_actors()[3],
        batch_size=evaluation.batch_size,
        teacher=config.teacher.solver,
        options=evaluation.options,
    )


def reference_set(config: SweepConfig) -> ReferenceSet:
    """What the sweep's FIDs are measured against."""
    evaluation = config.evaluation
    return ReferenceSet.from_setting(
        evaluation.reference, evaluation.reference_samples, config.teacher.solver
    )


ALWAYS_KEYED = ("lpips_weights", "image_reward_weights", "skill_convention")
"""Metric options in every run key of a sweep with an evaluation, asked for or not: the options
of the metrics that keyed runs so before any other metric existed. Keys recorded then are found
again; a later metric's options enter a key only where it is asked for or an option is set."""


def evaluation_settings(
    config: SweepConfig, reference: ReferenceSet | None = None
) -> dict[str, Any]:
    """The evaluation section in the run key with the options of the metrics it asks for (and
    `ALWAYS_KEYED`, and any option set); a statistics file enters by name and content digest, so
    a changed file makes a new result (`reference`: the sweep's `reference_set`, when it has it)."""
    if not config.evaluation.metrics:
        return {}
    settings, reference = config.evaluation.settings(), reference or reference_set(config)
    del settings["batch_size"]  # how many at once changes memory, not the result
    if reference.kind == "file":
        settings["reference"] = reference.describe()
    defaults = option_values()
    unasked = {
        key
        for key, value in settings.items()
        if key in defaults and key not in ALWAYS_KEYED and value == defaults[key]
        if option_owner(key).name not in config.evaluation.metrics
    }
    return {key: value for key, value in settings.items() if key not in unasked}


def searched_family(config: SweepConfig) -> str | None:
    """The evaluation entry (fid, lpips, skill, …) whose metric the sweep searches on, measured
    on validation seeds too; None when it searches on the endpoint RMSE."""
    sampled = chosen(config.evaluation.metrics, {}, SampleMetric)
    return next((m.name for m in sampled if config.metric in adds(m.name)), None)


def validation_sample_seeds(config: SweepConfig) -> range:
    """The validation seeds of a searched sample metric: the validation range continued."""
    first = sweep_seeds(config)["validation"].start
    count = config.evaluation.validation_samples or config.evaluation.samples
    return range(first, first + count)


def evaluation_params(config: SweepConfig) -> dict[str, Any]:
    """What a replicate's run records of its evaluation before it runs: the sample count of each
    metric whose values are measured against it (`fid.samples`), and the validation seeds of a
    searched sample metric."""
    asked = [METRICS.get(name) for name in config.evaluation.metrics]
    counts = {a for m in asked for row in m.rows for a in row.against if a == f"{m.name}.samples"}
    family = searched_family(config)
    seeds = {f"{family}.validation_seeds": describe(validation_sample_seeds(config))}
    return {
        **{name: config.evaluation.samples for name in sorted(counts)},
        **(seeds if family else {}),
    }


@dataclass(frozen=True)
class EvaluationPlan:
    """A sweep's evaluation section as every replicate runs it, worked out once per sweep: the
    metrics asked for and their options, the test seeds' sample count, what sample metrics are
    measured against, and the searched sample metric with its validation seeds."""

    metrics: tuple[str, ...]
    options: dict[str, Any]
    samples: int
    reference: ReferenceSet
    sampled: bool  # whether it asks for a sample metric (measured on the evaluators)
    searched: str | None  # `searched_family`
    validation_seeds: range
    search_metric: str  # `val_<metric>`
    metric: str

    @classmethod
    def of(cls, config: SweepConfig) -> "EvaluationPlan":
        evaluation = config.evaluation
        return cls(
            tuple(evaluation.metrics),
            evaluation.options,
            evaluation.samples,
            reference_set(config),
            bool(chosen(evaluation.metrics, evaluation.options, SampleMetric)),
            searched_family(config),
            validation_sample_seeds(config),
            config.search_metric,
            config.metric,
        )


def evaluate_fitted(
    fitted: Fitted, plan: EvaluationPlan, backbone: Backbone, pool: EvaluatorPool, folder: Path
) -> Finished:
    """The evaluation of a fitted replicate: its sample metrics on the test seeds (on the
    evaluators), the searched one on validation seeds, its own metrics (here); their files
    written to `folder`."""
    tested = (
        evaluate_samples(
            pool,
            fitted.spec,
            fitted.path,
            plan.samples,
            plan.metrics,
            plan.reference,
            folder=folder,
        )
        if plan.sampled
        else None
    )
    own = solver_metrics(
        plan.metrics, plan.options, fitted.solver, backbone, folder, fitted.spec.name
    )
    parts = [*own, *([finished(tested)] if tested else [])]
    return Finished(
        {**validation_metric(fitted, plan, pool), **merged(parts, "metrics")},
        merged(parts, "params"),
        tuple(path for part in parts for path in part.files),
    )


def validation_metric(
    fitted: Fitted, plan: EvaluationPlan, pool: EvaluatorPool
) -> dict[str, float]:
    """`val_<metric>` of a searched sample metric, measured on validation seeds; {} when the
    sweep searches on the endpoint RMSE (scored on validation seeds with the test seeds)."""
    if plan.searched is None:
        return {}
    seeds = plan.validation_seeds
    report = evaluate_samples(
        pool, fitted.spec, fitted.path, len(seeds), (plan.searched,), plan.reference, seeds.start
    )
    value = report.metrics().get(plan.metric)
    return {} if value is None else {plan.search_metric: value}


def finished(report: SampleReport) -> Finished:
    return Finished(report.metrics(), report.params(), report.files)


def merged(parts: list[Finished], what: str) -> dict[str, Any]:
    """The `metrics` or `params` of every part, together."""
    return {k: v for part in parts for k, v in getattr(part, what).items()}
