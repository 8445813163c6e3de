"""BNS, Bespoke Non-Stationary solvers (Shaul et al., ICML 2024), in σ-form.

A non-stationary (NS) solver of n steps evaluates the model once per step, at times t_0 … t_{n−1},
and forms each new state as its own linear combination of every earlier state and every earlier
velocity, X_i = [x_0 … x_i], U_i = [u_0 … u_i], u_j = u_{t_j}(x_j):

    x_{i+1} = X_i a_i + U_i b_i,        a_i, b_i ∈ R^{i+1}.

Every x_j (j ≥ 1) is itself a combination of x_0 and U_{j−1}, so X_i a_i + U_i b_i spans exactly
what x_0 and U_i span: the same solvers are x_{i+1} = a_i x_0 + U_i b_i with a scalar a_i, the
form the paper counts. Its parameters are the n + 1 times t_0 … t_n, the n scalars a_i and the
n(n + 1)/2 entries of the b_i:

    p = (n + 1) + n + n(n + 1)/2 = n(n + 5)/2 + 1.

σ-form. The NS family is the same in any coordinates whose velocity at a point is a linear
combination of the point and of the σ-form derivative there. The paper's flow coordinates are
t = 1/(1 + σ) (t = 1 is data), z = t x, with velocity u = dz/dt = D − d = x − (1 + σ) d, where
d = (x − D)/σ = dx/dσ: a state z_j is t_j x_j and a velocity u_j is x_j − (1 + σ_j) d_j, so an NS
solver in (z, u) is an NS solver in (x, d) with its coefficients transformed, and back. spanlift
therefore runs the NS update on the σ-form ODE dx/dσ = d itself, with the evaluation times the
solver's grid σ_0 > … > σ_N (N = n steps) and the velocities d_j. Its coefficients are written
relative to the loop's step x_{i+1} = x_i + h_i Δ_i, h_i = σ_{i+1} − σ_i:

    Δ_i = γ_i x_0/σ_0 + Σ_{j ≤ i} w_{i,j} d_j,

which is x_{i+1} = a_i x_0 + Σ_j b_{i,j} d_j with a_i = 1 + Σ_{k ≤ i} h_k γ_k / σ_0 and
b_{i,j} = Σ_{j ≤ k ≤ i} h_k w_{k,j}: a one-to-one change of the coefficients for a given grid (the
same solvers), in which every coefficient is of order one (x_0/σ_0 is unit noise, like d_j).
The grid is LD3's learned grid (`grid.LearnedGrid`, ends fixed); the model is told σ_i. It holds
the n + 1 times as σ_0 … σ_N through N logits, so BNS learns N(N + 5)/2 = p − 1 scalars.

Initialisation (`init`):

- `euler`: γ = 0, w_{i,i} = 1, other w 0 on the schedule's grid: Euler, x_{i+1} = x_i + h_i d_i
  (the same solver in flow coordinates: an Euler step is the same step in both).
- `midpoint`: the paper's RK-Midpoint in flow time, N/2 steps over the even points σ_0, σ_2, …
  of the schedule's N-step grid (on every schedule but `edm_to_zero`, the schedule's own
  N/2-step grid), each evaluating at the midpoint t_m = (t_k + t_{k+1})/2 of the step in
  t = 1/(1 + σ) (the odd grid points are moved there, σ_m = 1/t_m − 1; on `flow`, uniform in t,
  they are there already):

      z_m = z_k + (t_m − t_k) u_k,        z_{k+1} = z_k + (t_{k+1} − t_k) u_m.

  With u = x − (1 + σ) d, t_m − t_k = t_{k+1} − t_m and σ = 1/t − 1, the first substep is the
  Euler step x_{2k+1} = x_{2k} + (σ_{2k+1} − σ_{2k}) d_{2k} and the second is exactly

      x_{2k+2} = x_{2k+1} + (σ_{2k+2} − σ_{2k+1}) (2 d_{2k+1} − d_{2k}),

  NS rows w_{2k,2k} = 1 and (w_{2k+1,2k}, w_{2k+1,2k+1}) = (−1, 2), whatever the grid (N must be
  even).

One NFE per step (minus one with AFS, whose d_0 = x_0/sqrt(1 + σ_0²) costs nothing). The
coefficients are float64 (cast to the rollout's dtype when read), γ as a vector and w as a packed
lower-triangular table (row i holds w_{i,0} … w_{i,i}).
"""

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Solver
from spanlift.solvers.grid import Grid, learned_grid
from spanlift.solvers.logsnr import weighted_sum
from spanlift.solvers.registry import SOLVERS

