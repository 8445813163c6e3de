"""FlowTurbo (Zhao, Shi, Yu, Zhou & Lu, NeurIPS 2024, "FlowTurbo: Towards Real-time Flow-Based Image
Generation with Velocity Refiner"): Heun and pseudo-corrector steps of the backbone, then steps
of a small learned velocity refiner that spend no backbone evaluation.

Coordinates. The authors' models (SiT) run on x_t = t·x1 + (1 − t)·ε, from noise at t = 0 to data
at t = 1, with the velocity v = dx_t/dt ≈ x1 − ε. From spanlift's σ-form (x = x0 + σε):

    t = 1/(1 + σ),   x_t = x/(1 + σ) = t·x,   v = D − d,   d = (x − D)/σ;
    back:  x = (1 + σ)·x_t,   D = x_t + (1 − t)·v.

(tσ = 1 − t gives x_t = t x0 + (1 − t) ε; along dx/dσ = d, dσ/dt = −1/t², so dx_t/dt = x − d/t
= x − (1 + σ)d = D − d.) The flow backbones' own s (flow_matching.py) is 1 − t, their velocity −v.

The sampler (the authors' `FlowTurboAssemble.forward`), on the grid t_i = 1/(1 + σ_i) of the
schedule, Δt_i = t_{i+1} − t_i, N = N_H + N_P + N_R steps in this order, the state x_t carried
from step to step:

    Heun (N_H):       v_i = v(x_i, t_i),  x̃ = x_i + Δt v_i,  v' = v(x̃, t_{i+1}),
                      x_{i+1} = x_i + ½Δt (v_i + v');                                 carry v'
    pseudo-corrector (N_P): the same with v_i the carried v' (the velocity at the predictor point
                      x̃ stands in for the one at x_i), computed only when none is carried;  carry v'
    refiner (N_R):    with u the carried velocity and R the refiner (velocity_refiner.py),
                      v_i = u + R(x_i, u, t_i),  x̃ = x_i + Δt v_i,  v' = v_i + R(x̃, u, t_{i+1}),
                      x_{i+1} = x_i + ½Δt (v_i + v');                                 carry v_i

R reads u, the velocity carried into the step, in both its calls. Untrained, R ≡ 0 (zero output
layer, as the authors' training starts), so a refiner step is x_{i+1} = x_i + Δt u: an Euler step
with the last velocity.

NFE = 2 N_H + N_P, plus one when N_H = 0 (the first pseudo-corrector step has nothing carried).
The refiner's 2 N_R calls are no model evaluations; their time is in the latency column, which
times the whole rollout. N_P is what the NFE leaves: N_P = NFE − 2 N_H (− 1 when N_H = 0).

Deliberate differences from the authors' sampler: any schedule's grid (theirs is uniform in t from
0 to 1: spanlift's `flow` schedule, with its ends at σ_max and σ_min); the refiner is unconditional
(one learned label vector) and predicts C channels; a grid ending at σ = 0 needs N_R ≥ 1, since a
backbone call at t = 1 has no velocity in denoiser form (d = (x − D)/0).
"""

from collections.abc import Iterator
from typing import Any

from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History, Point, Solver, Step
from spanlift.solvers.capabilities import TakesSubsteps
from spanlift.solvers.grid import Grid
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.velocity_refiner import VelocityRefiner

STEP_KINDS = {"heun_steps": 1, "refiner_steps": 3}
"""The counts a user sets and their defaults (the authors' `sample.py`: N_H 1, N_R 3)."""


def step_counts(settings: dict[str, Any]) -> tuple[int, int]:
    """(N_H, N_R) from `settings`, each an integer ≥ 0."""
    counts = []
    for key, default in STEP_KINDS.items():
        value = settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SettingsError(f"flowturbo {key} must be an integer ≥ 0, got {value!r}")
        counts.append(value)
    return counts[0], counts[1]


