"""Residual operators R_φ for SpanLift, from least to most expressive (paper, Sec. 3.2).

Every operator maps the input X̃_i = concat(x̃_i, d_i, …, d_{i−K+1}) of shape (N, C(1+K), H, W),
the conditioning ξ_i and the step index to a correction Δ_op of shape (N, C, H, W):

    scalar     Δ_op = Σ_j c_{i,j} d_{i−j}                      (inside the buffer span)
    pointwise  FiLM-conditioned CNN with 1×1 kernels            (mixes channels, one position)
    spatial    FiLM-conditioned CNN with depthwise k×k kernels  (mixes neighbouring positions)

The CNN: a 1×1 stem, `blocks` residual blocks h ← h + W₂ SiLU(FiLM_ξ(DWConv_k(GN(h)))), and a
1×1 head. FiLM_ξ(z) = z (1 + γ(ξ)) + b(ξ) with γ, b from a small MLP of ξ.
"""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.registry import Registry

OperatorFactory = Callable[..., nn.Module]
OPERATORS: Registry[OperatorFactory] = Registry("operator class")


def check_kernel_size(kernel_size: int) -> int:
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise SettingsError(
            f"kernel_size must be a positive odd integer (1, 3, 5, …), got {kernel_size!r}"
        )
    return kernel_size


def check_positive(name: str, value: int) -> int:
    if not isinstance(value, int) or value < 1:
        raise SettingsError(f"{name} must be a positive integer, got {value!r}")
    return value


class ScalarOperator(nn.Module):
    """Δ_op = Σ_j c_{i,j} d_{i−j}: a per-step scalar recombination of the buffer (init c_{i,0} = 1)."""

    def __init__(self, channels: int, history: int, steps: int, **_: object) -> None:
        super().__init__()
        self.channels = channels
        coefficients = torch.zeros(steps, history)
        coefficients[:, 0] = 1.0
        self.coefficients = nn.Parameter(coefficients)

    def forward(self, features: Tensor, xi: Tensor, i: int) -> Tensor:
        derivatives = features[:, self.channels :].unflatten(1, (-1, self.channels))
        return torch.einsum("k,nkchw->nchw", self.coefficients[i].to(features.dtype), derivatives)


class FiLMBlock(nn.Module):
    def __init__(self, hidden: int, kernel_size: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(min(8, hidden), hidden)
        self.spatial = nn.Conv2d(
            hidden, hidden, kernel_size, padding=kernel_size // 2, groups=hidden
        )
        self.mix = nn.Conv2d(hidden, hidden, 1)

    def forward(self, h: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
        z = self.spatial(self.norm(h))
        z = z * (1 + scale[:, :, None, None]) + shift[:, :, None, None]
        return h + self.mix(nn.functional.silu(z))


class ConvOperator(nn.Module):
    """The FiLM-conditioned CNN; kernel_size 1 makes it pointwise, k > 1 spatial."""

    def __init__(
        self,
        channels: int,
        history: int,
        kernel_size: int,
        hidden_dim: int,
        blocks: int,
        **_: object,
    ) -> None:
        super().__init__()
        check_kernel_size(kernel_size)
        hidden = check_positive("hidden_dim", hidden_dim)
        check_positive("blocks", blocks)
        self.stem = nn.Conv2d(channels * (1 + history), hidden, 1)
        self.film = nn.Sequential(
            nn.Linear(3, hidden), nn.SiLU(), nn.Linear(hidden, 2 * hidden * blocks)
        )
        self.blocks = nn.ModuleList(FiLMBlock(hidden, kernel_size) for _ in range(blocks))
        self.head = nn.Conv2d(hidden, channels, 1)

    def forward(self, features: Tensor, xi: Tensor, i: int) -> Tensor:
        """Runs in its weights' dtype (float32 while fitted) and answers in the features' dtype
        (a half-precision backbone's)."""
        dtype = self.stem.weight.dtype
        h = self.stem(features.to(dtype))
        film = self.film(xi.to(dtype)).expand(len(features), -1)
        for block, modulation in zip(self.blocks, film.chunk(len(self.blocks), 1), strict=True):
            h = block(h, *modulation.chunk(2, 1))
        return self.head(h).to(features.dtype)


OPERATORS.register("scalar")(ScalarOperator)
OPERATORS.register("spatial")(ConvOperator)
OPERATORS.register("pointwise")(lambda **kw: ConvOperator(**{**kw, "kernel_size": 1}))
