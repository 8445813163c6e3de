"""k-diffusion's samplers as solvers: `kdiffusion:<sampler>` runs `k_diffusion.sampling.<sampler>`.

k-diffusion works in the same σ-form as spanlift (x = x0 + σ ε, the model a denoiser D(x, σ)), so
the sampler is handed the backbone's denoiser as its model and the platform's grid as its
`sigmas` (float32, or x's dtype where that is wider). These are the deterministic samplers the
registry lacks, with their noise off:

    sample_dpm_2                DPM-Solver-2 steps through the log-midpoint, s_churn = 0:
                                2 NFE per step, 1 on a step to σ = 0 (Euler)
    sample_lms                  linear multistep on dx/dσ (`order`, 4 by default): N NFE
    sample_dpmpp_2s_ancestral   DPM-Solver++(2S) with η = 0: 2 NFE per step, 1 on a step to 0
    sample_dpmpp_3m_sde         DPM-Solver++(3M) with η = 0 (its ODE): N NFE
    sample_dpm_fast             DPM-Solver-fast: orders 3, …, 3, 2, 1 on m steps uniform in log σ
                                between the grid's ends; it takes σ_min, σ_max and its NFE,
                                n = 3(m − 1), not a grid. It steps on the platform's grid only
                                where that is its own: schedule `logsnr` with m steps (NFE 3, 6,
                                9, …); other NFEs (whose last steps differ in order on the same
                                grid) are not reachable, other schedules refused.

k-diffusion is an optional extra (`kdiffusion`): version 0.0.16, the last without the dctorch
dependency, whose numpy < 2 pin conflicts with pandas 3 and zarr 3; its sampling.py is
identical to 0.1.1.post1's.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from spanlift.solvers.base import Denoiser
from spanlift.solvers.peers import Observer, Peer, PeerSolver, register
from spanlift.solvers.schedules import logsnr_uniform


def silence(sigma: Tensor, sigma_next: Tensor) -> float:
    """A noise sampler for η = 0: the noise it would add is multiplied by zero anyway, and
    k-diffusion's default sampler would draw it (or build a Brownian tree) first."""
    return 0.0


def on_grid(sigmas: Tensor, nfe: int) -> dict[str, Any]:
    """The grid as the sampler's `sigmas`."""
    return {"sigmas": sigmas}


def between_ends(sigmas: Tensor, nfe: int) -> dict[str, Any]:
    """DPM-Solver-fast's own arguments: the grid's ends and its NFE."""
    return {"sigma_min": float(sigmas[-1]), "sigma_max": float(sigmas[0]), "n": nfe}


def two_per_step(steps: int, to_zero: bool) -> int:
    """A second evaluation per step, but not on a step to σ = 0 (an Euler step there)."""
    return 2 * steps - to_zero


@dataclass(frozen=True)
class Sampler(Peer):
    """A row: a k-diffusion sampler function and what it takes as its grid."""

    arguments: Callable[[Tensor, int], dict[str, Any]] = on_grid
    """(σ_0 … σ_N, NFE) → the sampler's grid arguments."""


SAMPLERS = (
    Sampler(
        "sample_dpm_2",
        "DPM-Solver-2 steps in σ through the log-midpoint, Euler to σ = 0",
        "Lu et al., NeurIPS 2022 (DPM-Solver) in the σ-form of Karras et al., NeurIPS 2022",
        fixed={"s_churn": 0.0},
        calls=two_per_step,
    ),
    Sampler(
        "sample_lms",
        "linear multistep on dx/dσ, its weights by quadrature",
        "Crowson, k-diffusion (2022): linear multistep in the σ-form of Karras et al., NeurIPS 2022",
    ),
    Sampler(
        "sample_dpmpp_2s_ancestral",
        "DPM-Solver++(2S) singlestep with η = 0, Euler to σ = 0",
        "Lu et al., 2022 (DPM-Solver++)",
        fixed={"eta": 0.0, "noise_sampler": silence},
        calls=two_per_step,
    ),
    Sampler(
        "sample_dpmpp_3m_sde",
        "DPM-Solver++(3M) with η = 0: its probability-flow ODE",
        "Lu et al., 2022 (DPM-Solver++)",
        fixed={"eta": 0.0, "noise_sampler": silence},
    ),
    Sampler(
        "sample_dpm_fast",
        "DPM-Solver-fast: orders 3, …, 3, 2, 1 on a grid uniform in log σ",
        "Lu et al., NeurIPS 2022 (DPM-Solver), DPM-Solver-fast",
        fixed={"eta": 0.0, "noise_sampler": silence},
        calls=lambda steps, to_zero: 3 * (steps - 1),
        ends=(False,),
        arguments=between_ends,
        own_grid=logsnr_uniform,
        schedule="logsnr",
    ),
)

NOISE = "it only acts on the noise of stochastic sampling; this solver's noise is off"
NOT_SETTINGS: Mapping[str, str] = {
    **dict.fromkeys(("model", "x", "extra_args", "callback", "disable"), "the loop's own argument"),
    **dict.fromkeys(
        ("sigmas", "sigma_min", "sigma_max", "n"),
        "it is the grid, which spanlift hands the sampler from the schedule",
    ),
    **dict.fromkeys(("s_noise", "s_tmin", "s_tmax", "noise_sampler"), NOISE),
}


class KDiffusionSampler(PeerSolver):
    """A k-diffusion sampler on the platform's grid (module docstring)."""

    peer: Sampler
    library = "k_diffusion.sampling"
    package = "k-diffusion"
    extra = "kdiffusion"
    repository = "crowsonkb/k-diffusion k_diffusion/sampling.py"
    not_settings = NOT_SETTINGS

    def run(self, denoiser: Denoiser, x: Tensor, observe: Observer | None) -> Tensor:
        sigmas = self.host_grid().to(x.device, promote(x.dtype))
        sampler = self.target()
        callback = None if observe is None else lambda info: observe(info["x"], info["denoised"])
        return sampler(
            denoiser,
            x,
            **self.peer.arguments(sigmas, self.nfe),
            callback=callback,
            disable=True,
            **self.settings,
            **self.peer.fixed,
        )


def promote(dtype: torch.dtype) -> torch.dtype:
    """The grid's dtype for a state in `dtype`: float32, or wider where the state is."""
    return torch.promote_types(dtype, torch.float32)


globals().update(register(KDiffusionSampler, "kdiffusion", SAMPLERS))
