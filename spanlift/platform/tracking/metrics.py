"""Every metric spanlift logs: which way is better, and what its value is measured against.

Two values of a metric are comparable only when the params named in `against` are equal: two
RMSEs against different teachers, or two FIDs from different detectors, are different
quantities. The leaderboard groups runs by these params; a sweep may only search on a metric it
produces (`produced_by`). The rows of what a trial measures itself are here; those of the
evaluation metrics come from their plug-ins (`platform/evaluation/metrics/`).
"""

from collections.abc import Mapping

from spanlift.errors import SettingsError
from spanlift.platform.evaluation.metrics import METRICS as EVALUATIONS
from spanlift.platform.evaluation.metrics import Row

TRIAL_ROWS = (
    Row("rmse", "min", "endpoint RMSE against the teacher", ("teacher", "teacher.test_seeds")),
    Row("ms_per_image", "min", "sampling time per image, best of 3", ("eval.device",)),
    Row("fit_seconds", "min", "fit compute time, base fit included"),
    Row("eval_seconds", "min", "evaluation time"),
    Row("nfe", "min", "model evaluations spent"),
)
METRICS = {
    row.name: row
    for row in (*TRIAL_ROWS, *(row for _, metric in EVALUATIONS for row in metric.rows))
}
TRIAL_METRICS = ("rmse", "ms_per_image", "nfe", "fit_seconds", "eval_seconds")
"""What every sweep trial reports, whatever its evaluation section asks."""

FIT_BUDGET = ("fit.iterations", "fit.batch_size", "fit.loss", "fit.lr", "teacher.train_samples")
"""The params that make two fits comparable in effort (`spanlift leaderboard --by-fit`)."""


def measured_with(metric: str, params: Mapping[str, str]) -> frozenset[str]:
    """The pretrained networks a run's value of `metric` (or of its `val_` form) was measured with,
    as the metric's plug-in declares them (`EvaluationMetric.networks`); none for the trial's own
    metrics."""
    name = metric.removeprefix("val_")
    owner = next((m for _, m in EVALUATIONS if name in m.produces()), None)
    return owner.networks(params) if owner else frozenset()


def default_mode(metric: str) -> str:
    """ "max" for scores, "min" for errors, distances and times (and metrics not listed)."""
    return METRICS[metric].mode if metric in METRICS else "min"


def produced_by(evaluation: tuple[str, ...]) -> tuple[str, ...]:
    """The metrics a sweep trial reports when its evaluation section asks for `evaluation`."""
    extra = [m for name in evaluation if name in EVALUATIONS for m in adds(name)]
    return tuple(dict.fromkeys([*TRIAL_METRICS, *extra]))


def adds(name: str) -> tuple[str, ...]:
    """The metrics the evaluation entry `name` adds to a trial's report."""
    return EVALUATIONS.get(name).produces()


def check_search_metric(metric: str, evaluation: tuple[str, ...]) -> None:
    """Refuse a search metric the sweep never reports: its trials would all look pruned."""
    produced = produced_by(evaluation)
    if metric not in produced:
        hint = next((name for name, _ in EVALUATIONS if metric in adds(name)), None)
        raise SettingsError(
            f"{metric!r} is not a metric this sweep produces; it produces "
            f"{', '.join(produced)}"
            + (f" (add {hint!r} to evaluation.metrics for {metric!r})" if hint else "")
        )
