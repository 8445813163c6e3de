"""OSS against its authors' code (OptimalSteps `search_OSS`, `cal_medium`;
tests/fixtures/oss_reference.json), its start below σ_max, its unsearched state, and its search
inside a fit."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.solvers import SOLVERS, SolverSpec, build_solver, save_solver
from spanlift.solvers.loading import is_learnable, load_solver
from spanlift.solvers.oss import cal_medium, search_paths, start_states, teacher_states
from spanlift.solvers.schedules import edm_polynomial

from .conftest import noise_like, stored_mixture

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "oss_reference.json").read_text())
CASES = {case["name"]: case for case in REFERENCE["search"]["cases"]}


@pytest.fixture(scope="module")
def reference_gmm():
    return stored_mixture(REFERENCE["gmm"])


def reference_noise(samples: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(samples, 1, 8, 8, generator=generator, dtype=torch.float64)


def build(nfe=4, schedule="edm", **settings):
    return build_solver(SolverSpec("oss", nfe, schedule, settings), 0.002, 80.0, 1)


def endpoint(solver, backbone, x):
    with torch.no_grad():
        return solver(backbone.denoise, x)


@pytest.mark.parametrize("name", sorted(CASES))
def test_per_sample_paths_and_their_median_equal_the_reference(reference_gmm, name):
    case = CASES[name]
    fine = edm_polynomial(case["fine_steps"], 0.002, 80.0)
    x = reference_gmm.prior(reference_noise(case["samples"]))
    states = teacher_states(SOLVERS.get("euler")(fine), reference_gmm.denoise, x)
    paths = search_paths(
        reference_gmm.denoise,
        fine,
        states,
        start_states(x, fine),
        case["student_steps"],
        x.shape[1:],
    )
    assert paths.tolist() == case["paths"]
    assert cal_medium(paths).tolist() == case["cal_medium"]


@pytest.mark.parametrize("count", ["odd", "even"])
def test_cal_medium_is_the_authors_not_a_median(count):
    entry = REFERENCE["cal_medium"][count]
    assert cal_medium(torch.tensor(entry["paths"])).tolist() == entry["result"]


def test_the_searched_grid_starts_below_sigma_max_from_the_rescaled_state(reference_gmm):
    """The reference's 4-step path starts 19 fine steps above σ_min (of 40): the rollout is Euler
    from x (1 + σ_0)/(1 + 80) over the chosen σ, written out here step by step."""
    case = CASES["gmm_m40_n4"]
    fine = edm_polynomial(40, 0.002, 80.0)
    x = reference_gmm.prior(reference_noise(case["samples"]))
    oss = build(4, fine_steps=40).double()
    oss.prepare([(reference_gmm.denoise, x[:7]), (reference_gmm.denoise, x[7:])])
    chosen = [40 - a for a in reversed(case["cal_medium"])] + [40]
    assert torch.equal(oss.sigmas, fine[chosen]) and oss.sigmas[0] < 80 and bool(oss.searched)
    state = x * (1 + oss.sigmas[0]) / 81
    for s, s_next in zip(oss.sigmas[:-1], oss.sigmas[1:], strict=False):
        state = state + (s_next - s) * (state - reference_gmm.denoise(state, s)) / s
    torch.testing.assert_close(endpoint(oss, reference_gmm, x), state, rtol=0, atol=1e-12)
    spanlift = build_solver(SolverSpec("spanlift", 4, settings={"base": "oss"}), 0.002, 80.0, 1)
    spanlift.base.load_state_dict(oss.state_dict())
    torch.testing.assert_close(
        endpoint(spanlift.double(), reference_gmm, x), state, rtol=0, atol=1e-9
    )  # an untrained SpanLift over OSS is OSS, start included (β ≈ 0)


@pytest.mark.parametrize("base", ["euler", "ipndm", "dpm_solver_pp"])
@pytest.mark.parametrize("schedule", ["edm", "edm_to_zero"])
def test_unsearched_oss_is_its_base(gmm64, base, schedule):
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    oss = build(4, schedule, base=base).double()
    plain = build_solver(SolverSpec(base, 4, schedule), 0.002, 80.0, 1).double()
    assert torch.equal(endpoint(oss, gmm64, x), endpoint(plain, gmm64, x))
    assert not bool(oss.searched) and is_learnable(oss) and oss.nfe == plain.nfe


def test_a_fit_searches_once_and_the_checkpoint_keeps_the_start(gmm, tmp_path):
    train = generate_teacher(gmm, range(16), SolverSpec("ipndm", 12), progress=False)
    oss = build(3, "edm_to_zero", fine_steps=16)
    fit(oss, gmm, train, FitSettings(iterations=2, batch_size=8), progress=False)
    grid = oss.sigmas.clone()
    assert bool(oss.searched) and grid[-1] == 0 and grid[-2] == pytest.approx(0.002)
    loaded = load_solver(oss.spec, save_solver(tmp_path / "oss.pt", oss), gmm)
    assert torch.equal(loaded.sigmas, grid) and loaded.top == 80
    x = gmm.prior(noise_like(gmm, 4))
    assert torch.equal(endpoint(loaded, gmm, x), endpoint(oss, gmm, x))


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        (SolverSpec("oss", 4, settings={"fine_steps": 2}), "fine_steps must be at least the 4"),
        (SolverSpec("oss", 4, settings={"fine_schedule": "edm_to_zero"}), "fine_schedule"),
        (SolverSpec("oss", 4, settings={"teacher_settings": {"ordre": 4}}), "ordre"),
        (SolverSpec("ld3", 4, settings={"base": "oss"}), "learned grid"),
    ],
)
def test_bad_settings_are_one_line(spec, shown):
    with pytest.raises(SettingsError, match=shown) as refused:
        build_solver(spec, 0.002, 80.0, 1)
    assert len(str(refused.value).splitlines()) == 1
