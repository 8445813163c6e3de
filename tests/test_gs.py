"""GS (the Generalized Solver of GAS): untrained it is DPM-Solver++(3M) without a lower-order
final step; with nonzero grid, offsets and corrections it is the authors' `GeneralizedSolver`
(tests/fixtures/gs_reference.json holds that code's endpoints on the Gaussian mixture); it fits,
and it travels through a checkpoint and a sweep file."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.cli import main
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sweep.config import parse_sweep
from spanlift.solvers import (
    SOLVERS,
    NFECounter,
    SolverSpec,
    build_solver,
    read_checkpoint,
    save_solver,
)
from spanlift.solvers.checkpoint import load_solver_state
from spanlift.solvers.gs import GS

from .conftest import noise_like, stored_mixture

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "gs_reference.json").read_text())


@pytest.fixture(scope="module")
def reference_gmm():
    return stored_mixture(REFERENCE["gmm"])


def build(backbone, name, nfe, schedule="edm", **settings):
    spec = SolverSpec(name, nfe, schedule, settings)
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, 1)


def endpoint(solver, backbone, x):
    with torch.no_grad():
        return solver(backbone.denoise, x)


def dpm_3m(sigmas):
    """DPM-Solver++(3M) without a lower-order final step on `sigmas`."""
    return SOLVERS.get("dpm_solver_pp")(sigmas, order=3, lower_order_final=False)


# --- untrained: DPM-Solver++(3M), no lower-order final step -------------------------------------


@pytest.mark.parametrize("schedule", ["edm", "logsnr", "edm_to_zero"])
@pytest.mark.parametrize("nfe", range(3, 11))
def test_untrained_gs_is_dpm_solver_pp_3m_without_lower_order_final(gmm64, nfe, schedule):
    """Equal to float64 rounding: GS weighs the same history through its correction tables
    (measured up to 2.5e-12 apart, endpoints of magnitude ~2)."""
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    gs = build(gmm64, "gs", nfe, schedule)
    plain = build(gmm64, "dpm_solver_pp", nfe, schedule, order=3, lower_order_final=False)
    torch.testing.assert_close(
        endpoint(gs, gmm64, x), endpoint(plain, gmm64, x), atol=1e-11, rtol=0
    )
    on_its_grid = dpm_3m(gs.grid().detach())  # the learned grid holds the schedule to rounding
    assert torch.equal(endpoint(gs, gmm64, x), endpoint(on_its_grid, gmm64, x))


def test_untrained_gs_is_not_the_lower_order_final_variant(gmm64):
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    final = build(gmm64, "dpm_solver_pp", 5, order=3, lower_order_final=True)
    gap = (endpoint(build(gmm64, "gs", 5), gmm64, x) - endpoint(final, gmm64, x)).abs().max()
    assert gap > 1e-3


# --- the authors' GeneralizedSolver -------------------------------------------------------------


def packed(per_order: torch.Tensor) -> torch.Tensor:
    """The authors' c{k}_diff[i] (row k − 1 of `per_order`) as GS's packed table: row i holds
    k = 1 … i + 1."""
    return torch.cat([per_order[: i + 1, i] for i in range(per_order.shape[1])])


def gs_from_reference(case: dict) -> GS:
    """GS on the authors' grid, told their evaluation σ, with their corrections."""
    f64 = torch.float64
    sigmas = torch.tensor(case["sigmas"], dtype=f64)
    gs = GS(sigmas)
    with torch.no_grad():
        gs.log_offsets.copy_(
            (torch.tensor(case["evaluated_sigmas"], dtype=f64) / sigmas[:-1]).log()
        )
        gs.data_corrections.copy_(packed(torch.tensor(case["c_diff"], dtype=f64)))
        gs.state_corrections.copy_(packed(torch.tensor(case["a_diff"], dtype=f64)))
    return gs


