"""LD3 (Tong et al., ICLR 2025, "Learning to Discretize Denoising Diffusion ODEs"): a learned grid.

The N + 1 noise levels of a base solver are learned, with the endpoints fixed. The grid lives in
the ρ-warped coordinate s = σ^{1/ρ} (ρ = 7, where the EDM grid is uniform):

    π = π_min + (1 − N π_min) softmax(ℓ),     s_i = s_0 − (s_0 − s_N) Σ_{k<i} π_k,     σ_i = s_i^ρ,
    σ_0 = σ_max,  σ_N = σ_min     (fixed; σ_N = 0 is allowed, as in `edm_to_zero`).

π is a point of the simplex with every π_k ≥ π_min = 10⁻³ min_k π_k^init > 0, so for any logits ℓ
the grid decreases strictly, by steps no float rounding merges (softmax alone underflows once the
logits spread by ~36; the floor keeps DPM-Solver's step ratios finite). At init
ℓ_k = ln((π_k^init − π_min) / (1 − N π_min)) with π_k^init = (s_k − s_{k+1}) / (s_0 − s_N): the
learned grid is the schedule's grid to float64 rounding and an untrained LD3 is its base solver.

The base is built as usual and the `LearnedGrid` is attached to it as its `grid` (`Solver.grid`),
so that its `sigma(i)` reads σ_i(ℓ): gradients reach ℓ through every h_i, every σ the model is told
and every σ the base's coefficients read. The grid is `ld3.base.grid` (state_dict key
`base.grid.logits`). Only ℓ is learned (the base's own parameters are frozen). NFE is the base's.

A fit matches the teacher's endpoint with LD3's soft teacher loss: each training noise may move
within a ball of relative radius `slack` (`input_slack`), min_{‖x'−x‖ ≤ slack‖x‖} ‖Ψ_ℓ(x') − x_teacher‖².
"""

import math
from typing import Any

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History
from spanlift.solvers.on_base import OnBase
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.spec import check_settings

RHO = 7.0
FLOOR = 1e-3  # π_min as a share of the smallest initial step

GRID_FOLLOWERS = frozenset({"dlms", "dpm_solver_pp", "dyweight", "euler", "heun", "ipndm"})
"""The bases LD3 runs on: each reads every σ through `sigma(i)`, so on the learned grid
(tests/test_ld3_s4s.py checks each against its analytic self on a moved grid). Others are refused:
UniPC reads its `sigmas` buffer directly, SpanLift reads its σ from its own base, LD3 and S4S-Alt
learn their own, AMED and EPD step through their own interleaved grid."""


def check_grid(sigmas: Tensor, solver: str) -> Tensor:
    """`sigmas` as float64 if σ_0 > σ_1 > … > σ_N ≥ 0 (all finite), else a SettingsError."""
    grid = torch.as_tensor(sigmas, dtype=torch.float64)
    decreasing = grid.ndim == 1 and len(grid) >= 2 and bool((grid[1:] < grid[:-1]).all())
    if not decreasing or not bool(grid.isfinite().all()) or grid[-1] < 0:
        raise SettingsError(
            f"{solver} schedule must decrease strictly from σ_max to σ_min ≥ 0, got {grid.tolist()}"
        )
    return grid


def check_slack(slack: float) -> float:
    if isinstance(slack, bool) or not isinstance(slack, int | float) or not math.isfinite(slack):
        raise SettingsError(f"ld3 slack must be a finite number ≥ 0, got {slack!r}")
    if slack < 0:
        raise SettingsError(f"ld3 slack must be ≥ 0, got {slack!r}")
    return float(slack)


class LearnedGrid(nn.Module):
    """σ_0 > … > σ_N with fixed ends: s_i = s_0 − (s_0 − s_N) Σ_{k<i} π_k(ℓ), σ_i = s_i^ρ.

    π = π_min + (1 − N π_min) softmax(ℓ), π_min = FLOOR · min π^init (module docstring).
    """

    def __init__(self, sigmas: Tensor, solver: str = "ld3") -> None:
        super().__init__()
        grid = check_grid(sigmas, solver)
        warped = grid ** (1 / RHO)
        fractions = (warped[:-1] - warped[1:]) / (warped[0] - warped[-1])
        floor = FLOOR * fractions.min()
        self.register_buffer("ends", grid[[0, -1]])
        self.register_buffer("floor", floor)
        self.logits = nn.Parameter(((fractions - floor) / (1 - len(fractions) * floor)).log())

    def fractions(self) -> Tensor:
        """π: the share of s_0 − s_N each step covers (positive, summing to one)."""
        return self.floor + (1 - len(self.logits) * self.floor) * self.logits.softmax(0)

    def forward(self) -> Tensor:
        """The grid σ_0 … σ_N (float64), differentiable in the logits."""
        start, end = self.ends ** (1 / RHO)
        passed = self.fractions().cumsum(0)[:-1]
        interior = (start - (start - end) * passed) ** RHO
        return torch.cat([self.ends[:1], interior, self.ends[1:]])


def check_base(base: str) -> str:
    SOLVERS.get(base)  # an unknown name is an UnknownNameError listing the known ones
    if base not in GRID_FOLLOWERS:
        raise SettingsError(
            f"ld3 cannot run on base {base!r}: it does not read every σ through `sigma(i)`; "
            f"ld3 runs on {', '.join(sorted(GRID_FOLLOWERS))}"
        )
    return base


@SOLVERS.register("ld3")
class LD3(OnBase):
    """LD3: a base solver on a learned grid σ_i = (s_0 − (s_0 − s_N) Σ_{k<i} π_k(ℓ))^ρ, ends fixed.

    π = π_min + (1 − N π_min) softmax(ℓ); only ℓ is learned; NFE and supervision (endpoint) as the
    base's; `slack` is the relative radius of LD3's soft teacher ball (`input_slack`). The grid is
    the base's (`self.base.grid`) and LD3's σ are read from its base.
    """

    name = "ld3"
    default_base = "ipndm"

    def __init__(
        self,
        sigmas: Tensor,
        channels: int = 1,
        base: str = "ipndm",
        base_settings: dict[str, Any] | None = None,
        slack: float = 0.1,
    ) -> None:
        check_grid(sigmas, "ld3")
        check_settings(check_base(base), base_settings or {})
        base_solver = SOLVERS.get(base).build(sigmas, channels, **(base_settings or {}))
        super().__init__(base_solver.sigmas, base_solver.afs)
        self.base = base_solver.requires_grad_(False)  # frozen; the grid attached next is learned
        self.base.grid = LearnedGrid(self.base.sigmas, self.name)
        self.buffer_size = self.base.buffer_size
        self.input_slack = check_slack(slack)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return self.base.direction(i, x, history, denoiser)
