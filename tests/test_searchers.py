"""Searchers are plug-ins (`platform/sweep/searchers/`): `search.algorithm` names one and its
options sit beside it; the config reader, the driver, the summary and the stored sweep ask it,
never its name. A Tune config is written and read in one module (`space.py`)."""

import importlib
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

import spanlift
from spanlift.platform.sweep.config import SweepConfig, SweepConfigError, parse_sweep
from spanlift.platform.sweep.distinct_search import DistinctSearch
from spanlift.platform.sweep.driver import searcher_for
from spanlift.platform.sweep.searchers import SEARCHERS
from spanlift.platform.sweep.space import SearchSpace, decode, longest_first, space_points
from spanlift.platform.sweep.summary import expected_configurations
from spanlift.platform.sweep.trial import SweepContext, Trial

SWEEP = {
    "experiment": "searchers",
    "backbone": "gmm",
    "solvers": [
        {"name": "ipndm", "nfe": [3, 4], "search": {"order": [1, 2, 3]}},
        {"name": "dyweight", "nfe": [3, 4]},
    ],
    "fit": {"iterations": 20, "seed": 5},
}


def sweep(search: dict | None = None) -> dict:
    return {**SWEEP, **({"search": search} if search is not None else {})}


def proposals(config, tmp_path: Path, count: int) -> list[dict]:
    """What the sweep's searcher proposes first, the store left out."""
    searcher, _ = searcher_for(SweepContext(config, tmp_path, None, ""), 1)
    if isinstance(searcher, DistinctSearch):
        searcher.lookup = None
    made = []
    for i in range(count):
        made.append(searcher.suggest(f"t{i}"))
        searcher.on_trial_complete(f"t{i}", {config.search_metric: float(i % 3)})
    return made


def test_the_algorithm_is_checked_against_the_registered_searchers() -> None:
    with pytest.raises(SweepConfigError) as error:
        parse_sweep(sweep({"algorithm": "simplex"}), "x.yaml")
    message = str(error.value)
    assert message.startswith("x.yaml: search.algorithm: expected one of ") and "\n" not in message
    assert all(name in message for name in SEARCHERS.names())


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"algorithm": "tpe", "num_samples": 0}, "search.num_samples: expected a positive integer"),
        ({"algorithm": "tpe", "num_samples": True}, "search.num_samples: expected a positive"),
        ({"algorithm": "tpe", "seed": -1}, "search.seed: expected a non-negative integer, got -1"),
        (
            {"algorithm": "grid", "num_samples": 5},
            "search.num_samples: unknown key; the keys here are: algorithm, metric, mode",
        ),
    ],
)
def test_a_searchers_options_are_checked_naming_the_key(search: dict, message: str) -> None:
    with pytest.raises(SweepConfigError) as error:
        parse_sweep(sweep(search), "x.yaml")
    assert str(error.value).startswith(f"x.yaml: {message}")


def test_the_options_are_the_searchers_dataclass() -> None:
    config = parse_sweep(sweep({"algorithm": "tpe", "num_samples": 4, "seed": 9}))
    assert config.search == SEARCHERS.get("tpe")(num_samples=4, seed=9)
    assert config.algorithm == "tpe" and expected_configurations(config) == 4
    assert parse_sweep(sweep()).search == SEARCHERS.get("grid")()  # no search: the grid


def test_the_stored_sweep_keeps_its_form() -> None:
    """`--resume` compares the stored sweep.yaml with the file, and the sweep's parent run is
    keyed by it: the searcher is stored as `algorithm` and `num_samples` where it always was, an
    option left unset is left out."""
    grid = parse_sweep(sweep()).as_dict()
    keys = list(grid)
    assert keys[keys.index("solvers") + 1 : keys.index("mode") + 1] == [
        "algorithm",
        "num_samples",
        "metric",
        "mode",
    ]
    assert (grid["algorithm"], grid["num_samples"]) == ("grid", 0) and "search" not in grid
    tpe = parse_sweep(sweep({"algorithm": "tpe", "num_samples": 4})).as_dict()
    assert (tpe["algorithm"], tpe["num_samples"]) == ("tpe", 4) and "seed" not in tpe
    assert parse_sweep(sweep({"algorithm": "tpe", "seed": 9})).as_dict()["seed"] == 9


def test_the_grid_proposes_every_configuration_once_the_longest_first(tmp_path: Path) -> None:
    config = parse_sweep(sweep())
    made = proposals(config, tmp_path, len(config.trials()))
    assert made == [{"trial": i} for i in longest_first(config)]
    assert sorted(p["trial"] for p in made) == list(range(8))
    assert [decode(p, config)[1].name for p in made[:2]] == ["dyweight", "dyweight"]  # fitted


