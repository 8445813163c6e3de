"""Heun's second-order method (EDM Algorithm 1), Euler on the last step.

    x' = x_i + h_i d_i,   Δ_i = (d_i + d(x', σ_{i+1})) / 2;   last step: Δ = d_i.

Two evaluations per step and one on the last: NFE = 2N − 1 (2N − 2 with AFS).
"""

from typing import Any

from torch import Tensor

from spanlift.solvers.base import Denoiser, History, Point, Solver
from spanlift.solvers.registry import SOLVERS


@SOLVERS.register("heun")
class Heun(Solver):
    """Heun (EDM): second order, 2 evaluations per step, Euler on the last step."""

    citation = "Karras et al., NeurIPS 2022 (EDM), Algorithm 1"
    title = "Heun"
    reference = "NVlabs/edm generate.py edm_sampler"

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        return 2 * steps - 1 - int(bool(settings.get("afs", False)))

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        d = history[0].derivative
        if i == self.num_steps - 1:
            return d
        x_euler = x + self.step_size(i, x) * d
        d_next = Point.at(denoiser, x_euler, self.sigma(i + 1, x)).derivative
        return (d + d_next) / 2
