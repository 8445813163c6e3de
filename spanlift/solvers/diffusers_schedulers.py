"""diffusers' schedulers as solvers: `diffusers:<SchedulerClass>` runs that scheduler's own loop.

The loop is the one diffusers' pipelines run (`set_timesteps`, then per timestep
`scale_model_input`, a model call, `step`), on a fresh scheduler per rollout (schedulers keep
state), with the backbone's denoiser D(x, σ) as the model. Two things are adapted:

**The model.** Every scheduler's model input is the variance-preserving state
x_vp = x / sqrt(1 + σ²) (VP schedulers hold it; the σ-space schedulers Euler, Heun, LMS and KDPM2
hold x and divide by sqrt(1 + σ²) in `scale_model_input`), so the denoiser is called on
x = x_vp · sqrt(1 + σ²) at the σ the scheduler steps from, and its answer converted to the
scheduler's `prediction_type` (x_vp = α x0 + σα ε with α = 1/sqrt(1 + σ²)):

    epsilon: ε = (x − D)/σ,    sample: x0 = D,    v_prediction: v = α ε − σα D.

A VP scheduler starts from x_0/sqrt(1 + σ_0²) (the change of variables, where a pipeline would
start from pure noise) and its endpoint is multiplied back by sqrt(1 + σ_N²).

**The grid.** Every scheduler steps on the platform's grid σ_0 > … > σ_N, through its own API
(docs/math.md, "diffusers and k-diffusion" has the table):

- `EulerDiscreteScheduler` takes it as `set_timesteps(sigmas=…)` (held in float32);
- every other scheduler reads σ from its training table ᾱ_t (t = 0 … T − 1). It is built with
  `trained_betas` whose table holds exactly the grid, σ_t = σ_{T−1−t} (ᾱ_t = 1/(1 + σ_t²);
  T = N + 1 entries, or N on a grid ending at σ = 0, whose last step the scheduler takes to its
  own σ = 0), and with the timestep spacing (or custom timesteps) under which its N timesteps are
  T − 1, …, T − N, so it steps from table entry to table entry: from σ_0 to σ_N. The table is
  float32, as diffusers keeps it: 1 − ᾱ carries an absolute rounding of ~6·10⁻⁸, so a σ below
  0.01 is held to within 0.25 % (σ_min = 0.002 as 0.0019984), one above 0.05 to within 10⁻⁴.
  The model is called at the σ the scheduler holds, so its steps stay self-consistent.

The config keys that would choose another grid (beta schedule, spacing, Karras σ, …) are not
settings; those the name fixes (PNDM's `skip_prk_steps`, SA-Solver's τ = 0) neither. A
scheduler that always ends at σ = 0 (Heun, KDPM2, LMS) needs a grid that ends there
(`edm_to_zero`); DEIS and SA-Solver always end on their table's smallest σ > 0, so they need a
grid that ends above 0. NFE is counted per call of the model: Heun and KDPM2 spend 2N − 1, PNDM
N + 1 (its first step is evaluated twice), every other scheduler N.
"""

import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from spanlift.solvers.base import Denoiser
from spanlift.solvers.peers import Observer, Peer, PeerSolver, register, signature_of

Door = Callable[[type, dict[str, Any], Tensor], Any]
"""(scheduler class, its config, σ_0 … σ_N in float64) → a fresh scheduler whose `timesteps`
step on that grid."""

OWN_GRID = "it chooses diffusers' own σ grid; spanlift hands the scheduler the schedule's grid"
NOT_SETTINGS = {
    **dict.fromkeys(
        (
            "num_train_timesteps",
            "beta_start",
            "beta_end",
            "beta_schedule",
            "trained_betas",
            "timestep_spacing",
            "steps_offset",
            "use_karras_sigmas",
            "use_exponential_sigmas",
            "use_beta_sigmas",
            "use_lu_lambdas",
            "use_flow_sigmas",
            "flow_shift",
            "use_dynamic_shifting",
            "time_shift_type",
            "shift_terminal",
            "sigma_min",
            "sigma_max",
            "interpolation_type",
            "final_sigmas_type",
            "set_alpha_to_one",
            "rescale_betas_zero_snr",
            "lambda_min_clipped",
        ),
        OWN_GRID,
    ),
    "timestep_type": "it changes the timestep a network is told; backbones here are told σ",
    "variance_type": "it is for networks that also predict a variance; denoisers here do not",
    "solver_p": "it takes another scheduler object as UniPC's predictor",
}

