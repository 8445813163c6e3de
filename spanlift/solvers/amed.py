"""AMED (Zhou et al., CVPR 2024, "Fast ODE-based Sampling for Diffusion Models in Around 5 Steps").

Each step from σ_i to σ_{i+1} evaluates d_i at σ_i, then once more at a learned intermediate point

    s_i = σ_i^{1−r_i} σ_{i+1}^{r_i},   x_s = x_i + (s_i − σ_i) d_i,   r_i ∈ (0, 1),
    AMED-Solver:  x_{i+1} = x_i + h_i c_i d(x_s, s_i),   c_i > 0,

with (r_i, c_i) = g_φ(ξ_i). Deviation from the paper: its g_φ reads the U-Net bottleneck, which
spanlift's backbones do not expose; here g_φ is a small MLP on the step's time features
ξ_i = (λ_i, λ_{i+1}) / 10, λ = −2 ln σ. Its output layer is zero at init, so an untrained AMED has
r_i = `r_init` (0.5) and c_i = `scale_init` (1): the analytic geometric-midpoint solver
(DPM-Solver-2's midpoint, in σ-form).

AMED-Plugin runs a base solver over the interleaved grid σ_0, s_0, σ_1, s_1, …, σ_N (2N sub-steps,
its history holding the intermediate evaluations too) and scales the direction of the sub-step that
lands on σ_{i+1} by c_i. The base is built on that grid (`InterleavedGrid`, recomputed from g_φ at
every read), so it steps on it as on any grid. Untrained, it is the base on the fixed
geometric-midpoint grid. A base with parameters (dyweight) is trained together with g_φ. A base
must spend one evaluation per step (its direction calls no model: not Heun, AMED, EPD) and step on
the grid it is handed (not a solver that learns its own, LD3 or S4S-Alt).

NFE: two evaluations per step, 2N − 1 with AFS (the first d_0 analytic). A last step to σ = 0
(schedule `edm_to_zero`) has no intermediate point: AMED takes an Euler step (x_N = D), the plugin
one base sub-step, so such a grid spends one evaluation fewer (`to_zero` in `nfe_for_steps`).

Both fit against the teacher's states at each coarse σ_i (`supervision = "trajectory"`).
The pieces EPD shares (the intermediate-point solver, the batched evaluation at intermediate
points, the plugin set-up `Plugin.plug_in`) live here.
"""

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Solver, Step
from spanlift.solvers.capabilities import TakesSubsteps
from spanlift.solvers.grid import Grid
from spanlift.solvers.on_base import build_base
from spanlift.solvers.operators import check_positive
from spanlift.solvers.registry import SOLVERS


