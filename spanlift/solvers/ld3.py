"""LD3 (Tong et al., ICLR 2025, "Learning to Discretize Denoising Diffusion ODEs"): a learned grid.

The N + 1 noise levels of a base solver are learned, with the endpoints fixed. The grid lives in
the ρ-warped coordinate s = σ^{1/ρ} (ρ = 7, where the EDM grid is uniform; `grid.LearnedGrid`):

    π = π_min + (1 − N π_min) softmax(ℓ),     s_i = s_0 − (s_0 − s_N) Σ_{k<i} π_k,     σ_i = s_i^ρ,
    σ_0 = σ_max,  σ_N = σ_min     (fixed; σ_N = 0 is allowed, as in `edm_to_zero`).

At init the learned grid is the schedule's grid to float64 rounding, so an untrained LD3 is its
base solver. The base, any registered solver, is built on the learned grid (a solver steps on the
grid it is handed), so gradients reach ℓ through every h_i, every σ the model is told and every
σ the base's coefficients read. The grid is `ld3.base.grid` (state_dict key `base.grid.logits`).
Only ℓ is learned (the base's own parameters are frozen). NFE is the base's.

A fit matches the teacher's endpoint with LD3's soft teacher loss: each training noise may move
within a ball of relative radius `slack` (`input_slack`), min_{‖x'−x‖ ≤ slack‖x‖} ‖Ψ_ℓ(x') − x_teacher‖².
"""

import math
from collections.abc import Iterator
from typing import Any

from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Step
from spanlift.solvers.grid import Grid, learned_grid
from spanlift.solvers.on_base import OnBase
from spanlift.solvers.registry import SOLVERS


def check_slack(slack: float) -> float:
    if isinstance(slack, bool) or not isinstance(slack, int | float) or not math.isfinite(slack):
        raise SettingsError(f"ld3 slack must be a finite number ≥ 0, got {slack!r}")
    if slack < 0:
        raise SettingsError(f"ld3 slack must be ≥ 0, got {slack!r}")
    return float(slack)


@SOLVERS.register("ld3")
class LD3(OnBase):
    """LD3: a base solver on a learned grid σ_i = (s_0 − (s_0 − s_N) Σ_{k<i} π_k(ℓ))^ρ, ends fixed.

    π = π_min + (1 − N π_min) softmax(ℓ); only ℓ is learned; NFE and supervision (endpoint) as the
    base's; `slack` is the relative radius of LD3's soft teacher ball (`input_slack`).
    """

    citation = "Tong et al., ICLR 2025 (LD3)"
    title = "LD3"
    reference = "vinhsuhi/LD3"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "ipndm",
        base_settings: dict[str, Any] | None = None,
        slack: float = 0.1,
    ) -> None:
        grid = learned_grid(sigmas, self.name)
        super().__init__(grid, channels, base, base_settings)
        grid.requires_grad_(True)  # the base is frozen; its grid is what LD3 learns
        self.input_slack = check_slack(slack)

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """The base's own rollout (a plugin's sub-steps included), on the learned grid."""
        return self.base.steps(denoiser, x)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return self.base.direction(i, x, history, denoiser)
