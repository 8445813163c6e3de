"""SpanLift at init is its base solver; gradients reach the operator through the whole rollout."""

import pytest
import torch

from spanlift.errors import SettingsError, UnknownNameError
from spanlift.solvers import SolverSpec, build_solver

from .conftest import noise_like

OPERATORS = ["scalar", "pointwise", "spatial"]
BASES = ["euler", "heun", "ipndm", "dyweight", "unipc"]


def build(gmm, name, nfe=3, **settings):
    return build_solver(SolverSpec(name, nfe, "edm", settings), gmm.sigma_min, gmm.sigma_max, 1)


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("base", BASES)
def test_untrained_spanlift_is_its_base(gmm, base, operator):
    x = gmm.prior(noise_like(gmm, 4))
    with torch.no_grad():
        lifted = build(gmm, "spanlift", base=base, operator=operator, hidden_dim=8)(gmm.denoise, x)
        plain = build(gmm, base)(gmm.denoise, x)
    assert torch.equal(lifted, plain)


def endpoint_loss(solver, gmm, x, target):
    return (solver(gmm.denoise, x) - target).square().mean()


@pytest.mark.parametrize("operator", OPERATORS)
def test_gradients_reach_every_operator_parameter(gmm, operator):
    solver = build(gmm, "spanlift", nfe=4, base="dyweight", operator=operator, hidden_dim=8)
    x = gmm.prior(noise_like(gmm, 4))
    target = torch.zeros_like(x)
    endpoint_loss(solver, gmm, x, target).backward()
    assert (solver.beta.grad != 0).all(), "dL/dβ_i must be non-zero at every step at init (β = 0)"
    optimizer = torch.optim.Adam([p for p in solver.parameters() if p.requires_grad], lr=1e-2)
    optimizer.step()
    optimizer.zero_grad()
    endpoint_loss(solver, gmm, x, target).backward()
    for name, p in solver.operator.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reached {name}"
    assert all(p.grad is None for p in solver.base.parameters()), "the base is frozen by default"


def test_unfrozen_base_is_trained_too(gmm):
    solver = build(gmm, "spanlift", base="dyweight", freeze_base=False, hidden_dim=8)
    x = gmm.prior(noise_like(gmm, 2))
    endpoint_loss(solver, gmm, x, torch.zeros_like(x)).backward()
    assert solver.base.weights.grad.abs().sum() > 0


def test_trained_operator_leaves_the_span(gmm):
    """A spatial correction is not a scalar recombination: with β ≠ 0 the endpoint changes."""
    solver = build(gmm, "spanlift", base="ipndm", hidden_dim=8, beta_init=0.5)
    x = gmm.prior(noise_like(gmm, 2))
    with torch.no_grad():
        assert not torch.allclose(solver(gmm.denoise, x), build(gmm, "ipndm")(gmm.denoise, x))


@pytest.mark.parametrize(
    ("settings", "error", "shown"),
    [
        ({"kernel_size": 0}, SettingsError, "0"),
        ({"kernel_size": -1}, SettingsError, "-1"),
        ({"kernel_size": 2}, SettingsError, "2"),
        ({"kernel_size": 4}, SettingsError, "4"),
        ({"kernel_size": "3"}, SettingsError, "'3'"),
        ({"hidden_dim": 0}, SettingsError, "hidden_dim"),
        ({"history": 0}, SettingsError, "history"),
        ({"operator": "foo"}, UnknownNameError, "foo"),
        ({"base": "spanlift"}, SettingsError, "spanlift"),
        ({"base": "nope"}, UnknownNameError, "nope"),
        ({"colour": 1}, SettingsError, "colour"),
    ],
)
def test_bad_settings_name_the_value(gmm, settings, error, shown):
    with pytest.raises(error, match=shown):
        build(gmm, "spanlift", **settings)