PREDICTIONS: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "epsilon": lambda x, denoised, sigma: (x - denoised) / sigma,
    "sample": lambda x, denoised, sigma: denoised,
    "v_prediction": lambda x, denoised, sigma: (
        ((x - denoised) / sigma - sigma * denoised) / math.hypot(1.0, sigma)
    ),
}
"""The denoiser's answer D at (x, σ), x in σ-space, as each `prediction_type` (module docstring)."""


def given_sigmas(scheduler_class: type, config: dict[str, Any], grid: Tensor) -> Any:
    """A scheduler that takes the grid itself: `set_timesteps(sigmas=σ_0 … σ_N)`."""
    scheduler = scheduler_class(**config)
    scheduler.set_timesteps(sigmas=grid.numpy())
    return scheduler


def betas_holding(sigmas: Tensor) -> list[float]:
    """β_0 … β_{T−1} whose table is ᾱ_t = 1/(1 + s_t²) for s = `sigmas` in increasing order:
    β_0 = s_0²/(1 + s_0²), β_t = 1 − ᾱ_t/ᾱ_{t−1} = (s_t² − s_{t−1}²)/(1 + s_t²)."""
    squares = sigmas.flip(0) ** 2
    steps = squares - squares.roll(1)
    steps[0] = squares[0]
    return (steps / (1 + squares)).tolist()


def table(spacing: Callable[[bool], dict[str, Any]], custom_timesteps: bool = False) -> Door:
    """A scheduler whose training table holds the grid (module docstring): T = N + 1 entries, or
    N when the grid ends at σ = 0; its timesteps T − 1 … T − N from `spacing(ends at zero)`'s
    config, or passed as `set_timesteps(timesteps=…)`."""

    def door(scheduler_class: type, config: dict[str, Any], grid: Tensor) -> Any:
        to_zero, steps = bool(grid[-1] == 0), len(grid) - 1
        held = grid[:-1] if to_zero else grid
        keys = signature_of(scheduler_class)
        config = {
            **config,
            **{key: value for key, value in spacing(to_zero).items() if key in keys},
            "num_train_timesteps": len(held),
            "trained_betas": betas_holding(held),
        }
        scheduler = scheduler_class(**config)
        if custom_timesteps:
            scheduler.set_timesteps(timesteps=list(range(len(held) - 1, len(held) - 1 - steps, -1)))
        else:
            scheduler.set_timesteps(steps)
        return scheduler

    return door


def leading(to_zero: bool) -> dict[str, Any]:
    """Timesteps k·(T // N) + offset, k = N − 1 … 0: with T = N + 1 − z entries T // N = 1, and
    offset 1 − z puts them on T − 1 … T − N. DDIM and PNDM step from t = 0 to σ = 0 when
    `set_alpha_to_one`, else to the table's t = 0 (σ_N)."""
    return {
        "timestep_spacing": "leading",
        "steps_offset": int(not to_zero),
        "set_alpha_to_one": to_zero,
    }


def linspace_or_trailing(to_zero: bool) -> dict[str, Any]:
    """linspace(0, T − 1, N + 1) rounded, less its last point, is N … 1 for T = N + 1, the last
    step landing on the table's t = 0 (`final_sigmas_type` sigma_min); on a grid ending at σ = 0
    (T = N) trailing spacing gives N − 1 … 0, then σ = 0 (`final_sigmas_type` zero)."""
    return {
        "timestep_spacing": "trailing" if to_zero else "linspace",
        "final_sigmas_type": "zero" if to_zero else "sigma_min",
    }


