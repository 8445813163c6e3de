"""iPNDM (Zhang & Chen 2023, DEIS): Adams–Bashforth weights on the derivative buffer.

    Δ_i = Σ_{j<p} w^{(p)}_j d_{i−j},   p = min(i + 1, K)   (warm start with lower orders)

with the classical AB weights w^{(1)} = [1], w^{(2)} = [3, −1]/2, w^{(3)} = [23, −16, 5]/12,
w^{(4)} = [55, −59, 37, −9]/24. `order` is the buffer size K; iPNDM(3M) is order 3.
"""

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Solver, derivative_sum
from spanlift.solvers.grid import Grid
from spanlift.solvers.registry import SOLVERS

ADAMS_BASHFORTH = (
    (1.0,),
    (3 / 2, -1 / 2),
    (23 / 12, -16 / 12, 5 / 12),
    (55 / 24, -59 / 24, 37 / 24, -9 / 24),
)


def ipndm_weights(steps: int, order: int) -> Tensor:
    """The (steps × order) lower-triangular table of iPNDM weights, row i for step i."""
    table = torch.zeros(steps, order, dtype=torch.float64)
    for i in range(steps):
        weights = ADAMS_BASHFORTH[min(i + 1, order) - 1]
        table[i, : len(weights)] = torch.tensor(weights, dtype=torch.float64)
    return table


def check_order(order: int, highest: int, solver: str) -> int:
    if not isinstance(order, int) or not 1 <= order <= highest:
        raise SettingsError(f"{solver} order must be an integer from 1 to {highest}, got {order!r}")
    return order


@SOLVERS.register("ipndm")
class IPNDM(Solver):
    """iPNDM: Adams–Bashforth over the last `order` derivatives (orders 1–4), one NFE per step."""

    citation = "Zhang & Chen, ICLR 2023 (DEIS)"
    title = "iPNDM"
    reference = "zju-pi/diff-sampler solvers.py ipndm_sampler"

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False, order: int = 3) -> None:
        super().__init__(sigmas, afs)
        self.buffer_size = check_order(order, len(ADAMS_BASHFORTH), self.name)
        self.register_buffer("weights", ipndm_weights(self.num_steps, order))

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return derivative_sum(self.weights[i], history)
