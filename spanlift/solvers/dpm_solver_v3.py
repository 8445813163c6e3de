"""DPM-Solver-v3 (Zheng et al., NeurIPS 2023): a multistep predictor–corrector whose coefficients
come from the model's own empirical statistics l, s, b (EMS, `model_statistics.py`), in σ-form.

With λ = −ln σ and, integrated from the top of the statistics' λ grid (trapezoid rule on it),

    L = ∫ l,   S = ∫ s,   I = ∫ e^{L+S},   B = ∫ e^{−S} b,   C = ∫ e^{L+S} B,

a point (x_j, D_j) at λ_j gives f_j = (1 − l_j) x_j − D_j and, seen from a step's start λ_s,
g_j = e^{S_s − S_j} f_j − e^{S_s} (B_j − B_s). The step λ_s → λ_t is

    x_t = e^{L_s − L_t} x_s − e^{−L_t − S_s} (I_t − I_s) g_s − e^{−L_t} (C_t − C_s − B_s (I_t − I_s))
          − e^{L_s − L_t} Σ_{k=1}^{p−1} E_k g^{(k)},
    E_k = ∫_{λ_s}^{λ_t} e^{L + S − L_s − S_s} (λ − λ_s)^k / k! dλ,

where g^{(k)} (k = 1 … p−1) are k! times the coefficients of the polynomial in (λ − λ_s) through
the history's g_j (`pseudo`: k! times Newton's divided differences instead, the authors'
"pseudo-order"). Predictor of order p: the step σ_i → σ_{i+1} on the points i, i−1, …, i−p+1.
Corrector (from step 2 on, when D_i is known): the same formula redoes σ_{i−1} → σ_i with the
points i−1, i, i−2, … (its order is the last predictor's, +1 with `corrector_pseudo`); x_i is
replaced and D_i moved so that σ ε − l x stays as evaluated: D_i ← D_i + (1 − l_i)(x_i^c − x_i).
The corrector costs no evaluation: one NFE per step. With l = 1, s = b = 0 (`degenerated`) the
first-order step is DDIM.

The statistics are given to the solver by the platform before it runs (`use_statistics`; a fit,
so a sweep, computes and caches them once per backbone); the solver steps on any grid inside
their σ range: a grid σ between two nodes of the statistics is added to the node grid with
l, s, b interpolated linearly in λ (the authors' code rounds it to the nearest node instead).
"""

import math
from typing import Any

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Point, Solver
from spanlift.solvers.grid import Grid
from spanlift.solvers.ipndm import check_order
from spanlift.solvers.model_statistics import ModelStatistics
from spanlift.solvers.registry import SOLVERS

ON_NODE = 1e-9
"""A grid λ within this of a statistics node is that node."""


def auto_flag(name: str, value: bool | str, steps: int, limit: int) -> bool:
    """A flag that may be "auto": on for at most `limit` steps (the authors' EDM script)."""
    if value == "auto":
        return steps <= limit
    if not isinstance(value, bool):
        raise SettingsError(f"dpm_solver_v3 {name} must be true, false or 'auto', got {value!r}")
    return value


def cumulative_integral(a: Tensor, x: Tensor, b: Tensor | None = None) -> Tensor:
    """∫_{x_0}^{x_n} b e^a dx at each node n by the trapezoid rule (dim 0), e^a scaled by its
    maximum first so that it never overflows."""
    top = a.amax(0, keepdim=True)
    terms = (a - top).exp() if b is None else b * (a - top).exp()
    gaps = (x[1:] - x[:-1]).reshape(-1, *([1] * (a.ndim - 1)))
    parts = 0.5 * gaps * (terms[1:] + terms[:-1])
    return torch.cat([torch.zeros_like(parts[:1]), parts.cumsum(0)]) * top.exp()


class Tables:
    """L, S, I, B, C and l on the statistics' nodes merged with a grid's λ (module docstring)."""

    def __init__(self, stats: ModelStatistics, grid_lam: Tensor) -> None:
        lam, extra = stats.lam, []
        for value in grid_lam.tolist():
            if (lam - value).abs().min() > ON_NODE:
                extra.append(value)
        merged = torch.cat([lam, lam.new_tensor(extra)]).sort().values
        self.lam = merged
        self.l, s, b = (interpolate(merged, lam, t) for t in (stats.l, stats.s, stats.b))
        zero = torch.zeros_like(self.l)
        self.L = cumulative_integral(zero, merged, self.l)
        self.S = cumulative_integral(zero, merged, s)
        self.I = cumulative_integral(self.L + self.S, merged)
        self.B = cumulative_integral(-self.S, merged, b)
        self.C = cumulative_integral(self.L + self.S, merged, self.B)
        self.node = [int((merged - v).abs().argmin()) for v in grid_lam.tolist()]

    def g(self, f: Tensor, s: int, j: int) -> Tensor:
        """g_j seen from node s: e^{S_s − S_j} f_j − e^{S_s} (B_j − B_s)."""
        S, B = self.S, self.B
        return (S[s] - S[j]).exp().to(f) * f - (S[s].exp() * (B[j] - B[s])).to(f)

    def high_order(self, s: int, t: int, k: int) -> Tensor:
        """E_k = ∫_{λ_s}^{λ_t} e^{L + S − L_s − S_s} (λ − λ_s)^k / k! dλ (trapezoid)."""
        lam = self.lam[s : t + 1]
        a = self.L[s : t + 1] + self.S[s : t + 1] - self.L[s] - self.S[s]
        power = ((lam - lam[0]) ** k / math.factorial(k)).reshape(-1, *([1] * (a.ndim - 1)))
        return cumulative_integral(a, lam, power.expand_as(a))[-1]