def check_fraction(solver: str, name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise SettingsError(f"{solver} {name} must be a number in (0, 1), got {value!r}")
    return float(value)


def check_scale(solver: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise SettingsError(f"{solver} scale_init must be a finite number > 0, got {value!r}")
    return float(value)


def geometric(sigma: Tensor, sigma_next: Tensor, r: Tensor) -> Tensor:
    """The intermediate noise level s = σ_i^{1−r} σ_{i+1}^{r}, in the grid's precision (float64)."""
    r = r.to(sigma.dtype)
    return sigma ** (1 - r) * sigma_next**r


def derivatives_at(
    denoiser: Denoiser, x: Tensor, sigma: Tensor, direction: Tensor, points: Tensor
) -> Tensor:
    """d(x + (s_k − σ) Δ, s_k) for the K levels s_k in `points`, stacked (K, *x.shape).

    The K states go through ONE denoiser call on the K-fold batch [s_1 × B, …, s_K × B] with a
    per-sample σ: one NFE, K× the compute of a plain evaluation.
    """
    s = points.to(x.dtype).reshape(-1, *([1] * x.ndim))
    states = x + (s - sigma) * direction
    flat = states.flatten(0, 1)
    denoised = denoiser(flat, s.flatten().repeat_interleave(len(x))).reshape(states.shape)
    return (states - denoised) / s


class IntermediatePointSolver(Solver):
    """A step spends two evaluations: d_i at σ_i and one (batched) call at intermediate points.

    NFE = 2N − afs; a last step to σ = 0 has no intermediate point and spends one fewer.
    """

    supervision: ClassVar[str] = "trajectory"

    def __init__(self, sigmas: Tensor | Grid, afs: bool = False) -> None:
        super().__init__(sigmas, afs)
        self.to_zero = bool(self.sigmas[-1] == 0)

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        return 2 * steps - int(bool(settings.get("afs", False))) - int(to_zero)

    @property
    def intermediate_steps(self) -> int:
        """M: the steps with an intermediate point, all but a last step to σ = 0."""
        return self.num_steps - int(self.to_zero)


class StepNetwork(nn.Module):
    """g_φ: (r, c) = (sigmoid(o_1 + logit r_init), c_init e^{o_2}), o = W₂ SiLU(W₁ ξ + b₁) + b₂,
    ξ = (λ_i, λ_{i+1}) / 10 with λ = −2 ln σ; W₂ = b₂ = 0 at init."""

    def __init__(self, solver: str, hidden_dim: int, r_init: float, scale_init: float) -> None:
        super().__init__()
        r_init = check_fraction(solver, "r_init", r_init)
        self.r_offset = math.log(r_init / (1 - r_init))  # logit r_init
        self.scale_offset = math.log(check_scale(solver, scale_init))
        self.hidden = nn.Linear(2, check_positive("hidden_dim", hidden_dim))
        self.head = nn.Linear(hidden_dim, 2)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, sigma: Tensor, sigma_next: Tensor) -> tuple[Tensor, Tensor]:
        """(r, c) for the steps σ → σ_next (tensors of any matching shape)."""
        xi = torch.stack([sigma.log(), sigma_next.log()], dim=-1) * (-2 / 10)
        out = self.head(F.silu(self.hidden(xi.to(self.head.weight.dtype))))
        return (out[..., 0] + self.r_offset).sigmoid(), (out[..., 1] + self.scale_offset).exp()


@SOLVERS.register("amed")
class AMED(IntermediatePointSolver):
    """AMED-Solver: x_{i+1} = x_i + h_i c_i d(x_i + (s_i − σ_i) d_i, s_i), s_i = σ_i^{1−r_i} σ_{i+1}^{r_i}."""

    citation = "Zhou et al., CVPR 2024 (AMED)"
    title = "AMED"
    reference = "zju-pi/diff-sampler amed-solver-main"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        afs: bool = False,
        hidden_dim: int = 32,
        r_init: float = 0.5,
        scale_init: float = 1.0,
    ) -> None:
        super().__init__(sigmas, afs)
        self.g = StepNetwork(self.name, hidden_dim, r_init, scale_init)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        d = history[0].derivative
        if i == self.intermediate_steps:  # the last step to σ = 0: Euler, x_N = D
            return d
        sigma, sigma_next = self.sigmas[i : i + 2]
        r, c = self.g(sigma, sigma_next)
        s = geometric(sigma, sigma_next, r)
        d_s = derivatives_at(denoiser, x, sigma.to(x.dtype), d, s.reshape(1))[0]
        return c.to(x.dtype) * d_s


class Plugin(IntermediatePointSolver):
    """A plugin over a base multistep solver (AMED-Plugin, EPD-Plugin), set up by `plug_in`."""

    base: Solver

    def plug_in(
        self, base: str, grid: Grid, channels: int, base_settings: dict[str, Any] | None
    ) -> None:
        """Build the base, trained with the plugin, on `grid`, and read its history; AFS is the
        plugin's own setting. The base must spend one evaluation per step and step on the grid it
        is handed."""
        solver, settings = self.name, dict(base_settings or {})
        if "afs" in settings:
            raise SettingsError(f"{solver}: set afs on {solver} itself, not in base_settings")
        if SOLVERS.get(base).nfe_for_steps(2, settings) != 2:
            raise SettingsError(
                f"{solver} base must spend one evaluation per step (a direction without model "
                f"calls), got {base!r}"
            )
        if self.afs:
            settings["afs"] = True
        built = build_base(solver, base, grid, channels, settings, trainable=True)
        if built.grid is not grid:
            raise SettingsError(
                f"{solver} base must step on the grid it is handed; {base} does not"
            )
        self.base = built
        self.buffer_size = built.buffer_size


