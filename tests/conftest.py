"""Shared fixtures: the analytic Gaussian-mixture backbone and small teacher sets."""

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.solvers import SOLVERS
from spanlift.solvers.peers import PeerSolver

NATIVE_SOLVERS = sorted(name for name, cls in SOLVERS if not issubclass(cls, PeerSolver))
"""The solvers whose loop is spanlift's. Peer solvers run another library's loop (diffusers,
k-diffusion): no solver is built around one, their loops read σ on the host (not on `meta`),
some step only on grids that end at σ = 0 or above it, and they have their own tests
(test_diffusers_schedulers.py, test_kdiffusion_samplers.py)."""


@pytest.fixture(scope="session")
def gmm():
    return load_backbone("gmm")


@pytest.fixture(scope="session")
def gmm64():
    return load_backbone("gmm").double()


@pytest.fixture(scope="session")
def gmm_teacher(gmm):
    """(train, test) teacher sets on disjoint seeds."""
    train = generate_teacher(gmm, range(512), progress=False)
    test = generate_teacher(gmm, range(10**6, 10**6 + 256), progress=False)
    return train, test


def noise_like(backbone, n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(
        n, *backbone.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )
