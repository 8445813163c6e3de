"""A sweep's outcome: configurations finished, failed (and why), remaining, the best one."""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ray.tune import Callback

from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.progress import error_reason
from spanlift.platform.sweep.trial import trial_name


@dataclass
class SweepSummary:
    experiment: str
    root: str
    tracking_uri: str
    configurations: int
    """Distinct configurations the sweep's searcher measures (`expected_configurations`)."""
    finished: int
    failed: list[str]
    """`<configuration> nfe=<N>: <reason>` for each configuration that failed."""
    reused: int
    """Configurations whose runs were taken from MLflow."""
    wall_seconds: float
    compute_seconds: float
    teacher_generations: int
    model_loads: int = 0
    """Backbone loads by trial processes and evaluator actors (Train workers load their own)."""
    best: dict[str, Any] = field(default_factory=dict)
    """The best finished configuration by the search metric on validation seeds: its name, that
    value and the metric on test seeds (the replicates' means)."""
    metric: str = ""
    mode: str = "min"
    """The search metric and whether lower (`min`) or higher is better."""
    answered: int = 0
    """Searcher proposals of configurations already measured, answered from their values
    without a trial (a searcher whose proposals can repeat: `distinct_search.py`)."""

    @property
    def remaining(self) -> int:
        """Configurations neither finished nor failed: more than 0 after an interruption."""
        return self.configurations - self.finished - len(self.failed)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "remaining": self.remaining}, indent=2)


class SeenFailures(Callback):
    """The failures of the sweep's trials as Tune's driver reported them: `reasons`, the reason
    (the error file's last line) by configuration name.

    Tune writes a trial's error file on the driver and copies it to the sweep's storage in the
    background; its `ResultGrid` reads the copy, so a failed trial's result can lack its error.
    The summary takes the reason from here then."""

    def __init__(self, config: SweepConfig) -> None:
        self.config = config
        self.reasons: dict[str, str] = {}

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.reasons[trial_name(trial.config, self.config)] = error_reason(trial)


def expected_configurations(config: SweepConfig) -> int:
    """Distinct configurations the sweep's searcher measures of its space (`trials`)."""
    return config.search.trials(len(config.trials()))


def best_of(finished: list[Any], config: SweepConfig) -> dict[str, Any]:
    """The finished configuration with the best validation value, with its test value."""
    if not finished:
        return {}
    pick = min if config.mode == "min" else max
    top = pick(finished, key=lambda r: r.metrics[config.search_metric])
    test = {config.metric: top.metrics[config.metric]} if config.metric in top.metrics else {}
    return {
        "configuration": trial_name(top.config, config),
        config.search_metric: top.metrics[config.search_metric],
        **test,
    }


def summarize(
    config: SweepConfig,
    root: Path,
    uri: str,
    results: Any,
    start: float,
    generations: int,
    answered: int = 0,
    seen: dict[str, str] | None = None,
) -> SweepSummary:
    """The outcome of Tune's `results`. A trial counts as finished only with the search metric
    (on validation seeds) in its last report: one still running when the sweep was interrupted
    is neither finished nor failed, and counts as remaining. `seen`: the failures the driver
    reported (`SeenFailures.reasons`), for a failed trial whose result lacks its error."""
    finished = [r for r in results if r.error is None and config.search_metric in (r.metrics or {})]
    reasons = {
        trial_name(r.config, config): str(r.error).strip().splitlines()[-1]
        for r in results
        if r.error
    }
    finished_names = {trial_name(r.config, config) for r in finished}
    for name, reason in (seen or {}).items():
        if name not in finished_names:
            reasons.setdefault(name, reason)
    failed = [f"{name}: {reason}" for name, reason in reasons.items()]
    ran = [r for r in finished if not r.metrics.get("reused")]
    compute = sum(
        r.metrics.get("fit_seconds", 0.0) + r.metrics.get("eval_seconds", 0.0) for r in ran
    )
    return SweepSummary(
        experiment=config.experiment,
        root=str(root),
        tracking_uri=uri,
        configurations=expected_configurations(config),
        finished=len(finished),
        failed=failed,
        reused=sum(1 for r in finished if r.metrics.get("reused")),
        wall_seconds=time.perf_counter() - start,
        compute_seconds=compute,
        teacher_generations=generations,
        model_loads=int(sum(r.metrics.get("model_loads", 0.0) for r in ran)),
        best=best_of(finished, config),
        metric=config.metric,
        mode=config.mode,
        answered=answered,
    )
