"""Fits that generalise: a held-out split picks the kept state (iteration 0 included), weight
decay, LD3's input slack, alternating parameter groups, trajectory supervision."""

import pytest
import torch

from spanlift.errors import CacheError, SettingsError
from spanlift.platform.fitting.fit import (
    FitSettings,
    fit,
    objective,
    split_validation,
    validation_loss,
)
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import generate_teacher, supervision_sigmas, teacher_for
from spanlift.solvers import SolverSpec, build_solver


def build(gmm, name, nfe=3, **settings):
    return build_solver(SolverSpec(name, nfe, "edm", settings), gmm.sigma_min, gmm.sigma_max, 1)


def test_validation_is_the_last_seeds_and_never_empty(gmm_teacher):
    train, _ = gmm_teacher
    fitted, held = split_validation(train, 0.1)
    assert len(held) == round(0.1 * len(train)) and len(fitted) + len(held) == len(train)
    assert held.seeds[0] == fitted.seeds[-1] + 1
    assert split_validation(train, 0.0) == (train, None)
    two = train.subset(slice(0, 2))
    assert [len(p) for p in split_validation(two, 0.01)] == [1, 1]


def test_a_fit_never_ends_worse_than_where_it_started_on_held_out_seeds(gmm, gmm_teacher):
    """A far too large lr ruins SpanLift's operator; the kept state is then its starting state,
    its DyWeight base: the held-out loss is not above iteration 0's."""
    train, _ = gmm_teacher
    settings = FitSettings(iterations=20, batch_size=32, lr=0.3, warmup=0, seed=0, grad_clip=100)
    solver = build(gmm, "spanlift", base="dyweight", hidden_dim=8, beta_init=0.0)
    start = {k: v.clone() for k, v in solver.state_dict().items()}
    result = fit(solver, gmm, train, settings, progress=False)
    assert max(result.validation.values()) > 2 * result.validation[0]  # the fit did get worse
    assert result.best_iteration == 0
    assert all(torch.equal(solver.state_dict()[k], v) for k, v in start.items())
    _, held = split_validation(train, settings.validation)
    loss = objective(solver, settings, gmm)
    assert validation_loss(solver, loss, held) == pytest.approx(result.validation[0])


def test_the_kept_state_is_the_best_validation_state(gmm, gmm_teacher):
    train, _ = gmm_teacher
    settings = FitSettings(iterations=60, batch_size=32, lr=5e-3, seed=0, validate_every=10)
    solver = build(gmm, "dyweight")
    result = fit(solver, gmm, train, settings, progress=False)
    best = min(result.validation, key=result.validation.get)
    assert result.best_iteration == best > 0
    assert sorted(result.validation) == [0, 10, 20, 30, 40, 50, 60]
    _, held = split_validation(train, settings.validation)
    kept = validation_loss(solver, objective(solver, settings, gmm), held)
    assert kept == pytest.approx(result.validation[best], rel=1e-5)


def test_without_validation_the_last_state_is_kept(gmm, gmm_teacher):
    train, _ = gmm_teacher
    settings = FitSettings(iterations=5, batch_size=16, seed=0, validation=0.0)
    result = fit(build(gmm, "dyweight"), gmm, train, settings, progress=False)
    assert result.validation == {} and result.best_iteration == 5


@pytest.mark.parametrize(
    ("setting", "value"), [("validation", 1.0), ("validation", -0.1), ("weight_decay", -1.0)]
)
def test_bad_regulariser_settings_are_refused(setting, value):
    with pytest.raises(SettingsError, match=setting):
        FitSettings(**{setting: value})


def test_weight_decay_shrinks_the_learned_table(gmm, gmm_teacher):
    train, _ = gmm_teacher
    tables = {}
    for decay in (0.0, 5.0):
        solver = build(gmm, "dyweight")
        settings = FitSettings(iterations=20, batch_size=16, seed=0, weight_decay=decay)
        fit(solver, gmm, train, settings.updated({"validation": 0.0}), progress=False)
        tables[decay] = solver.weights.detach().abs().sum()
    assert tables[5.0] < 0.97 * tables[0.0]


