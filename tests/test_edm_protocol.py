"""EDM's own sampling protocol as a schedule: the EDM grid, then one last step to σ = 0."""

import copy

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.platform.sweep.config import SweepConfigError, parse_sweep
from spanlift.solvers import NFECounter, SolverSpec, build_solver
from spanlift.solvers.schedules import edm_polynomial, edm_to_zero

from .conftest import NATIVE_SOLVERS, noise_like
from .test_sweep_config import VALID


def test_the_grid_is_edms_points_then_zero() -> None:
    sigmas = edm_to_zero(18, 0.002, 80.0)
    rho, i = 7.0, torch.arange(18, dtype=torch.float64)  # EDM generate.py's t_steps, written out
    expected = (80.0 ** (1 / rho) + i / 17 * (0.002 ** (1 / rho) - 80.0 ** (1 / rho))) ** rho
    assert len(sigmas) == 19 and sigmas[-1] == 0
    torch.testing.assert_close(sigmas[:-1], expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(sigmas[:-1], edm_polynomial(17, 0.002, 80.0))
    with pytest.raises(SettingsError, match="at least 2 steps"):
        edm_to_zero(1, 0.002, 80.0)


def last_denoised(denoiser):
    """The denoiser, remembering its latest output."""
    seen = {}

    def call(x, sigma):
        seen["denoised"] = denoiser(x, sigma)
        return seen["denoised"]

    return call, seen


TO_ZERO = [name for name in NATIVE_SOLVERS if name != "dpm_solver_v3"]
"""Every solver but DPM-Solver-v3, whose statistics end at σ_min: it refuses a grid ending at
σ = 0 in one line (tests/test_dpm_solver_v3.py)."""


@pytest.mark.parametrize("name", TO_ZERO)
def test_every_solver_reaches_zero_with_its_nfe_and_finite_samples(gmm64, name) -> None:
    nfe = 5
    settings = {"hidden_dim": 8} if name == "spanlift" else {}
    solver = build_solver(SolverSpec(name, nfe, "edm_to_zero", settings), 0.002, 80.0, 1).double()
    denoiser, seen = last_denoised(gmm64.denoise)
    counter = NFECounter(denoiser)
    x = solver(counter, gmm64.prior(noise_like(gmm64, 16, dtype=torch.float64)))
    assert counter.calls == nfe and torch.isfinite(x).all()
    if name in ("euler", "dpm_solver_pp", "unipc"):  # first order onto σ = 0: x_N = D(x, σ_min)
        torch.testing.assert_close(x, seen["denoised"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["dpm_solver_pp", "unipc"])
def test_logsnr_solvers_step_to_zero_at_first_order_even_without_lower_order_final(
    gmm64, name
) -> None:
    spec = SolverSpec(name, 5, "edm_to_zero", {"order": 3, "lower_order_final": False})
    solver = build_solver(spec, 0.002, 80.0, 1).double()
    denoiser, seen = last_denoised(gmm64.denoise)
    x = solver(denoiser, gmm64.prior(noise_like(gmm64, 16, dtype=torch.float64)))
    torch.testing.assert_close(x, seen["denoised"], rtol=0, atol=1e-12)


def test_a_sweep_entry_chooses_its_schedule() -> None:
    data = copy.deepcopy(VALID)
    data["solvers"].append({"name": "heun", "nfe": 35, "schedule": "edm_to_zero"})
    specs = parse_sweep(data).trials()
    assert specs[-1].schedule == "edm_to_zero" and specs[0].schedule == "edm"
    data["solvers"][-1]["schedule"] = "karras"
    with pytest.raises(
        SweepConfigError, match=r"solvers\[2\]\.schedule.*unknown schedule 'karras'"
    ):
        parse_sweep(data)


def test_flow_schedule_is_uniform_in_flow_time() -> None:
    from spanlift.solvers.schedules import flow_time_uniform

    sigmas = flow_time_uniform(4, 0.001, 999.0)
    s = sigmas / (1 + sigmas)  # back to flow time
    torch.testing.assert_close(s, torch.linspace(0.999, 0.001 / 1.001, 5, dtype=torch.float64))
    assert sigmas[0] == pytest.approx(999.0) and sigmas[-1] == pytest.approx(0.001)
