"""STORK-4 (Tan, Wang, Bertozzi & Ryu, ICLR 2026): a stabilised Runge–Kutta step over a Taylor
extrapolation of the velocity, in the flow-matching coordinates of any model.

STORK integrates the flow ODE dz/dt = v(z, t) with

    t = σ / (1 + σ),   z = x / (1 + σ),   v = d − D = (x − D)/σ − D,

where x = x0 + σ ε is the EDM state (so z = (1 − t) x0 + t ε, the rectified-flow state, and v is
the flow model's velocity ε − x0). Every backbone gives D, so every backbone gives v. One model
call per grid point t_0 > t_1 > … > t_N, plus one at the midpoint of the first interval:

    step 0 (Euler half step, then AB2 from the midpoint t_m = (t_0 + t_1)/2):
        z_m = z_0 + (t_m − t_0) v_0,   z_1 = z_m + (t_1 − t_0) (¾ v_m − ¼ v_0)
    step 1 (AB2 over the unequal steps Δ = t_2 − t_1, Δ' = t_1 − t_0):
        z_2 = z_1 + Δ [(1 + Δ/(2Δ')) v_1 − Δ/(2Δ') v_0]
    step i ≥ 2: with h_1 = t_{i−1} − t_i, h_2 = t_{i−2} − t_{i−1} and Δ = t_{i+1} − t_i,
        v'  = (−v_{i−2} + 4 v_{i−1} − 3 v_i) / (2 h_1)
        v'' = 2 (h_1 v_{i−2} − (h_1 + h_2) v_{i−1} + h_2 v_i) / (h_1 h_2 (h_1 + h_2))
        p(t) = v_i + (t − t_i) v' + ½ (t − t_i)² v''
    and one ROCK4 step (Abdulle 2002, degree 50) of dz/dt = p(t) from t_i to t_{i+1}.

The midpoint's velocity v_m is not kept: steps 1 and 2 read v_0, not v_m. The first derivative
is the equal-step formula (it reads h_1 only), as in the authors' code, on any grid.

ROCK4's stages evaluate p at their stage times and never at their stage states (p depends on t
alone), so a ROCK4 step is a quadrature of p with moments M_k = Σ_j w_j c_j^k (weights w_j and
nodes c_j, as fractions of Δ), and is computed here as

    z_{i+1} = z_i + Δ (M_0 v_i + M_1 Δ v' + M_2 Δ²/2 v''),

without running the 54 stages. ROCK4 as Abdulle wrote it has order 4: M = (1, ½, ⅓) exactly
(`exact_rock4`). The authors' ROCK4 pass (the scheduler's and the paper's runner's alike) sets up
its first recurrence stage and then shifts it into the wrong slot: the stage after it reads the
step's start state as its previous stage and the first stage as the one before, both labelled with
the first stage's time. Its moments, from its degree-50 tables (the default s = 50) through its own
loop, are AUTHORS_MOMENTS: M_0 = 1 − 1.05e−3, so every step scales the current velocity by
0.99895. That is the default, as published; tests/test_stork.py recomputes the moments from the
tables and checks the rollouts against the authors' scheduler.

In x, with ū_i the step's mean velocity (z_{i+1} = z_i + Δ ū_i), every step is x_{i+1} = x_i + h_i Δ_i with

    Δ_i = (x_i + ū_i) / (1 + σ_i),

since (1 + σ_{i+1}) Δ = h_i / (1 + σ_i) for h_i = σ_{i+1} − σ_i (ū = v_i gives Euler: Δ_i = d_i).

The grid is the schedule's: on `edm_to_zero` the last step ends on σ = 0 (t = 0) as the authors'
always does; on a grid ending at σ_min > 0 it ends there, like every other solver. NFE = N + 1
(N with AFS, whose v_0 costs nothing), the calls the authors' scheduler makes on the same grid.

Only the authors' default path is offered (flow prediction, solver_order 4, derivative_order 2,
s = 50); `setting_hint` says why each other variant is refused (docs/math.md, "STORK").
"""

from typing import Any

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Point, Solver
from spanlift.solvers.grid import Grid
from spanlift.solvers.logsnr import weighted_sum
from spanlift.solvers.registry import SOLVERS

REFUSED = {
    "solver_order": "only STORK-4 is offered: the authors' STORK-2 weights its stages as RKG2 "
    "but evaluates the velocity at RKL2's stage times, so it integrates a linear velocity with "
    "weight 0.490 instead of ½ (50 stages): first order",
    "order": "STORK is offered at order 4 only (see solver_order)",
    "derivative_order": "only the second-order Taylor extrapolation is offered: the authors' "
    "third-order one doubles the slope of a linear velocity",
    "prediction_type": "STORK runs in flow coordinates (z = x/(1+σ), t = σ/(1+σ)) for every "
    "backbone; the authors' ε mode (a linear-β VP on a uniform time grid) is not offered",
    "s": "the stage count is the authors' default, 50 (ROCK4 degree 50); with exact_rock4 it "
    "would not change the step at all",
}

