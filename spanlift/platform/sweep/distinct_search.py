"""A sampling searcher (TPE, …) over distinct configurations, deterministic at a given concurrency.

An Optuna sampler proposes configurations it has already seen (TPE: 14 asked, 6 distinct); Tune
would run each proposal as a trial, so a sweep of `num_samples` trials measured fewer
configurations. The driver so wraps every searcher whose proposals can repeat
(`SearchAlgorithm.repeats`), which searches the space by entry (`space.py`). Here:

- **A proposal already measured is answered, not run.** Its value (the mean validation value of
  the search metric over its replicates), from this sweep or from the MLflow store (finished runs
  of this code version), is told to Optuna without a trial; a proposal of a configuration still
  running gets its value when that one's is told. Tune's `num_samples` so counts distinct
  configurations. After `REPEATS` known proposals in a row, the first configuration of the space
  not yet measured is run instead (TPE has converged; the sweep still measures what it was asked
  to), and when none is left the search ends.
- **The same sweep proposes the same configurations.** Proposal k is made when Optuna knows the
  results of exactly proposals 0 … k − c (c trials run at once), told in proposal order: what TPE
  has seen when it proposes k does not depend on which trial finished first.
"""

import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from spanlift.platform.sweep.config import SweepConfig
from spanlift.platform.sweep.space import space_points

REPEATS = 100
"""Known proposals in a row after which the next configuration not yet measured runs instead."""

Lookup = Callable[[dict[str, Any]], float | None]
"""A Tune config → the value a finished run in the store measured for it, or None."""


def identity(params: dict[str, Any]) -> str:
    """A Tune config as a key: the same configuration gives the same key."""
    return json.dumps(params, sort_keys=True, default=str)


@dataclass
class Proposal:
    """A configuration run as a trial: its Optuna trial ("" when TPE did not propose it), the
    Optuna trials that proposed it again, and its result once done."""

    key: str
    optuna_ids: list[str] = field(default_factory=list)
    value: float | None = None
    done: bool = False


@dataclass
class DistinctSearch(Searcher):
    inner: OptunaSearch
    config: SweepConfig
    lag: int = 1
    """Trials running at once: proposal k waits for the results of proposals 0 … k − lag."""
    lookup: Lookup | None = None
    """Values already in the store (plain data, saved with the Tuner; see `StoredValues`)."""
    proposals: list[Proposal] = field(default_factory=list)
    """Every configuration run as a trial, in proposal order."""
    by_trial: dict[str, int] = field(default_factory=dict)
    """Tune trial id → its index in `proposals`."""
    told: int = 0
    """Proposals whose results Optuna knows, in order."""
    answered: int = 0
    """Proposals answered from values already measured, without a trial."""
    asked: int = 0

    def __post_init__(self) -> None:
        Searcher.__init__(self, metric=self.config.search_metric, mode=self.config.mode)

    def set_search_properties(self, metric: Any, mode: Any, config: Any, **spec: Any) -> bool:
        return True  # the sweep's metric and space are the inner searcher's already

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if not self.tell_until(len(self.proposals) - self.lag + 1):
            return None  # an earlier proposal's result is still to come: Tune asks again later
        for _ in range(REPEATS):
            self.asked += 1
            optuna_id = f"proposal-{self.asked}"
            params = self.inner.suggest(optuna_id)
            if params is None or params == Searcher.FINISHED:
                return params
            if not self.answer(optuna_id, params):
                return self.run(trial_id, params, [optuna_id])
        unmeasured = [p for p in space_points(self.config) if not self.known(p)]
        return self.run(trial_id, unmeasured[0], []) if unmeasured else Searcher.FINISHED

    def run(self, trial_id: str, params: dict[str, Any], optuna_ids: list[str]) -> dict:
        self.by_trial[trial_id] = len(self.proposals)
        self.proposals.append(Proposal(identity(params), optuna_ids))
        return params

    def known(self, params: dict[str, Any]) -> bool:
        key = identity(params)
        in_sweep = any(p.key == key for p in self.proposals)
        return in_sweep or (self.lookup is not None and self.lookup(params) is not None)

    def answer(self, optuna_id: str, params: dict[str, Any]) -> bool:
        """Answer a proposal of a configuration already measured or running (False: a new one)."""
        key = identity(params)
        earlier = next((p for p in self.proposals if p.key == key), None)
        if earlier is not None:
            earlier.optuna_ids.append(optuna_id)  # told with it, in its turn
            if self.proposals.index(earlier) < self.told:
                self.inner.on_trial_complete(optuna_id, self.result(earlier), earlier.value is None)
        elif (value := self.lookup(params) if self.lookup else None) is not None:
            self.inner.on_trial_complete(optuna_id, {self.metric: value})
        else:
            return False
        self.answered += 1
        return True

    def result(self, proposal: Proposal) -> dict[str, float] | None:
        return None if proposal.value is None else {self.metric: proposal.value}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass  # intermediate results (a fit's loss) are not the search metric

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        index = self.by_trial.get(trial_id)
        if index is not None:
            proposal = self.proposals[index]
            proposal.value = None if error else (result or {}).get(self.metric)
            proposal.done = True

    def tell_until(self, count: int) -> bool:
        """Tell Optuna the results of the first `count` proposals, in order; False while one of
        them is still running."""
        while self.told < count:
            proposal = self.proposals[self.told]
            if not proposal.done:
                return False
            for optuna_id in proposal.optuna_ids:
                self.inner.on_trial_complete(
                    optuna_id, self.result(proposal), proposal.value is None
                )
            self.told += 1
        return True

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as file:
            pickle.dump(self.__dict__, file)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as file:
            self.__dict__.update(pickle.load(file))
