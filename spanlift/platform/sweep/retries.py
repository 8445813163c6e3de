"""Which failed trials Tune retries.

Tune retries a failed trial up to `resources.max_failures` times (`FailureConfig`): worth it for
a process or node that was lost, not for a failure that the same settings make again, a fit that
diverged or a setting the trial refused. Such a trial reports `FAILED_FOR_GOOD` before it raises;
`NoRetryForGood`, on the driver, then leaves it no retry (one would start a trial process only to
read the failure back from MLflow).
"""

from typing import Any

from ray.tune import Callback

FAILED_FOR_GOOD = "spanlift.failed_for_good"
"""A trial's last report before it raises a failure that a retry would repeat."""


class NoRetryForGood(Callback):
    """Leaves no retry to a trial that reported `FAILED_FOR_GOOD`: a trial is retried while its
    failures are at most its `max_failures`, and the report comes before the failure it
    announces."""

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        if result.get(FAILED_FOR_GOOD):
            trial.max_failures = trial.run_metadata.num_failures
