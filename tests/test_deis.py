"""DEIS tAB against its authors' port (diff-sampler gits-main, `get_deis_coeff_list` and
`deis_sampler`, run on the same grids and the same GMM; tests/fixtures/deis_reference.json)."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.platform.sweep.config import parse_sweep
from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.deis import DEIS, vp_time
from spanlift.solvers.ipndm import ADAMS_BASHFORTH
from spanlift.solvers.schedules import edm_polynomial

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "deis_reference.json").read_text())
NOISE = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def reference_weights(kind: str) -> list[tuple[str, int, torch.Tensor, list[float]]]:
    """(case, step, spanlift's weights, the reference's C_{i,j} / h_i) for every step of order > 1."""
    rows = []
    for key, coefficients in REFERENCE["coefficients"][kind].items():
        nfe, order = map(int, key.split("-"))
        grid = edm_polynomial(nfe, 0.002, 80.0)
        deis = DEIS(grid, order=order)
        for i, row in enumerate(coefficients):
            h = float(grid[i + 1] - grid[i])
            rows.append((key, i, deis.weights(i), [c / h for c in row] or [1.0]))
    return rows


@pytest.mark.parametrize(("kind", "tolerance"), [("fine", 5e-5), ("default", 2.5e-3)])
def test_weights_equal_the_reference_coefficients(kind, tolerance):
    """The reference integrates in float32 over 10 000 points (`default`, |Δw| ≤ 1.3e-3 measured)
    or, here, in float64 over 400 000 (`fine`, ≤ 1.3e-5): spanlift's quadrature is exact to
    ~1e-13, so the gap is the reference's. Adams–Bashforth's weights (iPNDM) differ by ≥ 0.02."""
    for key, i, weights, expected in reference_weights(kind):
        expected = torch.tensor(expected, dtype=torch.float64)
        assert weights.shape == expected.shape, (key, i)
        torch.testing.assert_close(weights, expected, rtol=0, atol=tolerance, msg=f"{key} {i}")
        ab = torch.tensor(ADAMS_BASHFORTH[len(expected) - 1], dtype=torch.float64)
        if len(expected) > 1:
            assert (weights - ab).abs().max() > 0.019, "tAB in VP time is not iPNDM"


@pytest.mark.parametrize(
    "key", sorted({k.rsplit("-", 1)[0] for k in REFERENCE["rollouts"]["endpoints"]})
)
def test_rollout_equals_the_reference_sampler(gmm64, key):
    """Measured: ≤ 2.3e-5 from the `fine` reference, ≤ 8e-4 from the `default` one (endpoints of
    magnitude ~0.9); iPNDM of the same order lands 0.1–0.16 away."""
    nfe, order = map(int, key.split("-")[:2])
    deis = build_solver(SolverSpec("deis", nfe, settings={"order": order}), 0.002, 80.0, 1)
    with torch.no_grad():
        x = deis(gmm64.denoise, gmm64.prior(NOISE)).flatten()
    endpoints = REFERENCE["rollouts"]["endpoints"]
    for kind, tolerance in (("fine", 5e-5), ("default", 2e-3)):
        expected = torch.tensor(endpoints[f"{key}-{kind}"], dtype=torch.float64)
        torch.testing.assert_close(x, expected, rtol=0, atol=tolerance)


def test_weights_sum_to_one_and_order_one_is_euler():
    grid = edm_polynomial(7, 0.002, 80.0)
    deis = DEIS(grid, order=4)
    for i in range(7):
        torch.testing.assert_close(deis.weights(i).sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.equal(DEIS(grid, order=1).weights(3), torch.ones(1, dtype=torch.float64))
    assert vp_time(torch.tensor([0.002, 80.0], dtype=torch.float64)).tolist() == pytest.approx(
        [1e-3, 1.0], rel=1e-12
    )


def test_order_is_checked_and_a_sweep_entry_validates():
    with pytest.raises(SettingsError, match="order"):
        DEIS(edm_polynomial(4, 0.002, 80.0), order=5)
    config = parse_sweep(
        {
            "experiment": "t",
            "backbone": "gmm",
            "solvers": [{"name": "deis", "nfe": [3, 5], "search": {"order": [2, 3]}}],
        }
    )
    assert [(s.nfe, s.settings["order"]) for s in config.trials()] == [
        (3, 2),
        (3, 3),
        (5, 2),
        (5, 3),
    ]