@pytest.mark.parametrize(
    "case", REFERENCE["cases"], ids=lambda c: f"steps{c['steps']}-scales{c['scales']}"
)
def test_gs_equals_the_authors_generalized_solver(reference_gmm, case):
    noise = torch.tensor(REFERENCE["noise"], dtype=torch.float64).reshape(-1, *REFERENCE["shape"])
    expected = torch.tensor(case["endpoint_vp"], dtype=torch.float64).reshape_as(noise)
    expected = expected / case["alpha_end"]  # their VP endpoint in σ-form
    gs = gs_from_reference(case)
    x = noise * gs.sigmas[0]
    got = endpoint(gs, reference_gmm, x)
    torch.testing.assert_close(got, expected, atol=1e-11, rtol=0)
    if not any(case["scales"][1:]):  # their untrained solver (any grid) is DPM-Solver++(3M)
        plain = endpoint(
            dpm_3m(torch.tensor(case["sigmas"], dtype=torch.float64)), reference_gmm, x
        )
        torch.testing.assert_close(plain, expected, atol=1e-11, rtol=0)
    else:
        assert (got - endpoint(dpm_3m(gs.sigmas), reference_gmm, x)).abs().max() > 1e-2


# --- parameters, gradients, NFE ---------------------------------------------------------------


def test_gs_learns_28_scalars_at_nfe_4(gmm):
    """A grid of 4 logits (3 free), 4 offsets and 10 + 10 corrections (rows j ≤ i of two 4 × 4
    lower-triangular tables)."""
    gs = build(gmm, "gs", 4)
    sizes = {name: p.numel() for name, p in gs.named_parameters()}
    assert sizes == {
        "grid.logits": 4,
        "log_offsets": 4,
        "state_corrections": 10,
        "data_corrections": 10,
    }


def test_every_parameter_gets_a_gradient(gmm):
    gs = build(gmm, "gs", 5)
    with torch.no_grad():
        for p in (gs.log_offsets, gs.state_corrections, gs.data_corrections):
            p.add_(0.01)
    gs(gmm.denoise, gmm.prior(noise_like(gmm, 4))).square().mean().backward()
    for name, p in gs.named_parameters():
        assert p.grad is not None and (p.grad != 0).all(), name


@pytest.mark.parametrize(("nfe", "afs"), [(3, False), (4, False), (4, True), (6, True)])
def test_counted_nfe_equals_claimed(gmm, nfe, afs):
    gs = build(gmm, "gs", nfe, afs=afs)
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        gs(counter, gmm.prior(noise_like(gmm, 2)))
    assert counter.calls == nfe == gs.nfe
    assert gs.num_steps == nfe + afs


# --- fit, checkpoint, sweep, listing ----------------------------------------------------------


def test_a_short_fit_lowers_the_training_loss(gmm, gmm_teacher):
    train, _ = gmm_teacher
    gs = build(gmm, "gs", 4)
    settings = FitSettings(iterations=30, batch_size=32, lr=1e-2, warmup=5, validation=0.0)
    result = fit(gs, gmm, train, settings, progress=False)
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert last < 0.5 * first, result.losses


def test_checkpoint_round_trip(gmm, tmp_path):
    trained = build(gmm, "gs", 4)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    path = save_solver(tmp_path / "solver.pt", trained)
    spec = SolverSpec.from_dict(read_checkpoint(path)["spec"])
    reloaded = build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)
    reloaded.load_state_dict(load_solver_state(path, expected="gs"))
    for key, value in trained.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
    x = gmm.prior(noise_like(gmm, 2))
    assert torch.equal(endpoint(reloaded, gmm, x), endpoint(trained, gmm, x))


def test_a_sweep_entry_validates():
    config = parse_sweep(
        {"experiment": "t", "backbone": "gmm", "solvers": [{"name": "gs", "nfe": [4]}]}
    )
    (spec,) = config.trials()
    assert spec.name == "gs" and spec.nfe == 4


def test_listed_with_citation_and_reference(capsys):
    assert main(["solvers"]) == 0
    out = capsys.readouterr().out
    assert "gs " in out
    assert "cites: Oganov et al., ICLR 2026 (GAS)" in out
    assert "reference: 3145tttt/GAS src/gas/generalized_solver.py" in out