def interpolate(at: Tensor, nodes: Tensor, values: Tensor) -> Tensor:
    """`values` (rows at `nodes`) linearly interpolated in λ at `at` (inside the nodes)."""
    right = torch.searchsorted(nodes, at).clamp(1, len(nodes) - 1)
    left = right - 1
    w = ((at - nodes[left]) / (nodes[right] - nodes[left])).reshape(-1, *([1] * (values.ndim - 1)))
    return values[left] + w * (values[right] - values[left])


def derivatives(lam: list[Tensor], g: list[Tensor], pseudo: bool) -> list[Tensor]:
    """g^{(1)} … g^{(n)} from g_0 … g_n at λ_0 … λ_n (λ_0 = λ_s): k! times the coefficients of
    the interpolating polynomial in (λ − λ_0), or with `pseudo` k! times the divided differences
    g[λ_0, …, λ_k]."""
    n = len(g) - 1
    if pseudo:
        table, found = list(g), []
        for k in range(1, n + 1):
            table = [(table[j] - table[j + 1]) / (lam[j] - lam[j + k]) for j in range(n - k + 1)]
            found.append(table[0] * math.factorial(k))
        return found
    powers = torch.stack(
        [torch.stack([(lam[j] - lam[0]) ** k for k in range(1, n + 1)]) for j in range(1, n + 1)]
    )
    weights = torch.linalg.inv(powers)  # row k−1: the coefficient of (λ − λ_0)^k
    return [
        math.factorial(k)
        * sum(weights[k - 1, j - 1].to(g[0]) * (g[j] - g[0]) for j in range(1, n + 1))
        for k in range(1, n + 1)
    ]


