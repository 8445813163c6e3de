"""The grid: one module per solver, read through `sigmas`; old checkpoints (a `sigmas` buffer on
every solver) still load."""

import pytest
import torch

from spanlift.solvers import Solver, SolverSpec, build_solver
from spanlift.solvers.grid import FixedGrid, LearnedGrid

from .conftest import NATIVE_SOLVERS, noise_like

SPECS = [
    ("ipndm", {}),
    ("dyweight", {}),
    ("unipc", {}),
    ("s4s_alt", {}),
    ("ld3", {"base": "dyweight"}),
    ("spanlift", {"base": "ld3", "hidden_dim": 8}),
    ("amed_plugin", {"base": "dyweight"}),
    ("epd_plugin", {"base": "unipc"}),
]


def build(gmm, name, settings, nfe=4):
    spec = SolverSpec(name, nfe, settings=settings)
    return build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)


def legacy_state(solver: Solver) -> dict[str, torch.Tensor]:
    """The state as checkpoints stored it before the grid was a module: a `sigmas` buffer on
    every solver and no `grid.sigmas`."""
    state = {k: v for k, v in solver.state_dict().items() if not k.endswith("grid.sigmas")}
    for prefix, module in solver.named_modules():
        if isinstance(module, Solver):
            state[f"{prefix}.sigmas" if prefix else "sigmas"] = module.sigmas.detach().clone()
    return state


@pytest.mark.parametrize(("name", "settings"), SPECS)
def test_a_checkpoint_with_the_old_sigmas_buffer_loads(gmm, name, settings):
    trained = build(gmm, name, settings)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.01)
    fresh = build(gmm, name, settings)
    fresh.load_state_dict(legacy_state(trained))  # strict: no key left over or missing
    for key, value in trained.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    x = gmm.prior(noise_like(gmm, 2))
    with torch.no_grad():
        assert torch.equal(fresh(gmm.denoise, x), trained(gmm.denoise, x))


@pytest.mark.parametrize("name", NATIVE_SOLVERS)
def test_every_solver_reads_one_grid_module(gmm, name):
    solver = build(gmm, name, {}, nfe=5 if name in ("heun", "ds_solver") else 4)
    assert isinstance(solver.grid, FixedGrid | LearnedGrid)
    assert torch.equal(solver.sigmas, solver.grid())
    with pytest.raises(AttributeError):
        solver.sigmas = torch.zeros(3)  # a view of the grid, not a buffer to swap


def test_an_ld3_state_holds_one_learned_grid(gmm):
    ld3 = build(gmm, "ld3", {"base": "unipc"})
    assert ld3.grid is ld3.base.grid and isinstance(ld3.grid, LearnedGrid)
    assert {k for k in ld3.state_dict() if "grid" in k} == {
        "base.grid.ends",
        "base.grid.floor",
        "base.grid.logits",
    }
