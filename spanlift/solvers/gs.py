"""GS, the Generalized Solver of GAS (Oganov et al., ICLR 2026), in σ-form.

GS is DPM-Solver++(3M) (`dpm_solver_pp`: warm start with orders 1 and 2, then order 3 to the
end, no lower-order final step) with three learned parts:

- a learned grid σ_0 > σ_1 > … > σ_N, ends fixed (`grid.LearnedGrid`, LD3's parameterisation);
- per-step offsets τ_i of where the model is evaluated, σ'_i = σ_i e^{τ_i};
- additive corrections a_{i,j}, c_{i,k} to the coefficients of the update over all earlier
  states and denoised outputs (the history is the whole rollout).

The authors' code runs every model in VP form, x_VP = α x with α_σ = 1/sqrt(1 + σ²), and treats
the model as a noise predictor. In σ-form that reads as follows. At step i the model is told σ'_i
and sees the state rescaled as a VP state at σ'_i, y = x_i α_{σ_i}/α_{σ'_i}; its noise estimate
is the derivative there, ε = (y − D(y, σ'_i))/σ'_i, and it is turned back into a denoised output
at the unshifted σ_i:

    D̂_i = x_i − σ_i ε = (σ_i/σ'_i) D(y, σ'_i) + (1 − σ_i α_i / (σ'_i α'_i)) x_i,

which is D(x_i, σ_i) when τ_i = 0. With λ = −ln σ, φ₁ = e^{−h} − 1 and p_i = min(3, i + 1), the
update is DPM-Solver++'s on the D̂ plus the corrections, in VP units (α_j = α_{σ_j}):

    x_{i+1} = (σ_{i+1}/σ_i) x_i − φ₁ Σ_{k<p} β_k B_k
              + (1/α_{i+1}) [ Σ_{j≤i} a_{i,j} α_{i−j} x_{i−j} − Σ_{k<p} c_{i,k} B_k
                              + Σ_{p≤j≤i} c_{i,j} D̂_{i−j} ],

with DPM-Solver++'s basis B and its weights β (D1_k, r_k as in `dpm_solver_pp`):

    p = 1:  B = (D̂_i),                β = (1)
    p = 2:  B = (D̂_i, D1_0),          β = (1, ½)
    p = 3:  B = (D̂_i, −D1, D2),       β = (1, φ₂/φ₁, φ₃/φ₁).

So c_{i,k} (k < p) corrects the coefficient α_{i+1} φ₁ β_k of B_k, c_{i,j} (j ≥ p) weights an older
denoised output, a_{i,0} corrects the coefficient σ^VP_{i+1}/σ^VP_i of the current VP state and
a_{i,j} (j ≥ 1) weights an older one. A step to σ = 0 (`edm_to_zero`) is first order (p = 1), as
in `dpm_solver_pp`. With every correction and offset zero, GS is DPM-Solver++(3M) without a
lower-order final step on its grid. One NFE per step (minus one with AFS, whose first point
ignores τ_0).

The corrections are kept as packed lower-triangular tables: row i (j = 0 … i) is the slice
[i(i+1)/2, (i+1)(i+2)/2), so every stored scalar is read (N(N+1)/2 per table). The grid, the
offsets and the corrections are float64 (cast to the rollout's dtype when read), so that the
untrained solver equals DPM-Solver++ exactly in float64 too.
"""

import torch
from torch import Tensor, nn

from spanlift.solvers.base import Denoiser, History, Point, Solver
from spanlift.solvers.dpm_solver_pp import basis_weights, denoised_weights
from spanlift.solvers.grid import Grid, learned_grid
from spanlift.solvers.logsnr import data_direction, half_logsnr, order_at, weighted_sum
from spanlift.solvers.registry import SOLVERS

ORDER = 3
"""The DPM-Solver++ order GS builds on (the authors' `unbound_update` is the third-order one)."""


def vp_scale(sigma: Tensor) -> Tensor:
    """α_σ = 1/sqrt(1 + σ²): x_VP = α x for the VP model with the same σ-form ODE."""
    return (1 + sigma**2).rsqrt()


def row(table: Tensor, i: int, like: Tensor) -> Tensor:
    """Row i (entries j = 0 … i) of a packed lower-triangular table, in `like`'s dtype."""
    return table[i * (i + 1) // 2 : (i + 1) * (i + 2) // 2].to(like.dtype)


@SOLVERS.register("gs")
class GS(Solver):
    """GS: DPM-Solver++(3M) on a learned grid, with learned evaluation offsets and corrections."""

    citation = "Oganov et al., ICLR 2026 (GAS)"
    title = "GS"
    reference = "3145tttt/GAS src/gas/generalized_solver.py GeneralizedSolver.sample"

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False) -> None:
        super().__init__(learned_grid(sigmas, self.name), afs)
        steps = self.num_steps
        self.buffer_size = steps
        self.log_offsets = nn.Parameter(torch.zeros(steps, dtype=torch.float64))
        packed = steps * (steps + 1) // 2
        self.state_corrections = nn.Parameter(torch.zeros(packed, dtype=torch.float64))
        self.data_corrections = nn.Parameter(torch.zeros(packed, dtype=torch.float64))

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        """D̂_i from the model told σ'_i = σ_i e^{τ_i} (module docstring); AFS's first point as is."""
        if i == 0 and self.afs:
            return super().evaluate(denoiser, x, i)
        sigma = self.sigma(i, x)
        shifted = sigma * self.log_offsets[i].to(x.dtype).exp()
        rescale = vp_scale(sigma) / vp_scale(shifted)
        ratio = sigma / shifted
        denoised = denoiser(x * rescale, shifted)
        return Point(sigma, x, torch.addcmul(ratio * denoised, 1 - ratio * rescale, x))

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        order = order_at(i, self.num_steps, self.ends_at_zero, ORDER, lower_order_final=False)
        lam = [half_logsnr(self.sigma(i + 1 - k, x)) for k in range(order + 1)]  # λ_{i+1}, λ_i, …
        phi_1 = torch.expm1(-(lam[0] - lam[1]))
        step = self.step_size(i, x)
        weights = denoised_weights(order, lam, phi_1)
        combined = weighted_sum(weights, [p.denoised for p in history[:order]])
        base = data_direction(x, combined, self.sigma(i, x), phi_1, step)
        return base + self.correction(i, order, lam, history, x) / step

    def correction(
        self, i: int, order: int, lam: list[Tensor], history: History, x: Tensor
    ) -> Tensor:
        """(1/α_{i+1}) [Σ_j a_{i,j} α_{i−j} x_{i−j} − Σ_{k<p} c_{i,k} B_k + Σ_{j≥p} c_{i,j} D̂_{i−j}]."""
        states, data = row(self.state_corrections, i, x), row(self.data_corrections, i, x)
        basis = [data[0], -data[1], data[2]] if order == 3 else list(data[:order])  # on D̂_i, D1, D2
        on_basis = basis_weights(lam, basis) if order > 1 else basis  # on D̂_i, D̂_{i−1}, …
        on_data = [-w for w in on_basis] + list(data[order:])
        on_states = [a * vp_scale(p.sigma) for a, p in zip(states, history, strict=True)]
        total = weighted_sum(
            on_states + on_data, [p.x for p in history] + [p.denoised for p in history]
        )
        return total / vp_scale(self.sigma(i + 1, x))
