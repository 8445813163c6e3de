"""DS-Solver (Wang et al., ICML 2025, "Differentiable Solver Search for Fast Diffusion Sampling"):
a linear multistep solver of rectified flows whose step weights and time grid come from a search.

The authors' sampler (NeuralSolver `ns_sampling.py`), on flow time t (noise at t = 0, data at 1;
x_t = t x0 + (1 − t) ε), velocities v_j = v(x_j, t_j), t_0 = 0, t_{i+1} = t_i + Δt_i:

    v̂_i = Σ_{j<i} c_{ij} v_j + (1 − Σ_{j<i} c_{ij}) v_i,      x_{i+1} = x_i + Δt_i v̂_i.

Change of variables to σ-form (as in flowturbo.py): t = 1/(1 + σ), x_t = x/(1 + σ), v = D − d with
d = (x − D)/σ. With h_i = σ_{i+1} − σ_i, Δt_i = −h_i / ((1 + σ_i)(1 + σ_{i+1})), so the step
x_{i+1} = (1 + σ_{i+1}) (x_i/(1 + σ_i) + Δt_i v̂_i) is x_{i+1} = x_i + h_i Δ_i with

    Δ_i = (x_i − v̂_i) / (1 + σ_i),      v̂_i = Σ_{j≤i} w_{ij} (D_j − d_j),
    w_{ij} = c_{ij} (j < i),             w_{ii} = 1 − Σ_{j<i} c_{ij}.

With all c = 0 this is Euler (Δ_i = d_i). The time grid: the table's cumulative shares
τ_i = Σ_{k<i} Δt_k / Σ_k Δt_k, laid over the flow time between the grid's ends,

    t_i = t_0 + (t_N − t_0) τ_i,

t_0 = 1/(1 + σ_max), t_N = 1/(1 + σ_min) (t_N = 1 on a grid ending at σ = 0), σ_i = (1 − t_i)/t_i.
Their sampler is the case σ_max → ∞ and t_N = Σ Δt_k (their shares are softmax outputs printed to
four decimals, summing to 1 ± 2·10⁻⁴; spanlift normalises them so the grid keeps its ends).

Tables (ds_solver_tables.py): `flowdcn` (NFE 5–10, 15) and `sit` (NFE 5–10), the released ones;
`none`: c = 0 on the schedule's own grid (Euler, the authors' search starts there with a uniform
t grid: the `flow` schedule). With `learn`, the weights c_{ij} and the grid (spanlift's learned
grid, `grid.LearnedGrid`, not their softmax over Δt) are fitted, starting from the table.
Only the rectified-flow sampler is ported; their VP (DDPM) variant and its tables are not.
"""

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Solver
from spanlift.solvers.ds_solver_tables import TABLES
from spanlift.solvers.grid import Grid, learned_grid
from spanlift.solvers.registry import SOLVERS

NO_TABLE = "none"


def table_for(table: str, steps: int) -> dict[str, list]:
    """The released table `table` for `steps` steps (one NFE each)."""
    if table not in TABLES:
        known = ", ".join([*TABLES, NO_TABLE])
        raise SettingsError(f"ds_solver table must be one of {known}, got {table!r}")
    if steps not in TABLES[table]:
        nfes = ", ".join(map(str, TABLES[table]))
        raise SettingsError(f"ds_solver table {table!r} has NFE {nfes} only, not {steps}")
    return TABLES[table][steps]


def table_grid(sigmas: Tensor, timedeltas: list[float]) -> Tensor:
    """σ_i = (1 − t_i)/t_i with t_i = t_0 + (t_N − t_0) τ_i, τ_i the cumulative shares of Δt."""
    deltas = torch.tensor(timedeltas, dtype=torch.float64)
    shares = torch.cat([torch.zeros(1, dtype=torch.float64), deltas.cumsum(0) / deltas.sum()])
    ends = 1 / (1 + sigmas[[0, -1]].double())
    t = ends[0] + (ends[1] - ends[0]) * shares
    grid = (1 - t) / t
    grid[0], grid[-1] = sigmas[0], sigmas[-1]  # the ends exactly, not through t
    return grid


def step_weights(coeffs: list[list[float]], steps: int) -> Tensor:
    """The strict lower triangle c_{ij} as an (N × N) float64 table (zeros elsewhere)."""
    table = torch.zeros(steps, steps, dtype=torch.float64)
    for i, row in enumerate(coeffs):
        table[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return table


@SOLVERS.register("ds_solver")
class DSSolver(Solver):
    """DS-Solver: searched multistep weights over all earlier velocities and a searched time grid (released tables flowdcn NFE 5–10, 15 and sit NFE 5–10; training-free unless learn: true)."""

    citation = "Wang et al., ICML 2025 (DS-Solver, Differentiable Solver Search)"
    title = "DS-Solver"
    reference = (
        "MCG-NJU/NeuralSolver src/diffusion/flow_matching/ns_sampling.py NeuralSolverSampler"
    )

    def __init__(self, sigmas: Tensor | Grid, table: str = "flowdcn", learn: bool = False) -> None:
        if not isinstance(learn, bool):
            raise SettingsError(f"ds_solver learn must be true or false, got {learn!r}")
        if isinstance(sigmas, Grid):
            raise SettingsError(
                "ds_solver takes its grid from its table, which a learned or handed grid cannot "
                "follow; put ds_solver under no grid-learning solver (learn: true learns its own)"
            )
        steps = len(sigmas) - 1
        coeffs = torch.zeros(steps, steps, dtype=torch.float64)
        if table != NO_TABLE:
            released = table_for(table, steps)
            sigmas = table_grid(torch.as_tensor(sigmas), released["timedeltas"])
            coeffs = step_weights(released["coeffs"], steps)
        super().__init__(learned_grid(sigmas, self.name) if learn else sigmas)
        self.table, self.buffer_size = table, steps
        self.register_buffer("mask", torch.ones(steps, steps).tril(-1))
        if learn:
            self.coeffs = nn.Parameter(coeffs.float())
        else:
            self.register_buffer("coeffs", coeffs.float())

    def weights(self, i: int) -> Tensor:
        """w_{i,i}, w_{i,i−1}, …, w_{i,0}: newest first, as the history is."""
        row = self.coeffs[i] * self.mask[i]
        earlier = row[:i].flip(0)
        return torch.cat([(1 - earlier.sum())[None], earlier])

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        """Δ_i = (x_i − Σ_j w_{ij} (D_j − d_j)) / (1 + σ_i)."""
        weights = self.weights(i).to(x.dtype)
        velocity = sum(
            w * (p.denoised - p.derivative) for w, p in zip(weights, history, strict=False)
        )
        return (x - velocity) / (1 + self.sigma(i, x))
