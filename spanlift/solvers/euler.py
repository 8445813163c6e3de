"""Euler (= DDIM in σ-form): Δ_i = d_i."""

from torch import Tensor

from spanlift.solvers.base import Denoiser, History, Solver
from spanlift.solvers.registry import SOLVERS


@SOLVERS.register("euler")
class Euler(Solver):
    """Euler / DDIM: x_{i+1} = x_i + h_i d_i. First order, one evaluation per step."""

    citation = "Song et al., ICLR 2021 (DDIM); Karras et al., NeurIPS 2022 (EDM)"
    title = "Euler"
    reference = "NVlabs/edm generate.py"

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return history[0].derivative
