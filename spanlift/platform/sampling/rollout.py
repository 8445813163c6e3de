"""Sampling primitives: the noise of a seed, and a solver's endpoint from that noise.

Noise for seed s is `randn(shape, Generator(s))`, one generator per seed, so any subset of seeds
gives the same noise anywhere and in any batch. A rollout integrates from the backbone's prior
x_T = prior(noise) down to the solver's last σ: Φ_S(x_T).
"""

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned


def seed_noise(seeds: Sequence[int], shape: Sequence[int]) -> Tensor:
    """Standard normal noise, one independent generator per seed."""
    return torch.stack(
        [torch.randn(*shape, generator=torch.Generator().manual_seed(int(s))) for s in seeds]
    )


def rollout(
    solver: torch.nn.Module,
    backbone: Backbone,
    noise: Tensor,
    cond: Tensor | None = None,
) -> Tensor:
    """The solver's endpoint from standard normal noise (and the samples' conditioning)."""
    return solver(conditioned(backbone, cond), backbone.prior(noise))


def on_device(t: Tensor | None, device: torch.device | str) -> Tensor | None:
    """`t` on `device`; None (no conditioning) stays None."""
    return None if t is None else t.to(device)


def solver_device(solver: torch.nn.Module) -> torch.device:
    """Where a solver's parameters (or, without any, its buffers) live."""
    return next(itertools.chain(solver.parameters(), solver.buffers())).device
