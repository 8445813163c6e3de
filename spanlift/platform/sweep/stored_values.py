"""What the MLflow store already measured for a configuration of a sweep: the value its searcher
would get from running it (`distinct_search.py` answers such a proposal without a trial)."""

from dataclasses import dataclass
from typing import Any

from spanlift.platform.configuration import code_version
from spanlift.platform.sweep.context import SweepContext, for_replicate
from spanlift.platform.sweep.replicate import configuration
from spanlift.platform.sweep.trial import Trial
from spanlift.platform.tracking.runs import ConfigurationRuns


@dataclass(frozen=True)
class StoredValues:
    """A Tune config → the mean of the search metric on validation seeds over the replicates of
    its configuration that finished with this code version (any version with `reuse_across_
    versions`); None unless every replicate did. Plain data, so Tune can save it with its
    searcher."""

    context: SweepContext

    def __call__(self, params: dict[str, Any]) -> float | None:
        context = self.context
        trial = Trial.of(params, context.config)
        runs = ConfigurationRuns(context.tracking_uri, context.config.experiment)
        version = None if context.reuse_across_versions else code_version()
        values = []
        for seed in trial.seeds(context.config):
            result = configuration(trial.spec, for_replicate(context, trial.entry, seed))
            found = runs.find(result.key(), version)
            value = found.metrics.get(context.config.search_metric) if found else None
            if found is None or found.status != "FINISHED" or value is None:
                return None
            values.append(value)
        return sum(values) / len(values)