def interleaved(sigmas: Tensor, points: Tensor) -> Tensor:
    """σ_0, s_0, σ_1, s_1, …, σ_{M−1}, s_{M−1}, σ_M, …, σ_N for the M levels s in `points`."""
    m = len(points)
    return torch.cat([torch.stack([sigmas[:m], points], dim=1).flatten(), sigmas[m:]])


class InterleavedGrid(Grid):
    """The plugin's σ_0, s_0, σ_1, …, σ_N, recomputed from its grid and g_φ at every read
    (differentiable in φ). It reads the plugin, which owns both: no second copy in the state."""

    def __init__(self, plugin: "AMEDPlugin") -> None:
        super().__init__()
        object.__setattr__(self, "plugin", plugin)  # a reference, not a registered child

    def forward(self) -> Tensor:
        return self.plugin.fine_grid()[0]


@SOLVERS.register("amed_plugin")
class AMEDPlugin(Plugin, TakesSubsteps):
    """AMED-Plugin: a base multistep solver on σ_0, s_0, σ_1, …, σ_N, the landing on σ_{i+1} scaled by c_i."""

    citation = "Zhou et al., CVPR 2024 (AMED)"
    title = "AMED-Plugin"
    reference = "zju-pi/diff-sampler amed-solver-main"
    # TakesSubsteps: two substeps per step on the interleaved grid (`steps`)

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "ipndm",
        base_settings: dict[str, Any] | None = None,
        afs: bool = False,
        hidden_dim: int = 32,
        r_init: float = 0.5,
        scale_init: float = 1.0,
    ) -> None:
        super().__init__(sigmas, afs)
        self.g = StepNetwork(self.name, hidden_dim, r_init, scale_init)
        self.plug_in(base, InterleavedGrid(self), channels, base_settings)

    def fine_grid(self) -> tuple[Tensor, Tensor]:
        """The interleaved grid σ_0, s_0, σ_1, …, σ_N and the scales c_0 … c_{M−1}, both
        differentiable in φ. σ_i is point 2i of the interleaved grid."""
        m, sigmas = self.intermediate_steps, self.sigmas
        r, c = self.g(sigmas[:m], sigmas[1 : m + 1])
        return interleaved(sigmas, geometric(sigmas[:m], sigmas[1 : m + 1], r)), c

    def substep(
        self, j: int, x: Tensor, history: History, denoiser: Denoiser, scale: Tensor | None = None
    ) -> tuple[Tensor, History]:
        """The base's sub-step j on the interleaved grid, its direction scaled by `scale`."""
        history = [self.base.evaluate(denoiser, x, j), *history][: self.base.buffer_size]
        delta = self.base.direction(j, x, history, denoiser)
        if scale is not None:
            delta = scale.to(x.dtype) * delta
        return x + self.base.step_size(j, x) * delta, history

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """Coarse steps σ_i → σ_{i+1}, each two base sub-steps (via s_i); Δ_i = (x_{i+1} − x_i)/h_i
        and the history is the one at σ_i."""
        scales = self.fine_grid()[1]
        history: History = []
        for i in range(self.num_steps):
            x_i = x
            x, history = self.substep(2 * i, x, history, denoiser)
            at_sigma_i = history
            if i < self.intermediate_steps:
                x, history = self.substep(2 * i + 1, x, history, denoiser, scales[i])
            yield Step(i, x_i, at_sigma_i, (x - x_i) / self.step_size(i, x), x)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        raise NotImplementedError(
            "amed_plugin steps through the interleaved grid in `steps`; a Step's direction is "
            "(x_{i+1} − x_i) / h_i"
        )
