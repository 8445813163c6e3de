"""Endpoint teacher matching: the learned solvers beat their starting points on held-out seeds."""

import copy
from pathlib import Path

import pytest
import torch

from spanlift.backbones.gmm import GaussianMixture
from spanlift.errors import SettingsError, TrainingDivergedError, UnknownNameError
from spanlift.platform.fitting.compare import compare, fit_spec
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.fitting.optimization import warmup_cosine
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.loading import load_solver


def build(gmm, name, nfe=3, **settings):
    return build_solver(SolverSpec(name, nfe, "edm", settings), gmm.sigma_min, gmm.sigma_max, 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_dyweight_beats_ipndm_and_spanlift_beats_dyweight(gmm, gmm_teacher, tmp_path, seed):
    train, test = gmm_teacher
    settings = FitSettings(iterations=120, batch_size=32, lr=5e-3, seed=seed)
    ipndm = endpoint_rmse(build(gmm, "ipndm", order=3), gmm, test)
    dyweight = fit_spec(
        SolverSpec("dyweight", 3), gmm, train, settings, tmp_path, progress=False
    ).solver
    spanlift_spec = SolverSpec("spanlift", 3, settings={"base": "dyweight", "hidden_dim": 16})
    spanlift = fit_spec(spanlift_spec, gmm, train, settings, tmp_path, progress=False).solver
    dyweight_rmse, spanlift_rmse = (
        endpoint_rmse(dyweight, gmm, test),
        endpoint_rmse(spanlift, gmm, test),
    )
    assert dyweight_rmse < 0.8 * ipndm
    assert spanlift_rmse < 0.95 * dyweight_rmse


def test_compare_returns_the_checkpoint_of_a_two_stage_spanlift(gmm, gmm_teacher, tmp_path):
    train, test = gmm_teacher
    settings = FitSettings(iterations=30, batch_size=32, lr=5e-3, seed=0)
    spec = SolverSpec("spanlift", 3, settings={"base": "dyweight", "hidden_dim": 8})
    (row,) = compare([spec], gmm, train, test, settings, tmp_path, progress=False)
    assert row.checkpoint  # fitted on a DyWeight base fitted first
    reloaded = load_solver(spec, Path(row.checkpoint), gmm)
    assert endpoint_rmse(reloaded, gmm, test) == pytest.approx(row.rmse, rel=1e-6)
    assert row.rmse < endpoint_rmse(build(gmm, "ipndm", order=3), gmm, test)


def test_fit_is_deterministic_under_a_seed(gmm, gmm_teacher):
    train, _ = gmm_teacher

    def fitted(seed: int) -> torch.Tensor:
        solver = build(gmm, "dyweight")
        fit(
            solver,
            gmm,
            train,
            FitSettings(iterations=10, seed=seed, validation=0.0),
            progress=False,
        )
        return torch.cat([p.detach().flatten() for p in solver.parameters()])

    assert torch.equal(fitted(0), fitted(0))
    assert not torch.equal(fitted(0), fitted(1))


def test_resumed_fit_continues_exactly(gmm, gmm_teacher):
    """Stop at a checkpoint, start a new solver from the saved state: same result as no stop."""
    train, _ = gmm_teacher
    settings = FitSettings(iterations=40, checkpoint_every=15, log_every=5, seed=3)
    states, metrics = {}, []

    def record(values, state):
        metrics.append(values)
        if state is not None:
            states[state["iteration"]] = copy.deepcopy(state)

    straight = build(gmm, "spanlift", base="ipndm", hidden_dim=8)
    whole = fit(straight, gmm, train, settings, report=record, progress=False)
    assert sorted(states) == [15, 30, 40]  # every checkpoint_every iterations, and the last
    resumed = build(gmm, "spanlift", base="ipndm", hidden_dim=8)
    rest = fit(resumed, gmm, train, settings, progress=False, resume=states[30])
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert rest.losses == whole.losses
    assert metrics[-1]["iteration"] == 40


class NaNMixture(GaussianMixture):
    def denoise(self, x, sigma, cond=None):
        return super().denoise(x, sigma) * float("nan")


def test_nan_stops_the_fit_with_the_iteration(gmm_teacher):
    train, _ = gmm_teacher
    backbone = NaNMixture()
    solver = build(backbone, "dyweight")
    with pytest.raises(TrainingDivergedError, match="iteration 0"):
        fit(solver, backbone, train, FitSettings(iterations=5), progress=False)


def test_a_solver_without_parameters_cannot_be_fitted(gmm, gmm_teacher):
    with pytest.raises(SettingsError, match="no trainable parameters"):
        fit(build(gmm, "euler"), gmm, gmm_teacher[0], FitSettings(iterations=2), progress=False)


@pytest.mark.parametrize(
    ("settings", "error", "shown"),
    [
        ({"iterations": 0}, SettingsError, "iterations"),
        ({"batch_size": -4}, SettingsError, "batch_size"),
        ({"lr": -1.0}, SettingsError, "lr"),
        ({"lr": float("nan")}, SettingsError, "lr"),
        ({"warmup": -1}, SettingsError, "warmup"),
        ({"loss": "nope"}, UnknownNameError, "nope"),
    ],
)
def test_bad_fit_settings(settings, error, shown):
    with pytest.raises(error, match=shown):
        FitSettings(**settings)


def test_warmup_then_cosine_schedule():
    factor = warmup_cosine(warmup=10, total=110)
    assert factor(0) == pytest.approx(0.1)
    assert factor(9) == pytest.approx(1.0)
    assert factor(60) == pytest.approx(0.5)
    assert factor(110) == pytest.approx(0.0)
