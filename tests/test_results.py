"""A configuration's result: keys that stay the same, one fit cache, params of its run."""

from pathlib import Path

import pytest

from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.results import fit_cache
from spanlift.platform.results.fit_cache import FitCache, Fitted
from spanlift.platform.results.tracking import configuration_params
from spanlift.solvers import Solver, SolverSpec, save_solver

TEACHER = SolverSpec("heun", 18)
SPANLIFT = SolverSpec("spanlift", 3, "edm", {"base": "dyweight", "kernel_size": 3})


@pytest.mark.parametrize(
    ("configuration", "fit_key", "key"),
    [
        (  # a sweep trial: the teacher's train and test cache entries
            Configuration(
                "gmm",
                {},
                SPANLIFT,
                teacher_identity(TEACHER, "teacher-abc", "teacher-def"),
                fit={"iterations": 20, "workers": 1},
                evaluation={"metrics": ["fid"]},
            ),
            "e15de87e24c42e0d27b0",
            "084cac4923ff6c7e6525",
        ),
        (  # spanlift eval: the teacher solver only
            Configuration(
                "gmm",
                {},
                SPANLIFT,
                teacher_identity(TEACHER),
                evaluation={"samples": 100, "detector": "", "reference": "teacher"},
                checkpoint="0123456789ab",
            ),
            "8910a4e35b1ea1fa9580",
            "5dc56ace84c71c0b963b",
        ),
        (  # the nowcast suite: the number of training windows
            Configuration(
                "nowcast",
                {"data": "x"},
                SPANLIFT,
                teacher_identity(TEACHER, 32),
                fit={"loss": "mse"},
                evaluation={"samples": 10, "metrics": ["skill", "lpips"]},
            ),
            "ae2d85342a944754a1ea",
            "32de83cd7eac31be9b93",
        ),
    ],
)
def test_keys_of_earlier_results_are_unchanged(configuration, fit_key, key) -> None:
    # digests of the configurations as each command wrote them before they shared one builder
    assert (configuration.fit_key(), configuration.key()) == (fit_key, key)


def cache(folder: Path, **fit: object) -> FitCache:
    template = Configuration("gmm", {}, SPANLIFT, teacher_identity(TEACHER, "t"), fit=fit)
    return FitCache(folder, template)


def test_the_fit_cache_builds_each_solver_once_and_fits_it_once(gmm, tmp_path, monkeypatch):
    builds, fits = [], []
    counted = fit_cache.build
    monkeypatch.setattr(
        fit_cache, "build", lambda spec, bb, seed=0: builds.append(spec) or counted(spec, bb, seed)
    )

    def fit_one(solver: Solver, out: Path) -> Fitted:
        fits.append(out)
        return Fitted.from_checkpoint(solver, save_solver(out, solver), seconds=1.0)

    spec = SolverSpec("dyweight", 3)
    first = cache(tmp_path, lr=0.1).fitted(spec, gmm, fit_one)
    again = cache(tmp_path, lr=0.1).fitted(spec, gmm, fit_one)
    other = cache(tmp_path, lr=0.2).fitted(spec, gmm, fit_one)
    assert (len(builds), len(fits)) == (3, 2)  # one build per call; the same fit is kept
    assert (first.seconds, again.seconds, again.path) == (1.0, 0.0, first.path)
    assert other.path != first.path  # other fit settings, other weights
    plain = cache(tmp_path).fitted(SolverSpec("heun", 3), gmm, fit_one)
    assert plain.path is None and len(fits) == 2  # nothing to fit


def test_a_fit_taken_from_the_cache_records_the_seconds_its_checkpoint_took(gmm, tmp_path):
    """A run that fitted nothing itself (0 s of its own) records the seconds of the fit that
    made the checkpoint it took, a two-stage fit's base included, so its row shows a fit cost."""

    def fit_one(solver: Solver, out: Path) -> Fitted:
        seconds = 3.0 if solver.spec.name == "spanlift" else 2.0
        metadata = {"fit_seconds": seconds}
        if solver.spec.name == "spanlift":
            metadata["base_fit_seconds"] = 2.0
        return Fitted.from_checkpoint(solver, save_solver(out, solver, metadata), seconds=seconds)

    spec = SolverSpec("spanlift", 3, settings={"base": "dyweight"})
    made = cache(tmp_path, lr=0.1).fitted(spec, gmm, fit_one)
    taken = cache(tmp_path, lr=0.1).fitted(spec, gmm, fit_one)
    assert made.metrics()["fit_seconds"] == 5.0 and "fit.cached_seconds" not in made.metrics()
    assert taken.metrics()["fit_seconds"] == 0.0
    assert taken.metrics()["fit.cached_seconds"] == 5.0


def test_a_run_names_its_training_teacher_only_when_it_had_one() -> None:
    trained = Configuration("gmm", {}, SPANLIFT, teacher_identity(TEACHER, 8), fit={"lr": 0.1})
    params = configuration_params(trained)
    assert params["teacher"] == "heun nfe=18" and params["fit.lr"] == 0.1
    assert params["nfe"] == 3 and params["base"] == "dyweight"
    evaluated = Configuration("gmm", {}, SPANLIFT, teacher_identity(TEACHER))
    assert "teacher" not in configuration_params(evaluated)


def test_two_trials_that_need_the_same_fit_fit_it_once(gmm, tmp_path) -> None:
    """The second waits for the first's fit, then reads it from the cache."""
    import threading
    import time

    fits, started = [], threading.Event()

    def slow_fit(solver: Solver, out: Path) -> Fitted:
        fits.append(out)
        started.set()
        time.sleep(0.5)
        return Fitted.from_checkpoint(solver, save_solver(out, solver), seconds=1.0)

    results = []

    def trial() -> None:
        results.append(cache(tmp_path, lr=0.1).fitted(SolverSpec("dyweight", 3), gmm, slow_fit))

    first = threading.Thread(target=trial)
    first.start()
    started.wait(5)
    trial()  # meanwhile, in this thread
    first.join()
    assert len(fits) == 1 and {r.path for r in results} == {fits[0]}
    assert sorted(r.seconds for r in results) == [0.0, 1.0]
