"""The stopping rule: with `patience` p a fit stops after p validations without a gain beyond the
noise (one paired standard error, as the kept state's rule), `iterations` the cap; the run records
how many iterations it ran and what ended it. Without it (p = 0) a fit is what it was."""

import itertools
import time

import pytest
import torch
from mlflow.tracking import MlflowClient

from spanlift.cli import main
from spanlift.errors import SettingsError
from spanlift.platform.fitting import fit as fitting
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.platform.sweep.config import parse_sweep
from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.loading import build
from spanlift.solvers.on_base import searched

PLATEAU = {"iterations": 2000, "lr": 5e-3, "validate_every": 25, "batch_size": 32}
"""A cap far past convergence: the cosine decay keeps the rate high for hundreds of iterations
after the validation loss stops falling beyond its noise (measured: it stops at 625 of 2000)."""


@pytest.fixture(scope="module")
def sets(gmm):
    """(train, validation) teacher sets on disjoint seeds."""
    train = generate_teacher(gmm, range(256), progress=False)
    return train, generate_teacher(gmm, range(5000, 5128), progress=False)


def dyweight(gmm):
    return build_solver(SolverSpec("dyweight", 3), gmm.sigma_min, gmm.sigma_max, 1)


def fitted(gmm, sets, settings, **kwargs):
    solver = dyweight(gmm)
    result = fit(solver, gmm, sets[0], settings, progress=False, validation=sets[1], **kwargs)
    return solver, result


def test_a_plateaued_fit_stops_before_its_cap(gmm, sets):
    settings = FitSettings(**PLATEAU, patience=3)
    _, result = fitted(gmm, sets, settings)
    assert result.stopped_by == "rule"
    assert result.iterations_run < settings.iterations
    assert len(result.losses) == result.iterations_run == max(result.validation)
    assert result.iterations_run % settings.validate_every == 0
    assert result.best_iteration <= result.iterations_run


def test_a_fit_still_improving_at_its_cap_records_the_cap(gmm, sets):
    settings = FitSettings(iterations=40, lr=5e-3, validate_every=10, warmup=5, patience=2)
    _, result = fitted(gmm, sets, settings)
    curve = [result.validation[i] for i in sorted(result.validation)]
    assert all(later < earlier for earlier, later in itertools.pairwise(curve))  # still falling
    assert (result.stopped_by, result.iterations_run) == ("cap", 40)


def test_without_patience_a_fit_is_what_it_was(gmm, sets):
    plain = FitSettings(iterations=60, lr=5e-3, validate_every=10)
    runs = [
        fitted(gmm, sets, s)
        for s in (plain, FitSettings(**{**plain.to_dict(), "patience": 0}), plain.updated({}))
    ]
    never = fitted(gmm, sets, plain.updated({"patience": 100}))  # the rule on, never reached
    (solver, result), others = runs[0], [*runs[1:], never]
    for other_solver, other in others:
        assert other.losses == result.losses and other.validation == result.validation
        assert other.best_iteration == result.best_iteration
        weights, other_weights = solver.state_dict(), other_solver.state_dict()
        assert all(torch.equal(weights[k], other_weights[k]) for k in weights)
    assert (result.stopped_by, result.iterations_run) == ("cap", 60)
    assert FitSettings(patience=0).to_dict() == FitSettings().to_dict()  # keys unchanged
    assert "patience" not in FitSettings().to_dict()
    assert FitSettings(patience=3).identity()["patience"] == 3


def test_a_stopped_fit_resumed_from_its_last_state_stays_stopped(gmm, sets):
    settings = FitSettings(**{**PLATEAU, "checkpoint_every": 100}, patience=3)
    states = []
    solver, result = fitted(gmm, sets, settings, report=lambda m, s: s and states.append(s))
    assert states[-1]["iteration"] == result.iterations_run and states[-1]["stopped_by"] == "rule"
    again, resumed = fitted(gmm, sets, settings, resume=states[-1])
    assert (resumed.stopped_by, resumed.iterations_run) == ("rule", result.iterations_run)
    assert resumed.losses == result.losses and resumed.best_iteration == result.best_iteration
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in solver.state_dict().items())


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_bad_patience_is_one_line(value):
    with pytest.raises(SettingsError, match="patience") as caught:
        FitSettings(patience=value)
    assert "\n" not in str(caught.value)


