"""`kdiffusion:<sampler>` solvers against k-diffusion's own sampler functions.

Reference side: `k_diffusion.sampling.<sampler>` (crowsonkb/k-diffusion, the `kdiffusion` extra:
k-diffusion 0.0.16), called as its users call it, with η = 0 and its default noise sampler, on
the Gaussian mixture's exact denoiser and the solver's own grid. spanlift's side is the registered
solver, its NFE counted by `NFECounter`. Skipped where k-diffusion is not installed, except the
one-line error that says how to install it.
"""

import importlib
import sys

import pytest
import torch

from spanlift.errors import SettingsError, UnreachableNFEError
from spanlift.solvers import NFECounter, SolverSpec, build_solver

from .conftest import noise_like

installed = importlib.util.find_spec("k_diffusion") is not None
needs_kdiffusion = pytest.mark.skipif(not installed, reason="k-diffusion is not installed")

CASES = [
    ("sample_dpm_2", "edm", {}, (4, 8)),
    ("sample_dpm_2", "edm_to_zero", {}, (3, 9)),
    ("sample_lms", "edm", {}, (4, 10)),
    ("sample_lms", "edm_to_zero", {"order": 2}, (3, 8)),
    ("sample_dpmpp_2s_ancestral", "edm", {}, (4, 10)),
    ("sample_dpmpp_2s_ancestral", "edm_to_zero", {}, (3, 7)),
    ("sample_dpmpp_3m_sde", "edm", {}, (3, 10)),
    ("sample_dpmpp_3m_sde", "edm_to_zero", {}, (4, 9)),
    ("sample_dpm_fast", "logsnr", {}, (3, 6, 9)),
]


def their_run(sampler: str, model, x, sigmas, nfe, callback=None):
    """k-diffusion's sampler as its users call it: the grid (DPM-Solver-fast: its ends and its
    NFE), η = 0 where it has η, nothing else changed from its defaults."""
    function = getattr(importlib.import_module("k_diffusion.sampling"), sampler)
    if sampler == "sample_dpm_fast":
        grid = {"sigma_min": float(sigmas[-1]), "sigma_max": float(sigmas[0]), "n": nfe}
    else:
        grid = {"sigmas": sigmas}
    eta = {"eta": 0.0} if sampler in ("sample_dpmpp_2s_ancestral", "sample_dpmpp_3m_sde") else {}
    return function(model, x, **grid, callback=callback, disable=True, **eta)


def build(gmm, sampler, nfe, schedule, settings=None):
    spec = SolverSpec(f"kdiffusion:{sampler}", nfe, schedule, dict(settings or {}))
    return build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)


@needs_kdiffusion
@pytest.mark.parametrize(
    ("sampler", "schedule", "settings", "nfe"),
    [(s, sch, st, nfe) for s, sch, st, nfes in CASES for nfe in nfes],
)
def test_endpoint_is_the_samplers_own(gmm, sampler, schedule, settings, nfe):
    solver = build(gmm, sampler, nfe, schedule, settings)
    x = gmm.prior(noise_like(gmm, 4))
    ours, theirs = NFECounter(gmm.denoise), NFECounter(gmm.denoise)
    with torch.no_grad():
        endpoint = solver(ours, x)
        if settings:
            function = getattr(importlib.import_module("k_diffusion.sampling"), sampler)
            reference = function(theirs, x, solver.sigmas.float(), disable=True, **settings)
        else:
            reference = their_run(sampler, theirs, x, solver.sigmas.float(), nfe)
    assert ours.calls == theirs.calls == nfe == solver.nfe
    torch.testing.assert_close(endpoint, reference, rtol=0, atol=0)


@needs_kdiffusion
@pytest.mark.parametrize(
    ("sampler", "nfe", "schedule"), [("sample_dpm_2", 8, "edm"), ("sample_dpm_fast", 9, "logsnr")]
)
def test_steps_are_the_states_the_sampler_reports(gmm, sampler, nfe, schedule):
    """The trajectory is the x k-diffusion's callback reports at σ_1 … σ_{N−1}, then the endpoint."""
    solver = build(gmm, sampler, nfe, schedule)
    x = gmm.prior(noise_like(gmm, 4))
    reported = []
    with torch.no_grad():
        trajectory = solver(gmm.denoise, x, trajectory=True)
        endpoint = their_run(
            sampler,
            gmm.denoise,
            x,
            solver.sigmas.float(),
            nfe,
            lambda info: reported.append(info["x"]),
        )
    expected = torch.stack([*reported[1:], endpoint], dim=1)
    assert trajectory.shape[1] == solver.num_steps
    torch.testing.assert_close(trajectory, expected, rtol=0, atol=0)


@needs_kdiffusion
def test_dpm_solver_fast_steps_on_its_own_grid_only(gmm):
    with pytest.raises(SettingsError, match="use that schedule"):
        build(gmm, "sample_dpm_fast", 6, "edm")
    with pytest.raises(SettingsError, match="use that schedule"):
        build(gmm, "sample_dpm_fast", 6, "edm_to_zero")
    with pytest.raises(UnreachableNFEError, match="can spend 3, 6, 9"):
        build(gmm, "sample_dpm_fast", 5, "logsnr")


@needs_kdiffusion
def test_noise_settings_are_not_settings_and_the_random_stream_is_left_alone(gmm):
    with pytest.raises(SettingsError, match=r"fixed to 0\.0"):
        build(gmm, "sample_dpmpp_2s_ancestral", 4, "edm", {"eta": 1.0})
    with pytest.raises(SettingsError, match="noise of stochastic sampling"):
        build(gmm, "sample_dpm_2", 4, "edm", {"s_noise": 1.0})
    solver = build(gmm, "sample_dpm_2", 4, "edm")  # draws randn_like(x) every step, times 0
    before = torch.random.get_rng_state()
    with torch.no_grad():
        solver(gmm.denoise, gmm.prior(noise_like(gmm, 2)))
    assert torch.equal(torch.random.get_rng_state(), before)


def test_without_k_diffusion_a_sampler_is_one_line_naming_the_extra(gmm, monkeypatch):
    monkeypatch.setitem(sys.modules, "k_diffusion", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "k_diffusion.sampling", None)
    with pytest.raises(SettingsError, match=r"install spanlift's 'kdiffusion' extra") as missing:
        build(gmm, "sample_lms", 4, "edm")
    assert "\n" not in str(missing.value)
