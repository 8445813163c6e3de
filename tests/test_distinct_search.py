"""TPE over distinct configurations: a proposal already measured is answered without a trial,
and the proposals do not depend on the order trials finish in. Driven as Tune drives a searcher
(suggest, then on_trial_complete), without Ray."""

import optuna
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from spanlift.platform.sweep.config import parse_sweep
from spanlift.platform.sweep.distinct_search import DistinctSearch, identity
from spanlift.platform.sweep.space import SolverSpace

SWEEP = {
    "experiment": "tpe",
    "backbone": "gmm",
    "solvers": [
        {"name": "dyweight", "nfe": [3, 4]},
        {
            "name": "spanlift",
            "nfe": [3, 4],
            "settings": {"base": "dyweight"},
            "search": {"kernel_size": [1, 3, 5], "hidden_dim": [8, 16]},
        },
    ],
    "search": {"algorithm": "tpe", "num_samples": 10, "metric": "rmse"},
}


def searcher(lag: int = 1, lookup=None) -> DistinctSearch:
    config = parse_sweep(SWEEP)
    sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=4)
    inner = OptunaSearch(
        SolverSpace(config), metric=config.search_metric, mode="min", sampler=sampler
    )
    return DistinctSearch(inner, config, lag=lag, lookup=lookup)


def value(params: dict) -> float:
    """A made-up validation value: a function of the configuration alone."""
    return (hash(identity(params)) % 1000) / 1000


def drive(search: DistinctSearch, trials: int, finish_order) -> list[str]:
    """Tune's loop at the searcher's concurrency: suggest while a slot is free, finish running
    trials in the order `finish_order` picks; the configurations proposed, in order."""
    proposed, running, made = [], {}, 0
    while len(proposed) < trials or running:
        while len(running) < search.lag and len(proposed) < trials:
            trial = f"t{made}"
            params = search.suggest(trial)
            if params is None:
                break
            if params == Searcher.FINISHED:
                trials = len(proposed)
                break
            running[trial] = params
            proposed.append(identity(params))
            made += 1
        if not running:
            break
        trial = finish_order(sorted(running))
        params = running.pop(trial)
        search.on_trial_complete(trial, {"val_rmse": value(params)})
    return proposed


def test_every_trial_is_a_new_configuration_and_repeats_are_answered() -> None:
    search = searcher()
    proposed = drive(search, 10, lambda running: running[0])
    assert len(proposed) == len(set(proposed)) == 10
    assert search.answered == search.asked - 10 > 0  # TPE did propose repeats


def test_the_proposals_do_not_depend_on_which_trial_finishes_first() -> None:
    first = drive(searcher(lag=2), 10, lambda running: running[0])
    last = drive(searcher(lag=2), 10, lambda running: running[-1])
    assert first == last


def test_a_configuration_in_the_store_is_answered_without_a_trial() -> None:
    stored = {}
    plain = drive(searcher(), 6, lambda running: running[0])
    known = plain[2]
    stored[known] = 0.123

    def lookup(params: dict) -> float | None:
        return stored.get(identity(params))

    search = searcher(lookup=lookup)
    proposed = drive(search, 6, lambda running: running[0])
    assert known not in proposed and len(set(proposed)) == 6
    assert search.answered >= 1


def test_an_exhausted_space_ends_the_search() -> None:
    search = searcher()
    proposed = drive(search, 100, lambda running: running[0])
    assert len(proposed) == len(set(proposed)) == 14  # the whole space, each once


def test_a_space_no_larger_than_num_samples_runs_as_a_grid() -> None:
    config = parse_sweep(SWEEP)
    assert config.search.repeats(len(config.trials()))  # inside the distinct layer
    small = parse_sweep({**SWEEP, "search": {**SWEEP["search"], "num_samples": 14}})
    assert not small.search.repeats(len(small.trials()))