class StepIndex:
    """Where schedulers that count their steps hold σ: `sigmas[step_index]` (index 0 before the
    first `step`). The count starts at 0 (`set_begin_index`), not at a search for the first
    timestep, which is ambiguous where σ beyond the table's range share a clipped timestep."""

    def start(self, scheduler: Any) -> None:
        scheduler.set_begin_index(0)

    def sigma(self, scheduler: Any, timestep: Tensor) -> float:
        return float(scheduler.sigmas[scheduler.step_index or 0])


class Midpoints(StepIndex):
    """KDPM2: a step's second call is at the log-midpoint σ, held in `sigmas_interpol`."""

    def sigma(self, scheduler: Any, timestep: Tensor) -> float:
        held = scheduler.sigmas if scheduler.state_in_first_order else scheduler.sigmas_interpol
        return float(held[scheduler.step_index or 0])


class AlphaTable:
    """DDIM, PNDM: the timestep indexes ᾱ_t itself, σ = sqrt((1 − ᾱ_t)/ᾱ_t)."""

    def start(self, scheduler: Any) -> None:
        pass

    def sigma(self, scheduler: Any, timestep: Tensor) -> float:
        alpha = scheduler.alphas_cumprod[int(timestep)]
        return float(((1 - alpha) / alpha).sqrt())


LEADING = table(leading)
STEP_INDEX, MIDPOINTS, ALPHA_TABLE = StepIndex(), Midpoints(), AlphaTable()


def every_call(scheduler: Any) -> bool:
    """Each call of the model starts the next grid step."""
    return True


def first_order_again(scheduler: Any) -> bool:
    """Heun, KDPM2: a grid step is done once the scheduler is back in its first order."""
    return bool(scheduler.state_in_first_order)


def past_the_warm_start(scheduler: Any) -> bool:
    """PNDM: its second call re-evaluates the first step (counter 1), every later call starts one."""
    return scheduler.counter != 1


def no_noise(timestep: Any) -> float:
    """SA-Solver's τ(t) = 0: no noise at any step (its deterministic predictor–corrector)."""
    return 0.0


@dataclass(frozen=True)
class Scheduler(Peer):
    """A row: a diffusers scheduler class and how it is put on the platform's grid."""

    door: Door = LEADING
    position: Any = STEP_INDEX
    """Where it holds the σ of the current model call (`StepIndex`, `Midpoints`, `AlphaTable`)."""
    vp: bool = True
    """It holds x_vp = x/sqrt(1 + σ²); False: x itself (the σ-space schedulers)."""
    advances: Callable[[Any], bool] = every_call
    """Whether, after a `step`, the next model call starts a new grid step."""