AUTHORS_MOMENTS = (0.9989537705055166, 0.4999924084852745, 0.3333257236672046)
"""M_0, M_1, M_2 of the authors' degree-50 ROCK4 pass (its first stage shifted; module docstring),
computed from Abdulle's ROCK4 tables as STORK ships them (external/PNDM/runner/coefs)."""
EXACT_MOMENTS = (1.0, 0.5, 1 / 3)
"""ROCK4's moments as its order conditions fix them: Σ_j w_j c_j^k = 1/(k + 1), k ≤ 3."""


def flow_time(sigma: Tensor) -> Tensor:
    """t = σ / (1 + σ): the flow-matching time of noise level σ."""
    return sigma / (1 + sigma)


def velocity(point: Point) -> Tensor:
    """The flow velocity v = d − D at a history point."""
    return point.derivative - point.denoised


def ab2_weights(t: Tensor) -> list[Tensor]:
    """Weights on (v_1, v_0) of step 1's mean velocity, for t = (t_0, t_1, t_2):
    ū = (1 + Δ/(2Δ')) v_1 − Δ/(2Δ') v_0 with Δ = t_2 − t_1, Δ' = t_1 − t_0."""
    ratio = (t[2] - t[1]) / (2 * (t[1] - t[0]))
    return [1 + ratio, -ratio]


def taylor_weights(t: Tensor, moments: tuple[float, float, float]) -> list[Tensor]:
    """Weights on (v_i, v_{i−1}, v_{i−2}) of ū = M_0 v_i + M_1 Δ v' + M_2 Δ²/2 v'', for
    t = (t_{i−2}, t_{i−1}, t_i, t_{i+1}) and v', v'' as in the module docstring:
    c_0 = M_0 − 3M_1Δ/(2h_1) + M_2Δ²/(h_1(h_1+h_2)),  c_1 = 2M_1Δ/h_1 − M_2Δ²/(h_1h_2),
    c_2 = −M_1Δ/(2h_1) + M_2Δ²/(h_2(h_1+h_2))."""
    m0, m1, m2 = moments
    h1, h2, step = t[1] - t[2], t[0] - t[1], t[3] - t[2]
    slope, curve = m1 * step / h1, m2 * step**2
    return [
        m0 - 1.5 * slope + curve / (h1 * (h1 + h2)),
        2 * slope - curve / (h1 * h2),
        -0.5 * slope + curve / (h2 * (h1 + h2)),
    ]


@SOLVERS.register("stork")
class STORK(Solver):
    """STORK-4: a Taylor-extrapolated velocity through a ROCK4 step in flow coordinates; N + 1 NFE.

    `exact_rock4`: ROCK4 as Abdulle wrote it (M = 1, ½, ⅓) instead of the authors' pass."""

    citation = "Tan et al., ICLR 2026 (STORK)"
    title = "STORK"
    reference = "ZT220501/STORK STORKScheduler.py (flow_prediction, solver_order 4)"
    buffer_size = 3

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False, exact_rock4: bool = False) -> None:
        super().__init__(sigmas, afs)
        if not isinstance(exact_rock4, bool):
            raise SettingsError(f"stork exact_rock4 must be true or false, got {exact_rock4!r}")
        self.exact_rock4 = exact_rock4
        self.moments = EXACT_MOMENTS if exact_rock4 else AUTHORS_MOMENTS

    @classmethod
    def setting_hint(cls, key: str) -> str:
        return REFUSED.get(key, "")

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        """One call per step and one at the first interval's midpoint, minus one with AFS."""
        return steps + 1 - int(bool(settings.get("afs", False)))

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        sigma = self.sigma(i, x)
        grid = flow_time(self.sigmas[max(i - 2, 0) : i + 2])  # float64 for the weights
        if i == 0:
            mean = self.first_mean(x, history[0], grid, denoiser)
        else:
            weights = ab2_weights(grid) if i == 1 else taylor_weights(grid, self.moments)
            weights = [w.to(x.dtype) for w in weights]
            mean = weighted_sum(weights, [velocity(p) for p in history[: len(weights)]])
        return (x + mean) / (1 + sigma)

    def first_mean(self, x: Tensor, first: Point, t: Tensor, denoiser: Denoiser) -> Tensor:
        """ū_0 = ¼ v_0 + ¾ v_m: an Euler half step to the midpoint t_m, one call there, and AB2
        from it (z_1 = z_m + (t_1 − t_0)(¾ v_m − ¼ v_0), z_m = z_0 + (t_m − t_0) v_0)."""
        v0 = velocity(first)
        t_mid = (t[0] + t[1]) / 2
        sigma_mid = t_mid / (1 - t_mid)
        z_mid = x / (1 + self.sigma(0, x)) + (t_mid - t[0]).to(x.dtype) * v0
        x_mid = z_mid * (1 + sigma_mid).to(x.dtype)
        v_mid = velocity(Point.at(denoiser, x_mid, sigma_mid.to(x.dtype)))
        return torch.lerp(v0, v_mid, 0.75)
