"""The random searcher (`searchers/random.py`): `search: {algorithm: random, num_samples: N}`
measures N distinct configurations drawn at random, the same ones for the same seed, whatever
order its trials finish in."""

from pathlib import Path

import pytest
from ray.tune.search import Searcher

from spanlift.platform.sweep.config import SweepConfigError, parse_sweep
from spanlift.platform.sweep.distinct_search import DistinctSearch, identity
from spanlift.platform.sweep.driver import searcher_for
from spanlift.platform.sweep.space import decode
from spanlift.platform.sweep.summary import expected_configurations
from spanlift.platform.sweep.trial import SweepContext

SWEEP = {
    "experiment": "random",
    "backbone": "gmm",
    "solvers": [
        {"name": "ipndm", "nfe": [3, 4, 5], "search": {"order": [1, 2, 3]}},
        {"name": "dyweight", "nfe": [3, 4]},
    ],
    "search": {"algorithm": "random", "num_samples": 6},
    "fit": {"seed": 3},
}


def sweep(**search) -> dict:
    return {**SWEEP, "search": {**SWEEP["search"], **search}}


def drive(config, tmp_path: Path, lag: int = 1, last_first: bool = False) -> list[dict]:
    """The configurations the sweep's searcher runs, driven as Tune drives it (the store left
    out), `lag` trials at once, the oldest or the newest finishing first."""
    searcher, trials = searcher_for(SweepContext(config, tmp_path, None, ""), lag)
    assert isinstance(searcher, DistinctSearch)
    searcher.lookup = None
    made, running = [], {}
    while len(made) < trials or running:
        while len(running) < lag and len(made) < trials:
            params = searcher.suggest(f"t{len(made)}")
            if params is None or params == Searcher.FINISHED:
                break
            running[f"t{len(made)}"] = params
            made.append(params)
        if not running:
            break
        trial = sorted(running, key=lambda t: int(t[1:]))[-1 if last_first else 0]
        searcher.on_trial_complete(trial, {config.search_metric: len(identity(running.pop(trial)))})
    return made


def test_a_random_sweep_measures_num_samples_distinct_configurations(tmp_path: Path) -> None:
    config = parse_sweep(sweep())
    assert config.algorithm == "random" and expected_configurations(config) == 6
    made = drive(config, tmp_path)
    assert len({identity(p) for p in made}) == len(made) == 6
    assert all(decode(p, config) in config.grid() for p in made)


def test_the_same_seed_draws_the_same_configurations(tmp_path: Path) -> None:
    made = drive(parse_sweep(sweep()), tmp_path)
    assert drive(parse_sweep(sweep(seed=3)), tmp_path) == made  # no seed: the fit's
    assert drive(parse_sweep(sweep()), tmp_path, lag=2, last_first=True) == made
    assert drive(parse_sweep(sweep(seed=4)), tmp_path) != made


def test_num_samples_covering_the_space_runs_each_configuration_once(tmp_path: Path) -> None:
    config = parse_sweep(sweep(num_samples=20))
    searcher, trials = searcher_for(SweepContext(config, tmp_path, None, ""), 1)
    assert trials == expected_configurations(config) == 11
    assert not isinstance(searcher, DistinctSearch)


def test_its_options_are_checked_naming_the_key() -> None:
    with pytest.raises(SweepConfigError, match=r"x\.yaml: search\.num_samples: expected a pos"):
        parse_sweep(sweep(num_samples=0), "x.yaml")