SCHEDULERS = (
    Scheduler(
        "DDIMScheduler",
        "DDIM, deterministic (η = 0)",
        "Song et al., ICLR 2021 (DDIM)",
        position=ALPHA_TABLE,
    ),
    Scheduler(
        "PNDMScheduler",
        "PLMS: Adams–Bashforth on ε up to order 4 after a Heun-like first step",
        "Liu et al., ICLR 2022 (PNDM)",
        fixed={"skip_prk_steps": True},
        calls=lambda steps, to_zero: steps + (steps > 1),
        position=ALPHA_TABLE,
        advances=past_the_warm_start,
    ),
    Scheduler(
        "LMSDiscreteScheduler",
        "linear multistep (order 4) on dx/dσ, its weights by quadrature",
        "Crowson, k-diffusion (2022): linear multistep in the σ-form of Karras et al., NeurIPS 2022",
        ends=(True,),
        vp=False,
    ),
    Scheduler(
        "KDPM2DiscreteScheduler",
        "DPM-Solver-2 steps in σ through the log-midpoint, Euler to σ = 0",
        "Lu et al., NeurIPS 2022 (DPM-Solver) in the σ-form of Karras et al., NeurIPS 2022",
        calls=lambda steps, to_zero: 2 * steps - 1,
        ends=(True,),
        position=MIDPOINTS,
        vp=False,
        advances=first_order_again,
    ),
    Scheduler(
        "HeunDiscreteScheduler",
        "Heun's second-order method, Euler on the last step to σ = 0",
        "Karras et al., NeurIPS 2022 (EDM), Algorithm 1",
        calls=lambda steps, to_zero: 2 * steps - 1,
        ends=(True,),
        vp=False,
        advances=first_order_again,
    ),
    Scheduler(
        "EulerDiscreteScheduler",
        "Euler in σ, without churn",
        "Karras et al., NeurIPS 2022 (EDM), Algorithm 2",
        door=given_sigmas,
        vp=False,
    ),
    Scheduler(
        "DEISMultistepScheduler",
        "DEIS multistep, log-ρ polynomial extrapolation of ε (orders 1–3)",
        "Zhang & Chen, ICLR 2023 (DEIS)",
        allowed={"algorithm_type": ("deis",), "solver_type": ("logrho",)},
        ends=(False,),
        door=table(linspace_or_trailing),
    ),
    Scheduler(
        "DPMSolverSinglestepScheduler",
        "DPM-Solver / DPM-Solver++ singlestep (orders 1–3)",
        "Lu et al., NeurIPS 2022 (DPM-Solver); Lu et al., 2022 (DPM-Solver++)",
        allowed={"algorithm_type": ("dpmsolver", "dpmsolver++")},
        door=table(linspace_or_trailing, custom_timesteps=True),
    ),
    Scheduler(
        "DPMSolverMultistepScheduler",
        "DPM-Solver / DPM-Solver++ multistep (orders 1–3)",
        "Lu et al., 2022 (DPM-Solver++)",
        allowed={"algorithm_type": ("dpmsolver", "dpmsolver++")},
        door=table(linspace_or_trailing),
    ),
    Scheduler(
        "SASolverScheduler",
        "SA-Solver with τ = 0: its Adams predictor–corrector without noise",
        "Xue et al., NeurIPS 2023 (SA-Solver)",
        fixed={"tau_func": no_noise},
        ends=(False,),
        door=table(linspace_or_trailing),
    ),
    Scheduler(
        "UniPCMultistepScheduler",
        "UniPC multistep predictor–corrector (bh1/bh2, orders 1–3)",
        "Zhao et al., NeurIPS 2023 (UniPC)",
        door=table(linspace_or_trailing),
    ),
)


class DiffusersScheduler(PeerSolver):
    """A diffusers scheduler's loop on the platform's grid (module docstring)."""

    peer: Scheduler
    library = "diffusers"
    package = "diffusers"
    extra = "diffusers"
    repository = "huggingface/diffusers"
    not_settings = NOT_SETTINGS
    common_allowed: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "prediction_type": tuple(PREDICTIONS)
    }

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """diffusers' log below error level: a singlestep scheduler announces on every rollout
        that it turns `lower_order_final` on (for an odd N, or a grid ending at σ = 0)."""
        logging = importlib.import_module("diffusers.utils.logging")
        level = logging.get_verbosity()
        logging.set_verbosity_error()
        try:
            yield
        finally:
            logging.set_verbosity(level)

    def scheduler(self, grid: Tensor) -> Any:
        """A fresh scheduler, set up on `grid`."""
        config = {**self.settings, **self.peer.fixed}
        scheduler = self.peer.door(self.target(), config, grid)
        self.peer.position.start(scheduler)
        return scheduler

    def run(self, denoiser: Denoiser, x: Tensor, observe: Observer | None) -> Tensor:
        grid = self.host_grid()
        scheduler, peer = self.scheduler(grid), self.peer
        predict = PREDICTIONS[self.settings["prediction_type"]]
        sample = x / math.hypot(1.0, float(grid[0])) if peer.vp else x
        starting = True
        for timestep in scheduler.timesteps:
            model_input = scheduler.scale_model_input(sample, timestep)
            sigma = peer.position.sigma(scheduler, timestep)
            state = model_input * math.hypot(1.0, sigma)
            denoised = denoiser(state, state.new_tensor(sigma))
            if observe is not None and starting:
                observe(state, denoised)
            sample = scheduler.step(predict(state, denoised, sigma), timestep, sample).prev_sample
            starting = peer.advances(scheduler)
        return sample * math.hypot(1.0, float(grid[-1])) if peer.vp else sample


globals().update(register(DiffusersScheduler, "diffusers", SCHEDULERS))