def test_patience_without_validation_is_refused_in_one_line(gmm, sets):
    settings = FitSettings(iterations=10, validation=0.0, patience=2)
    with pytest.raises(SettingsError, match="patience") as caught:
        fit(dyweight(gmm), gmm, sets[0], settings, progress=False)
    assert "\n" not in str(caught.value)


def test_the_sweep_file_and_spanlift_fit_take_patience(capsys):
    config = parse_sweep(
        {
            "experiment": "t",
            "backbone": "gmm",
            "solvers": [{"name": "dyweight", "nfe": 3}],
            "fit": {"patience": 3},
        }
    )
    assert config.fit.patience == 3 and config.fit.to_dict()["patience"] == 3
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    assert "--patience" in capsys.readouterr().out


def test_the_fitted_solver_carries_what_ended_its_fit(gmm, sets, tmp_path):
    settings = FitSettings(**PLATEAU, patience=3)
    spec = SolverSpec("dyweight", 3)
    fitted = fit_spec(spec, gmm, sets[0], settings, tmp_path, progress=False, validation=sets[1])
    ran = fitted.metrics()["fit.iterations_run"]
    assert 0 < ran < settings.iterations and fitted.params()["fit.stopped_by"] == "rule"
    again = fit_spec(spec, gmm, sets[0], settings, tmp_path, progress=False, validation=sets[1])
    assert again.metrics()["fit.iterations_run"] == ran  # read from the kept checkpoint
    assert again.params()["fit.stopped_by"] == "rule"


def test_spanlift_fit_records_iterations_run_and_what_stopped_it(tmp_path, monkeypatch, uri):
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    args = ["fit", "--backbone", "gmm", "--nfe", "3", "--solver", "dyweight", "--threads", "1"]
    args += ["--train-samples", "16", "--validation-samples", "8", "--test-samples", "8"]
    try:
        assert main([*args, "--iterations", "30", "--patience", "1", "--tracking-uri", uri]) == 0
    finally:
        torch.set_num_threads(threads)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fit").experiment_id])
    assert run.data.params["fit.stopped_by"] in ("rule", "cap")
    assert run.data.params["fit.patience"] == "1"
    ran = run.data.metrics["fit.iterations_run"]
    assert 0 < ran <= 30 and (ran == 30) == (run.data.params["fit.stopped_by"] == "cap")
    assert "fit_seconds" in run.data.metrics


@pytest.mark.parametrize(
    "spec",
    [SolverSpec("gits", 3, settings={"base": "ipndm"}), SolverSpec("dyweight", 3)],
    ids=["a search", "a fit"],
)
def test_a_fits_seconds_count_what_it_does_before_its_first_update(gmm, sets, monkeypatch, spec):
    """A solver's own search or estimate (`prepare`: GITS's and OSS's grids, DPM-Solver-v3's
    statistics) is part of what its fit costs: OSS's search on digits takes minutes a fit seed on
    2 cores, its updates under a second."""
    solver = build(spec, gmm)
    search = searched(solver)  # no search: the fit's own `prepare` step, slowed
    owner = fitting if search is None else type(search)
    before = owner.prepare

    def slow(*args):
        time.sleep(0.5)
        return before(*args)

    monkeypatch.setattr(owner, "prepare", slow)
    settings = FitSettings(iterations=5, validate_every=5, batch_size=8)
    result = fit(solver, gmm, sets[0], settings, progress=False, validation=sets[1])
    assert result.seconds >= 0.5
    assert min(t for i, t in result.validation_seconds.items() if i > 0) >= 0.5
