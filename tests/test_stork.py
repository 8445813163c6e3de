"""STORK against its authors' scheduler (ZT220501/STORK STORKScheduler.py, flow prediction;
tests/fixtures/stork_reference.json), its ROCK4 moments against the ROCK4 tables, and exactness
against integrals worked out by hand."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.solvers import SOLVERS, NFECounter, SolverSpec, build_solver
from spanlift.solvers.schedules import SCHEDULES
from spanlift.solvers.spec import check_settings
from spanlift.solvers.stork import AUTHORS_MOMENTS

from .conftest import stored_mixture

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "stork_reference.json").read_text())
F64 = torch.float64


def time_only(velocity):
    """A denoiser whose flow velocity v = d − D is velocity(k, t) at its k-th call, whatever x:
    D = (x − σ v)/(1 + σ)."""
    calls = []

    def denoiser(x, sigma):
        t = sigma / (1 + sigma)
        v = velocity(len(calls), t)
        calls.append(float(t))
        return (x - sigma * v) / (1 + sigma)

    return denoiser, calls


def test_steps_on_fixed_velocities_equal_the_authors_scheduler():
    fixed = REFERENCE["fixed"]
    t = torch.tensor([*fixed["t"], 0.0], dtype=F64)
    sigmas = t / (1 - t)
    velocities = torch.tensor(fixed["velocities"], dtype=F64)
    denoiser, calls = time_only(lambda k, _: velocities[k])
    x0 = torch.tensor(fixed["z0"], dtype=F64) * (1 + sigmas[0])
    states = SOLVERS.get("stork")(sigmas)(denoiser, x0, trajectory=True)
    z = states / (1 + sigmas[1:, None, None]).transpose(0, 1)
    expected = torch.tensor(fixed["order4"]["states"], dtype=F64)[1:]  # [0] is the midpoint
    torch.testing.assert_close(z.transpose(0, 1), expected, rtol=0, atol=1e-12)
    assert len(calls) == fixed["order4"]["calls"] == len(t)


@pytest.mark.parametrize("run", sorted(set(REFERENCE["gmm_rollouts"]) - {"note"}))
def test_gmm_rollouts_equal_the_authors_scheduler(run):
    entry = REFERENCE["gmm_rollouts"][run]
    mixture = stored_mixture(REFERENCE["gmm"])
    sigmas = torch.tensor(entry["sigmas"], dtype=F64)
    noise = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=F64)
    solver = SOLVERS.get("stork")(sigmas)
    counter = NFECounter(lambda x, s: mixture.denoise(x, s))
    with torch.no_grad():
        endpoint = solver(counter, noise * sigmas[0])
    expected = torch.tensor(entry["endpoint"], dtype=F64)
    torch.testing.assert_close(endpoint, expected, rtol=0, atol=1e-11)
    assert counter.calls == solver.nfe == entry["calls"] == len(sigmas)


def rock4_moments(tables: dict, authors: bool, powers: int) -> list[float]:
    """Σ_j w_j c_j^k of one ROCK4 step of unit length on dz/dt = f(t) = t^k, run stage by stage:
    the three-term recurrence over `recf`, then the four finishing stages (`fpa`, `fpb`). With
    `authors`, the first stage is shifted as in the authors' loop: the second stage reads the start
    state as its previous stage and the first stage as the one before, both at the first time."""
    recf, fpa, fpb = tables["recf"], tables["fpa"], tables["fpb"]
    result = []
    for k in range(powers):
        f = lambda c, k=k: c**k  # noqa: E731
        y_prev, y = (recf[0] * f(0.0), 0.0) if authors else (0.0, recf[0] * f(0.0))
        c_prev, c = (recf[0], recf[0]) if authors else (0.0, recf[0])
        for j in range(2, tables["degree"] + 1):
            a, b = recf[2 * j - 3], -recf[2 * j - 2]
            y, y_prev = a * f(c) + (1 - b) * y + b * y_prev, y
            c, c_prev = a + (1 - b) * c + b * c_prev, c
        k1 = f(c)
        k2 = f(c + fpa[0])
        k3 = f(c + fpa[1] + fpa[2])
        k4 = f(c + fpa[3] + fpa[4] + fpa[5])
        result.append(y + fpb[0] * k1 + fpb[1] * k2 + fpb[2] * k3 + fpb[3] * k4)
    return result


def test_rock4_tables_integrate_cubics_exactly_and_give_the_authors_moments():
    tables = REFERENCE["rock4_degree_50"]
    exact = rock4_moments(tables, authors=False, powers=4)
    assert exact == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4], abs=1e-13)
    assert rock4_moments(tables, authors=True, powers=3) == pytest.approx(
        AUTHORS_MOMENTS, abs=1e-15
    )


def test_exact_rock4_integrates_a_quadratic_velocity_exactly_on_a_uniform_flow_grid():
    """On a grid uniform in t the extrapolation of a quadratic v(t) is exact, so from step 2 on
    z moves by ∫ v dt; the authors' pass falls short by 1.05e−3 of Δ v_i (M_0)."""
    sigmas = SCHEDULES.get("flow")(6, 0.002, 80.0)
    t = sigmas / (1 + sigmas)
    v = lambda s: 0.3 - 1.7 * s + 2.9 * s**2  # noqa: E731
    integral = lambda a, b: 0.3 * (b - a) - 0.85 * (b**2 - a**2) + 2.9 / 3 * (b**3 - a**3)  # noqa: E731
    denoiser, _ = time_only(lambda _, s: v(s) * torch.ones(1, dtype=F64))
    x0 = torch.zeros(1, dtype=F64)
    for exact, tolerance in ((True, 1e-14), (False, 1e-4)):
        states = SOLVERS.get("stork")(sigmas, exact_rock4=exact)(denoiser, x0, trajectory=True)
        z = torch.cat([x0, states[0] / (1 + sigmas[1:])])
        moved = z[3:] - z[2:-1]
        wanted = torch.stack([integral(t[i], t[i + 1]) for i in range(2, 6)])
        torch.testing.assert_close(moved, wanted, rtol=0, atol=tolerance)
        assert exact or (moved - wanted).abs().max() > 1e-6


def test_nfe_is_one_more_than_the_steps_and_afs_saves_the_first_call():
    for nfe, settings in ((7, {}), (6, {"afs": True})):
        solver = build_solver(SolverSpec("stork", nfe, "edm_to_zero", settings), 0.002, 80.0, 1)
        assert solver.num_steps == 6
        counter = NFECounter(lambda x, s: x / (1 + s**2))
        solver(counter, torch.randn(2, 1, 4, 4) * 80)
        assert counter.calls == nfe


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"solver_order": 2}, "RKL2"),
        ({"derivative_order": 3}, "doubles the slope"),
        ({"prediction_type": "epsilon"}, "not offered"),
        ({"s": 20}, "degree 50"),
    ],
)
def test_refused_variants_say_why(settings, words):
    with pytest.raises(SettingsError, match=words):
        check_settings("stork", settings)


def test_exact_rock4_must_be_a_boolean():
    with pytest.raises(SettingsError, match="exact_rock4"):
        SOLVERS.get("stork")(torch.tensor([80.0, 1.0, 0.0], dtype=F64), exact_rock4="yes")