INITS = ("euler", "midpoint")


def packed_row(table: Tensor, i: int) -> Tensor:
    """Row i (entries j = 0 … i) of a packed lower-triangular table."""
    return table[i * (i + 1) // 2 : (i + 1) * (i + 2) // 2]


def flow_time(sigma: Tensor) -> Tensor:
    """t = 1/(1 + σ): the paper's flow time (t = 1 is data), float64."""
    return 1 / (1 + sigma)


def midpoint_grid(sigmas: Tensor) -> Tensor:
    """The even points of `sigmas` with each odd point moved to the flow-time midpoint of its step:
    σ_{2k+1} = 1/t_m − 1, t_m = (t(σ_{2k}) + t(σ_{2k+2}))/2."""
    grid = sigmas.detach().clone()
    t = flow_time(grid[::2])
    grid[1::2] = 1 / ((t[:-1] + t[1:]) / 2) - 1
    return grid


def initial_rows(init: str, steps: int) -> tuple[Tensor, Tensor]:
    """(γ, packed w) of the solver `init` over `steps` steps (float64): γ = 0 and w_{i,i} = 1
    (Euler), and for `midpoint` every odd row (the second substep) w_{i,i−1} = −1, w_{i,i} = 2."""
    table = torch.zeros(steps * (steps + 1) // 2, dtype=torch.float64)
    for i in range(steps):
        row = packed_row(table, i)
        row[i] = 1.0
        if init == "midpoint" and i % 2:
            row[i - 1 :] = torch.tensor([-1.0, 2.0], dtype=torch.float64)
    return torch.zeros(steps, dtype=torch.float64), table


def check_init(init: str, steps: int, solver: str) -> str:
    if init not in INITS:
        raise SettingsError(f"{solver} init must be one of {', '.join(INITS)}, got {init!r}")
    if init == "midpoint" and steps % 2:
        raise SettingsError(
            f"{solver} init 'midpoint' evaluates twice per midpoint step, so it needs an even "
            f"number of steps; nfe gives {steps} (use an even nfe, or an odd one with afs)"
        )
    return init


@SOLVERS.register("bns")
class BNS(Solver):
    """BNS: every step a learned combination of x_0 and all earlier derivatives, learned grid."""

    citation = "Shaul et al., ICML 2024 (BNS)"
    title = "BNS"
    reference = "no public code; written from the paper (arXiv 2403.01329)"

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False, init: str = "euler") -> None:
        grid = learned_grid(sigmas, self.name)
        init = check_init(init, len(grid()) - 1, self.name)
        if init == "midpoint":
            grid.assign(midpoint_grid(grid()))
        super().__init__(grid, afs)
        self.init = init
        self.buffer_size = self.num_steps  # the whole history: d_0 … d_i and x_0
        start, derivatives = initial_rows(init, self.num_steps)
        self.start_weights = nn.Parameter(start)
        self.derivative_weights = nn.Parameter(derivatives)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        """Δ_i = γ_i x_0/σ_0 + Σ_{j ≤ i} w_{i,j} d_j (history is newest first: history[−1] is
        step 0's point, whose state is x_0)."""
        first = history[-1]
        weights = packed_row(self.derivative_weights, i).to(x.dtype)
        derivatives = [p.derivative for p in reversed(history)]  # d_0 … d_i
        combined = weighted_sum(list(weights), derivatives)
        return torch.addcmul(combined, self.start_weights[i].to(x.dtype), first.x / first.sigma)