def test_inactive_parameters_stay_unchanged(gmm, gmm_teacher):
    train, _ = gmm_teacher
    solver = build(gmm, "dyweight")
    solver.inactive_parameters = lambda iteration: [solver.log_time_scale]
    weights = solver.weights.detach().clone()
    fit(solver, gmm, train, FitSettings(iterations=10, validation=0.0), progress=False)
    assert torch.equal(solver.log_time_scale.detach(), torch.zeros(solver.num_steps))
    assert not torch.equal(solver.weights.detach(), weights)


def test_input_slack_stays_inside_its_ball(gmm, gmm_teacher):
    train, _ = gmm_teacher
    solver = build(gmm, "dyweight")
    solver.input_slack = 0.05
    states = []
    settings = FitSettings(iterations=10, batch_size=16, validation=0.0, checkpoint_every=10)
    fit(solver, gmm, train, settings, report=lambda m, s: states.append(s), progress=False)
    slack = states[-1]["slack"]
    norms, limit = slack.flatten(1).norm(dim=1), 0.05 * train.noise.flatten(1).norm(dim=1)
    assert (norms <= limit * (1 + 1e-5)).all()
    assert (norms > 0).sum() > len(train) // 10  # the seeds it saw moved


def test_trajectory_states_are_the_teachers_states_at_the_requested_sigmas(gmm64):
    """States requested at points of the teacher's own grid: the run is the plain teacher's, so
    the states equal its trajectory there and its endpoint is unchanged."""
    teacher = SolverSpec("euler", 8, "edm")
    plain = build_solver(teacher, gmm64.sigma_min, gmm64.sigma_max, 1).double()
    wanted = plain.sigmas[[2, 5, 8]].tolist()
    seeds = range(6)
    with_states = generate_teacher(gmm64, seeds, teacher, progress=False, state_sigmas=wanted)
    endpoint_only = generate_teacher(gmm64, seeds, teacher, progress=False)
    assert torch.equal(with_states.endpoints, endpoint_only.endpoints)
    path = plain.trajectory(gmm64.denoise, gmm64.prior(with_states.noise.double()))
    expected = torch.stack([path[1], path[4], path[7]], dim=1).float()
    assert torch.allclose(with_states.states_at(wanted), expected, atol=1e-6)
    assert with_states.key != endpoint_only.key


def test_a_sigma_between_teacher_points_is_hit_exactly(gmm64):
    """A requested σ off the teacher's grid is added to it: Euler from σ_max to that σ in the
    teacher's steps equals a hand-written Euler loop on the merged grid."""
    teacher = SolverSpec("euler", 4, "edm")
    grid = build_solver(teacher, gmm64.sigma_min, gmm64.sigma_max, 1).sigmas
    between = float((grid[1] * grid[2]).sqrt())
    entry = generate_teacher(gmm64, [3], teacher, progress=False, state_sigmas=[between])
    x = gmm64.prior(entry.noise.double())
    for s, t in ((grid[0], grid[1]), (grid[1], between)):
        x = x + (t - s) * (x - gmm64.denoise(x, s)) / s
    assert torch.allclose(entry.states_at([between])[:, 0], x.float(), atol=1e-6)


def test_a_trajectory_request_the_cache_cannot_serve_is_one_clear_error(gmm, gmm_teacher):
    train, _ = gmm_teacher
    with pytest.raises(CacheError, match="no states at"):
        train.states_at([1.0])
    with pytest.raises(CacheError, match="cannot give states"):
        generate_teacher(gmm, [0], progress=False, state_sigmas=[1000.0])


def test_a_trajectory_supervised_fit_matches_the_teacher_along_the_way(gmm, gmm_teacher):
    train, _ = gmm_teacher
    solver = build(gmm, "dyweight", nfe=4)
    solver.supervision = "trajectory"
    settings = FitSettings(iterations=40, batch_size=32, seed=0)
    with pytest.raises(CacheError, match="no states at"):
        fit(solver, gmm, train, settings, progress=False)
    small = train.subset(slice(0, 128))
    teacher = teacher_for(solver, small, gmm)
    assert teacher.state_sigmas == supervision_sigmas(solver)
    assert (teacher.endpoints - small.endpoints).square().mean().sqrt() < 5e-3  # merged grid
    result = fit(solver, gmm, teacher, settings, progress=False)
    assert min(result.validation.values()) < 0.9 * result.validation[0]
    assert endpoint_rmse(solver, gmm, small) < endpoint_rmse(build(gmm, "dyweight", 4), gmm, small)
