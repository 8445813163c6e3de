"""Shared fixtures: the analytic Gaussian-mixture backbone and small teacher sets."""

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.platform.sampling.teacher import generate_teacher


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
