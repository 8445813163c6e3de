"""EPD (Zhu et al., ICCV 2025, "Distilling Parallel Gradients for Fast ODE Solvers of Diffusion
Models"): each step evaluates d_i at σ_i, then K (`points`) derivatives at intermediate points at once,

    s_{i,k} = σ_i^{1−r_{i,k}} σ_{i+1}^{r_{i,k}},     x_{i,k} = x_i + (s_{i,k} − σ_i) Δ_i^base,
    x_{i+1} = x_i + h_i c_i Σ_k λ_{i,k} d(x_{i,k}, s_{i,k}),

r_{i,k} = sigmoid(ρ_{i,k}), λ_i = softmax(ℓ_i) (a simplex), c_i = e^{γ_i} > 0: per-step tables, as in
EPD (no network). Δ_i^base is d_i for EPD-Solver; for EPD-Plugin it is the base multistep solver's
direction (iPNDM by default; any base AMED-Plugin takes) over the grid derivatives d_i, d_{i−1}, … (as in EPD's plugin, the
intermediate evaluations are not buffered). A base with parameters (dyweight) is trained too.

The K states go through one denoiser call on a K-fold batch with a per-sample σ: one NFE, as EPD
counts it (and as spanlift counts a CFG call on a doubled batch), at K× the compute of a plain
evaluation. NFE = 2N − afs, like AMED; a last step to σ = 0 is the base step alone (one fewer).
The denoiser must accept the K-fold batch: unconditional backbones do; a conditioned one needs its
conditioning tiled K times (`backbones.base.conditioned` passes B rows). K = 1 always works.

Parameterisation against the paper's code: it scales each point's direction and optionally its
time; here one positive scale per step (λ_{i,k} c_i spans the same K positive weights), no time
scaling. Init: r_{i,k} = `r_init` (default k/(K+1): distinct points, because coinciding points with
equal weights receive equal gradients and never separate), λ = 1/K, c = `scale_init`, so an
untrained EPD is the analytic solver of that init; with K = 1, or all r_init = 0.5, it is the
untrained AMED-Solver (the geometric midpoint). Fitted against the teacher's states at each σ_i.
"""

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.amed import Plugin, check_fraction, check_scale, derivatives_at, geometric
from spanlift.solvers.base import Denoiser, History, Point
from spanlift.solvers.grid import Grid
from spanlift.solvers.operators import check_positive
from spanlift.solvers.registry import SOLVERS


def initial_points(solver: str, points: int, r_init: Sequence[float] | None) -> Tensor:
    """r_{i,k} at init: `r_init` (one number in (0, 1) per point), or k/(K+1) for k = 1 … K."""
    if r_init is None:
        return torch.arange(1, points + 1, dtype=torch.float64) / (points + 1)
    if not isinstance(r_init, list | tuple) or len(r_init) != points:
        raise SettingsError(
            f"{solver} r_init must be a list of {points} numbers in (0, 1), one per point, "
            f"got {r_init!r}"
        )
    return torch.tensor([check_fraction(solver, "r_init", r) for r in r_init], dtype=torch.float64)


@SOLVERS.register("epd_plugin")
class EPDPlugin(Plugin):
    """EPD-Plugin: x_{i+1} = x_i + h_i c_i Σ_k λ_{i,k} d(x_i + (s_{i,k} − σ_i) Δ_i^base, s_{i,k})."""

    citation = "Zhu et al., ICCV 2025 (EPD)"
    title = "EPD-Plugin"
    reference = "BeierZhu/EPD"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "ipndm",
        base_settings: dict[str, Any] | None = None,
        afs: bool = False,
        points: int = 2,
        r_init: Sequence[float] | None = None,
        scale_init: float = 1.0,
    ) -> None:
        super().__init__(sigmas, afs)
        self.plug_in(base, self.grid, channels, base_settings)
        r = initial_points(self.name, check_positive("points", points), r_init)
        self.r_logits = nn.Parameter((r / (1 - r)).log().float().repeat(self.num_steps, 1))
        self.weight_logits = nn.Parameter(torch.zeros(self.num_steps, points))
        log_scale = math.log(check_scale(self.name, scale_init))
        self.log_scale = nn.Parameter(torch.full((self.num_steps,), log_scale))

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        return self.base.evaluate(denoiser, x, i)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        predicted = self.base.direction(i, x, history, denoiser)
        if i == self.intermediate_steps:  # the last step to σ = 0: the base step alone
            return predicted
        sigma, sigma_next = self.sigmas[i : i + 2]
        s = geometric(sigma, sigma_next, self.r_logits[i].sigmoid())
        d = derivatives_at(denoiser, x, sigma.to(x.dtype), predicted, s)
        weights = self.weight_logits[i].to(x.dtype).softmax(0) * self.log_scale[i].exp()
        return torch.tensordot(weights.to(x.dtype), d, dims=1)


@SOLVERS.register("epd")
class EPD(EPDPlugin):
    """EPD-Solver: x_{i+1} = x_i + h_i c_i Σ_k λ_{i,k} d(x_i + (s_{i,k} − σ_i) d_i, s_{i,k})."""

    citation = "Zhu et al., ICCV 2025 (EPD)"
    title = "EPD"
    reference = "BeierZhu/EPD"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        afs: bool = False,
        points: int = 2,
        r_init: Sequence[float] | None = None,
        scale_init: float = 1.0,
    ) -> None:
        super().__init__(
            sigmas, base="euler", afs=afs, points=points, r_init=r_init, scale_init=scale_init
        )