@SOLVERS.register("dpm_solver_v3")
class DPMSolverV3(Solver):
    """DPM-Solver-v3 predictor–corrector on model statistics; NFE = steps (EMS samples not NFE).

    The empirical model statistics are computed once per backbone from its own samples by a fit
    (cached beside the teacher); their model evaluations are never counted in the NFE."""

    citation = "Zheng et al., NeurIPS 2023 (DPM-Solver-v3)"
    title = "DPM-Solver-v3"
    reference = "thu-ml/DPM-Solver-v3 dpm_solver_v3.py DPM_Solver_v3.sample"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        order: int = 3,
        predictor_pseudo: bool | str = "auto",
        use_corrector: bool | str = "auto",
        corrector_pseudo: bool = False,
        lower_order_final: bool = True,
        degenerated: bool = False,
        ems_timesteps: int = 1200,
        ems_samples: int = 1024,
        ems_seed: int = 0,
    ) -> None:
        super().__init__(sigmas)
        if self.ends_at_zero:
            raise SettingsError(
                "dpm_solver_v3 steps inside its statistics' σ range; a grid ending at σ = 0 "
                "(schedule edm_to_zero) leaves it: use a schedule that ends at σ_min (logsnr)"
            )
        self.order = check_order(order, 3, self.name)
        self.predictor_pseudo = auto_flag("predictor_pseudo", predictor_pseudo, self.num_steps, 5)
        self.use_corrector = auto_flag("use_corrector", use_corrector, self.num_steps, 6)
        self.corrector_pseudo = bool(corrector_pseudo)
        self.lower_order_final, self.degenerated = lower_order_final, degenerated
        if ems_timesteps < 2 or ems_samples < 2:
            raise SettingsError(
                f"dpm_solver_v3 needs ems_timesteps >= 2 and ems_samples >= 2, got "
                f"{ems_timesteps} and {ems_samples}"
            )
        self.request = {"timesteps": ems_timesteps, "samples": ems_samples, "seed": ems_seed}
        self.buffer_size = self.order + 1  # a pseudo-order corrector reads one point more
        for name in ("ems_lambda", "ems_l", "ems_s", "ems_b"):
            self.register_buffer(name, torch.zeros(0, dtype=torch.float64))

    @property
    def steps_on_statistics(self) -> bool:
        """A fit gives it its statistics (`statistics_request`), unless it runs degenerated
        (`capabilities.NeedsStatistics`)."""
        return not self.degenerated

    def statistics_request(self) -> dict[str, Any] | None:
        return None if self.degenerated or len(self.ems_lambda) else dict(self.request)

    def use_statistics(self, stats: ModelStatistics) -> None:
        """Keep `stats` as buffers (they checkpoint with the solver)."""
        device = self.ems_lambda.device
        for name, value in zip(
            ("lambda", "l", "s", "b"), (stats.lam, stats.l, stats.s, stats.b), strict=True
        ):
            setattr(self, f"ems_{name}", value.to(device, torch.float64))
        self.__dict__.pop("_tables", None)

    def _load_from_state_dict(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
        """A checkpoint's statistics have their own shape: taken as they are."""
        for name in ("ems_lambda", "ems_l", "ems_s", "ems_b"):
            if prefix + name in state:
                setattr(self, name, torch.empty_like(state[prefix + name]))
        self.__dict__.pop("_tables", None)
        super()._load_from_state_dict(state, prefix, *args)

    def statistics(self, like: Tensor) -> ModelStatistics:
        """The statistics stepped on; with `degenerated`, l = 1, s = b = 0 on 1200 nodes of the
        grid's range (DPM-Solver++ up to the trapezoid rule)."""
        if self.degenerated:
            sigmas = (float(self.sigmas[-1]), float(self.sigmas[0]))
            return ModelStatistics.degenerate(*sigmas, tuple(like.shape[1:]))
        if not len(self.ems_lambda):
            raise SettingsError(
                "dpm_solver_v3 has no model statistics: fit it (a sweep or `spanlift fit` "
                "computes them from the backbone's samples), or set degenerated: true"
            )
        return ModelStatistics(self.ems_lambda, self.ems_l, self.ems_s, self.ems_b)

    def tables(self, like: Tensor) -> Tables:
        """The integrals for the current grid, built once per grid (float64, on the CPU)."""
        grid = self.sigmas.detach().double().cpu()
        cached = self.__dict__.get("_tables")
        if cached is not None and torch.equal(cached[0], grid):
            return cached[1]
        stats = self.statistics(like)
        stats = ModelStatistics(*(t.detach().cpu() for t in (stats.lam, stats.l, stats.s, stats.b)))
        lam = -grid.log()
        low, high = float(stats.lam[0]), float(stats.lam[-1])
        if lam.min() < low - ON_NODE or lam.max() > high + ON_NODE:
            raise SettingsError(
                f"dpm_solver_v3's grid σ ∈ [{float(grid.min()):.6g}, {float(grid.max()):.6g}] "
                f"leaves its statistics' range [{math.exp(-high):.6g}, {math.exp(-low):.6g}]"
            )
        tables = Tables(stats, lam.clamp(low, high))
        self.__dict__["_tables"] = (grid, tables)
        return tables

    def predictor_order(self, i: int) -> int:
        """The predictor's order at step i (0 before the first step)."""
        if i < 0:
            return 0
        order = min(i + 1, self.order)
        return min(order, self.num_steps - i) if self.lower_order_final else order

    def update(
        self, tab: Tables, points: list[Point], nodes: list[int], t: int, pseudo: bool
    ) -> Tensor:
        """x_t from points[0] (the start s) with the others for the derivatives (module
        docstring); `nodes`: each point's node, `t`: the target node."""
        s, x_s = nodes[0], points[0].x
        ell = tab.l.to(x_s)
        g = [
            tab.g((1 - ell[j]) * p.x - p.denoised, s, j) for p, j in zip(points, nodes, strict=True)
        ]
        L, S, I, B, C = tab.L, tab.S, tab.I, tab.B, tab.C  # noqa: E741 (the paper's names)
        x_t = (
            (L[s] - L[t]).exp().to(x_s) * x_s
            - ((-L[t] - S[s]).exp() * (I[t] - I[s])).to(x_s) * g[0]
            - ((-L[t]).exp() * (C[t] - C[s] - B[s] * (I[t] - I[s]))).to(x_s)
        )
        if len(points) > 1:
            lam = [tab.lam[j] for j in nodes]
            for k, g_k in enumerate(derivatives(lam, g, pseudo), start=1):
                x_t = x_t - ((L[s] - L[t]).exp() * tab.high_order(s, t, k)).to(x_s) * g_k
        return x_t

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        tab = self.tables(x)
        c_order = self.predictor_order(i - 1) + int(self.corrector_pseudo)
        if self.use_corrector and c_order > 1:
            now, older = history[0], range(i - 2, i - c_order, -1)  # steps i−2, …
            points = [history[1], now, *(history[i - j] for j in older)]
            nodes = [tab.node[i - 1], tab.node[i], *(tab.node[j] for j in older)]
            x_c = self.update(tab, points, nodes, tab.node[i], self.corrector_pseudo)
            moved = now.denoised + (1 - tab.l[tab.node[i]].to(x)) * (x_c - now.x)
            history[0] = Point(now.sigma, x_c, moved)
        p = self.predictor_order(i)
        points = history[:p]
        nodes = [tab.node[i - j] for j in range(p)]
        x_next = self.update(tab, points, nodes, tab.node[i + 1], self.predictor_pseudo)
        return (x_next - x) / self.step_size(i, x)
