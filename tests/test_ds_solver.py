"""DS-Solver against its authors' sampler (MCG-NJU/NeuralSolver ns_sampling.py NeuralSolverSampler;
fixture tests/fixtures/ds_solver_reference.json): endpoints on the Gaussian mixture with the
released tables, Euler without a table, and its settings' errors."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.solvers import SOLVERS, SolverSpec, build_solver
from spanlift.solvers.schedules import SCHEDULES

from .conftest import stored_mixture

REFERENCE = json.loads(
    (Path(__file__).parent / "fixtures" / "ds_solver_reference.json").read_text()
)
TOP = 1e8  # their sampler starts at t = 0 (σ = ∞): spanlift from σ_max = 10⁸, t_0 = 10⁻⁸


def their_grid_ends(run: dict) -> torch.Tensor:
    """σ_max = 10⁸ and σ_min where t_N = Σ Δt, their last time (σ_min ≈ 0 where Σ Δt ≥ 1)."""
    total = run["timedeltas_sum"]
    bottom = (1 - total) / total if total < 1 else 1e-12
    return torch.linspace(TOP, bottom, run["steps"] + 1, dtype=torch.float64)


@pytest.mark.parametrize("run", REFERENCE["runs"], ids=lambda r: f"{r['table']}-{r['steps']}")
def test_endpoints_equal_their_sampler(run):
    mixture = stored_mixture(REFERENCE["mixture"])
    solver = SOLVERS.get("ds_solver")(their_grid_ends(run), table=run["table"]).double()
    times = 1 / (1 + solver.sigmas[:-1])
    torch.testing.assert_close(
        times, torch.tensor(run["times"], dtype=torch.float64), atol=1e-7, rtol=0
    )
    noise = torch.tensor(REFERENCE["noise"], dtype=torch.float64)
    x = solver(lambda x, sigma: mixture.denoise(x, sigma), noise * (1 + TOP))
    flow_state = x / (1 + solver.sigmas[-1])  # x_t = x/(1 + σ)
    torch.testing.assert_close(
        flow_state, torch.tensor(run["endpoint"], dtype=torch.float64), atol=5e-7, rtol=0
    )


def test_without_a_table_it_is_euler(gmm64):
    """Float64: in float32, (x − v̂)/(1 + σ) at σ = 80 loses the last digits of d to cancellation."""
    noise = torch.randn(3, *gmm64.shape, generator=torch.Generator().manual_seed(1)) * 80
    ours = build_solver(SolverSpec("ds_solver", 4, settings={"table": "none"}), 0.002, 80.0, 1)
    euler = build_solver(SolverSpec("euler", 4), 0.002, 80.0, 1)
    torch.testing.assert_close(
        ours.double()(gmm64.denoise, noise.double()), euler.double()(gmm64.denoise, noise.double())
    )


def test_learned_starts_at_the_table_and_keeps_the_grid_ends(gmm):
    spec = SolverSpec("ds_solver", 6, settings={"table": "sit"})
    released = build_solver(spec, 0.002, 80.0, 1)
    learned = build_solver(
        SolverSpec("ds_solver", 6, settings={"table": "sit", "learn": True}), 0.002, 80.0, 1
    )
    assert [p.requires_grad for p in learned.parameters()] and not list(released.parameters())
    sigmas = released.sigmas
    assert torch.equal(sigmas[[0, -1]], SCHEDULES.get("edm")(6, 0.002, 80.0)[[0, -1]]) and bool(
        (sigmas.diff() < 0).all()
    )
    torch.testing.assert_close(learned.sigmas, sigmas)
    noise = torch.randn(2, *gmm.shape, generator=torch.Generator().manual_seed(2)) * 80
    with torch.no_grad():
        torch.testing.assert_close(learned(gmm.denoise, noise), released(gmm.denoise, noise))


@pytest.mark.parametrize(
    "settings, nfe, message",
    [
        ({"table": "dit"}, 5, "table must be one of flowdcn, sit, none"),
        ({"table": "sit"}, 15, "has NFE 5, 6, 7, 8, 9, 10 only, not 15"),
        ({"learn": "yes"}, 5, "learn must be true or false"),
    ],
)
def test_bad_settings(settings, nfe, message):
    with pytest.raises(SettingsError, match=message):
        build_solver(SolverSpec("ds_solver", nfe, settings=settings), 0.002, 80.0, 1)


def test_ld3_refuses_it_as_its_base(gmm):
    with pytest.raises(SettingsError, match="ds_solver takes its grid from its table"):
        build_solver(SolverSpec("ld3", 5, settings={"base": "ds_solver"}), 0.002, 80.0, 1)
