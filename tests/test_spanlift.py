"""SpanLift at init is its base solver; gradients reach the operator through the whole rollout."""

import pytest
import torch

from spanlift.errors import SettingsError, UnknownNameError
from spanlift.solvers import Point, SolverSpec, build_solver

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


def test_operator_input_stays_on_the_solver_device(gmm):
    """ξ_i is built on the grid's device: on CUDA a CPU t_i would make `torch.stack` mix devices.
    The `meta` device stands in for CUDA here (a CPU tensor mixed in fails there too)."""
    solver = build(gmm, "spanlift", base="ipndm", hidden_dim=8).to("meta")
    x = torch.empty(2, *gmm.shape, device="meta")
    history = [Point.at(lambda x, sigma: x, x, solver.sigma(0, x))]
    features, xi = solver.operator_input(0, x, history)
    assert features.device == xi.device == x.device
    assert xi.shape == (3,) and xi.dtype == x.dtype


@pytest.mark.parametrize(
    ("base", "base_settings"), [("s4s_alt", {"order": 3}), ("ld3", {"base": "ipndm"})]
)
def test_spanlift_steps_on_its_base_learned_grid(gmm, base, base_settings):
    """On a base with a learned grid (moved away from the schedule) SpanLift at β = 0 is that
    base, not a SpanLift over the fixed grid; its features ξ read the moved grid too."""
    lifted = build(gmm, "spanlift", nfe=4, base=base, base_settings=base_settings, hidden_dim=8)
    grid = lifted.base.grid if base == "s4s_alt" else lifted.base.base.grid
    initial = lifted.sigmas.detach().clone()
    noise = torch.randn(grid.logits.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        grid.logits.add_(0.5 * noise.to(grid.logits.dtype))
    moved = grid().detach()
    assert not torch.allclose(moved, initial), "the perturbation must move the grid"
    assert torch.equal(lifted.sigmas, moved), "SpanLift's σ are its base's learned grid"
    fixed = build(gmm, "spanlift", nfe=4, base=base, base_settings=base_settings, hidden_dim=8)
    x = gmm.prior(noise_like(gmm, 4))
    with torch.no_grad():
        on_moved = lifted(gmm.denoise, x)
        assert torch.equal(on_moved, lifted.base(gmm.denoise, x))
        assert not torch.allclose(on_moved, fixed(gmm.denoise, x))
    for i in range(lifted.num_steps):
        assert lifted.sigma(i, moved) == moved[i]
        _, xi = lifted.operator_input(i, x, [])
        lam, lam_next = -2 * moved[i].log(), -2 * moved[i + 1].log()
        expected = torch.stack(
            [torch.tensor(i / lifted.num_steps).double(), lam / 10, (lam_next - lam) / 10]
        )
        torch.testing.assert_close(xi, expected.float())


def test_a_base_that_steps_through_substeps_is_refused_when_built(gmm):
    """AMED-Plugin's step is two substeps on an interleaved grid, not x + h·Δ: SpanLift, which
    adds to the base's Δ, once built on it and failed only in the middle of a rollout."""
    from spanlift.errors import SettingsError

    spec = SolverSpec("spanlift", 4, settings={"base": "amed_plugin"})
    with pytest.raises(SettingsError, match="amed_plugin"):
        build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)
