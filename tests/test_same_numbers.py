"""Same inputs, same numbers: every random stream of a fit comes from its seed and configuration,
never from what the process drew before."""

import torch

from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.solvers import SolverSpec, build_solver

SPANLIFT = SolverSpec("spanlift", 4, "edm", {"base": "dyweight", "kernel_size": 3})


def weights(solver: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in solver.parameters()])


def test_initial_weights_depend_on_the_spec_and_seed_alone(gmm):
    first = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=0)
    torch.rand(1000)  # the process draws in between, as another trial in the same worker would
    state = torch.get_rng_state()
    again = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=0)
    assert torch.equal(torch.get_rng_state(), state)  # a build leaves the process's stream alone
    other = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=1)
    assert torch.equal(weights(first), weights(again))
    assert not torch.equal(weights(first), weights(other))


def test_a_fit_is_the_same_whatever_the_process_drew_before(gmm, gmm_teacher):
    train, _ = gmm_teacher
    settings = FitSettings(iterations=8, batch_size=16, seed=3, validation=0.0)

    def fitted() -> torch.Tensor:
        solver = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=3)
        fit(solver, gmm, train, settings, progress=False)
        return weights(solver)

    once = fitted()
    torch.randn(4096)
    assert torch.equal(once, fitted())