@SOLVERS.register("flowturbo")
class FlowTurbo(Solver, TakesSubsteps):
    """FlowTurbo: heun_steps Heun (2 NFE each), then pseudo-corrector steps (1 NFE each), then refiner_steps of a learned velocity refiner (0 NFE; its time counts in latency)."""

    citation = "Zhao et al., NeurIPS 2024 (FlowTurbo)"
    title = "FlowTurbo"
    reference = "shiml20/FlowTurbo models_assemble.py FlowTurboAssemble, VelocityRefinerBlock"
    # TakesSubsteps: substeps in flow coordinates, two refiner calls (`steps`)

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        heun_steps: int = 1,
        refiner_steps: int = 3,
        hidden_dim: int = 64,
        heads: int = 4,
        blocks: int = 1,
        patch_size: int = 2,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__(sigmas)
        counts = {"heun_steps": heun_steps, "refiner_steps": refiner_steps}
        self.heun_steps, self.refiner_steps = step_counts(counts)
        self.pseudo_steps = self.num_steps - self.heun_steps - self.refiner_steps
        if self.pseudo_steps < 0 or self.heun_steps + self.pseudo_steps < 1:
            raise SettingsError(
                f"flowturbo needs a backbone step before its {self.refiner_steps} refiner steps; "
                f"its {self.num_steps} steps leave none"
            )
        if self.ends_at_zero and self.refiner_steps == 0:
            raise SettingsError(
                "flowturbo with refiner_steps 0 would call the backbone at σ = 0, where a "
                "denoiser gives no velocity; set refiner_steps ≥ 1 or use a schedule ending above 0"
            )
        self.refiner = VelocityRefiner(channels, hidden_dim, heads, blocks, patch_size, mlp_ratio)

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        """2 N_H + N_P (+ 1 when N_H = 0), N_P = steps − N_H − N_R; 0 where no step is left for
        the backbone."""
        heun, refiner = step_counts(settings)
        pseudo = steps - heun - refiner
        if pseudo < 0 or heun + pseudo < 1:
            return 0
        return 2 * heun + pseudo + int(heun == 0)

    @property
    def nfe(self) -> int:
        counts = {"heun_steps": self.heun_steps, "refiner_steps": self.refiner_steps}
        return self.nfe_for_steps(self.num_steps, counts, self.ends_at_zero)

    @classmethod
    def free_steps(cls, settings: dict[str, Any]) -> int:
        """The refiner's steps (`capabilities.HasFreeSteps`)."""
        return step_counts(settings)[1]

    def time(self, i: int, like: Tensor) -> Tensor:
        """t_i = 1/(1 + σ_i) in `like`'s dtype (computed in the grid's precision)."""
        return (1 / (1 + self.sigmas[i])).to(like.dtype)

    def time_step(self, i: int, like: Tensor) -> Tensor:
        """Δt_i = t_{i+1} − t_i in `like`'s dtype (computed in the grid's precision)."""
        t = 1 / (1 + self.sigmas[i : i + 2])
        return (t[1] - t[0]).to(like.dtype)

    def velocity(self, denoiser: Denoiser, x_t: Tensor, j: int) -> tuple[Tensor, Point]:
        """v = D − d at (x_t, t_j), one model call at x = (1 + σ_j) x_t, and that call's point."""
        sigma = self.sigma(j, x_t)
        point = Point.at(denoiser, x_t * (1 + self.sigmas[j]).to(x_t.dtype), sigma)
        return point.denoised - point.derivative, point

    def heun_step(
        self, i: int, x_t: Tensor, v: Tensor, denoiser: Denoiser
    ) -> tuple[Tensor, Tensor]:
        """(x_{i+1}, v'): x̃ = x_i + Δt v_i, v' = v(x̃, t_{i+1}), x_{i+1} = x_i + ½Δt (v_i + v')."""
        dt = self.time_step(i, x_t)
        v_next, _ = self.velocity(denoiser, x_t + dt * v, i + 1)
        return x_t + 0.5 * dt * (v + v_next), v_next

    def refiner_step(self, i: int, x_t: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """(x_{i+1}, v_i): v_i = u + R(x_i, u, t_i), v' = v_i + R(x_i + Δt v_i, u, t_{i+1}),
        x_{i+1} = x_i + ½Δt (v_i + v')."""
        dt = self.time_step(i, x_t)
        v = self.refiner(x_t, u, self.time(i, x_t)) + u
        v_next = self.refiner(x_t + dt * v, u, self.time(i + 1, x_t)) + v
        return x_t + 0.5 * dt * (v + v_next), v

    def point(self, i: int, x_t: Tensor, v: Tensor) -> Point:
        """The step's velocity at x_i as a history point: D_i = x_t + (1 − t_i) v_i."""
        x = x_t * (1 + self.sigmas[i]).to(x_t.dtype)
        return Point(self.sigma(i, x_t), x, x_t + (1 - self.time(i, x_t)) * v)

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """The module docstring's loop; each Step is in σ-form: x_i = (1 + σ_i) x_t, the history
        the velocity the step used at x_i (a model call for a Heun step or the first step, the
        carried velocity for a pseudo-corrector step, the refined one for a refiner step), and
        Δ_i = (x_{i+1} − x_i)/h_i."""
        self.__dict__["_rollout_grid"] = {None: self.grid()}
        try:
            yield from self.flow_steps(denoiser, x)
        finally:
            self.__dict__.pop("_rollout_grid", None)

    def flow_steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        x_t = x / (1 + self.sigmas[0]).to(x.dtype)
        carried: Tensor | None = None
        for i in range(self.num_steps):
            if i < self.num_steps - self.refiner_steps:
                if carried is None or i < self.heun_steps:
                    v, at_x = self.velocity(denoiser, x_t, i)
                else:
                    v, at_x = carried, self.point(i, x_t, carried)
                x_t_next, carried = self.heun_step(i, x_t, v, denoiser)
            else:
                x_t_next, carried = self.refiner_step(i, x_t, carried)
                at_x = self.point(i, x_t, carried)
            x_next = x_t_next * (1 + self.sigmas[i + 1]).to(x.dtype)
            yield Step(i, at_x.x, [at_x], (x_next - at_x.x) / self.step_size(i, x), x_next)
            x_t = x_t_next

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        raise NotImplementedError(
            "flowturbo steps in flow coordinates in `steps`; a Step's direction is "
            "(x_{i+1} − x_i) / h_i"
        )