def test_tpe_samples_by_entry_inside_the_distinct_layer_seeded_by_its_option(
    tmp_path: Path,
) -> None:
    def tpe(**options) -> list[dict]:
        config = parse_sweep(sweep({"algorithm": "tpe", "num_samples": 6, **options}))
        return proposals(config, tmp_path, 6)

    made = tpe()
    assert all("entry" in p for p in made) and len({str(p) for p in made}) == 6
    assert tpe(seed=5) == made  # no seed: the fit's
    assert tpe(seed=6) != made
    covered = parse_sweep(sweep({"algorithm": "tpe", "num_samples": 8}))
    searcher, trials = searcher_for(SweepContext(covered, tmp_path, None, ""), 1)
    assert not isinstance(searcher, DistinctSearch) and trials == 8  # runs as the grid
    assert searcher.suggest("t0") == {"trial": longest_first(covered)[0]}


def test_every_point_of_either_encoding_decodes_to_its_configuration() -> None:
    config = parse_sweep(sweep())
    assert [decode(p, config) for p in space_points(config)] == config.grid()
    by_index = [decode(p, config) for p in SearchSpace(config).longest_first()]
    assert sorted(by_index, key=config.grid().index) == config.grid()


def test_saved_tune_states_find_what_they_name() -> None:
    """A Tune state pickles its searcher and trial namer by module path and holds its trials'
    parameters by name: `--resume` of a sweep saved earlier reads both."""
    for path in (
        "spanlift.platform.sweep.driver.FinalMetricOptunaSearch",
        "spanlift.platform.sweep.driver.TrialName",
        "spanlift.platform.sweep.driver.SolverSpace",
        "spanlift.platform.sweep.space.SolverSpace",
        "spanlift.platform.sweep.distinct_search.DistinctSearch",
        "spanlift.platform.sweep.distinct_search.Proposal",
        "spanlift.platform.sweep.stored_values.StoredValues",
    ):
        module, name = path.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), name), path
    config = parse_sweep(sweep())
    assert decode({"trial": 2}, config) == config.grid()[2]
    assert decode({"entry": 0, "0.nfe": 4, "0.order": 2}, config) == config.grid()[4]


def test_a_config_pickled_with_its_searcher_in_two_fields_gets_it_back() -> None:
    """A Tune state pickles the sweep's config with its searcher (in `SolverSpace`, in the store
    lookup of the distinct layer); one holding `algorithm` and `num_samples` fields is read into
    the searcher they name, and the config is still replaced field by field."""
    config = parse_sweep(sweep({"algorithm": "tpe", "num_samples": 4}))
    fields = {k: v for k, v in vars(config).items() if k != "search"}
    saved = SweepConfig.__new__(SweepConfig)
    vars(saved).update(fields, algorithm="tpe", num_samples=4)
    restored = pickle.loads(pickle.dumps(saved))
    assert restored.search == config.search and restored.as_dict() == config.as_dict()
    assert replace(restored, fit=replace(restored.fit, seed=1)).fit.seed == 1
    assert pickle.loads(pickle.dumps(config)) == config


def test_no_searcher_is_named_outside_its_own_file() -> None:
    root = Path(spanlift.__file__).parent
    generic = [
        p
        for p in root.rglob("*.py")
        if "searchers" not in p.parts and {"platform", "cli"} & set(p.parts)
    ]
    for name in SEARCHERS.names():
        for quoted in (f'"{name}"', f"'{name}'"):
            named = [str(p) for p in generic if quoted in p.read_text()]
            assert not named, f"{quoted} in {named}"


def test_a_configuration_is_built_once_when_the_sweep_is_read(monkeypatch) -> None:
    """Reading the sweep builds each configuration to check it and records whether it learns;
    ordering the grid and starting a trial ask the entry instead of building it again."""
    config = parse_sweep(sweep())
    built = []
    original = spanlift.solvers.loading.build_solver

    def counted(*args, **kwargs):
        built.append(args[0])
        return original(*args, **kwargs)

    for module in ("platform.sweep.solver_entry", "platform.sweep.space", "platform.sweep.trial"):
        found = importlib.import_module(f"spanlift.{module}")
        if hasattr(found, "build_solver"):
            monkeypatch.setattr(found, "build_solver", counted)
    order = longest_first(config)
    trials = [Trial.of({"trial": index}, config) for index in range(len(config.trials()))]
    assert built == []
    assert [t.learns for t in trials] == [False] * 6 + [True] * 2  # ipndm ×6, dyweight ×2
    assert sorted(order[:2]) == [6, 7]  # the fitted ones first
    assert "learned" not in str(config.as_dict())  # the stored sweep holds settings only
