"""OSS (Pei, Hu and Gu, 2025, "Optimal Stepsize for Diffusion Sampling"): a base solver on the
steps a dynamic programme picks, sample by sample, against a teacher's trajectory.

Warm-up: the teacher runs from each training state over a fine grid τ_0 > … > τ_M (as GITS's,
`gits.GridSearch`), keeping its states y_0 … y_M. A student state may start at any point m of
the fine grid, from the training state moved there as a flow-matching latent stays put
(z = x/(1 + σ) fixed, the authors' models' coordinate):

    x_m^start = x (1 + τ_m) / (1 + τ_0).

Each of the N levels k extends every student path by one Euler step. For each target n, over
the sources m < n visited from the top down,

    x̂_{mn} = x_m + (τ_n − τ_m) (x_m − D(x_m, τ_m)) / τ_m,
    c_{mn} = mean_pixels ((x̂_{mn} − y_n) / (1 + τ_n))²       (the squared error in z),

the first candidate that lowers the best cost so far of n (kept across levels, rounded to
float32 as the authors' table is) becomes n's state and n's predecessor at level k; a level reads
the states the previous levels left (x_m^start where none arrived). The path of a sample is
traced back from τ_M through the predecessors of levels N−1, …, 0 (an unreached point traces to
the top); it starts wherever the trace ends, not necessarily at τ_0.

The batch grid is the authors' `cal_medium` of the per-sample paths: with a_1 < … < a_N the
path's points counted in fine steps above τ_M, each position k takes
⌊(a_k^{(⌊S/2⌋)} + a_k^{(⌊S/2⌋−1)}) / 2⌋ over the sorted values of the S samples (0-based order
statistics): the two middle values averaged for even S, the middle and the one below for odd S.
The chosen σ_0 = τ_{M − a_N} can lie below σ_max: the base starts there from x moved as above
(`initial_state`), so an OSS rollout spends the base's NFE on the chosen grid from the chosen start.
"""

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, Solver, Step
from spanlift.solvers.gits import GridSearch, no_samples
from spanlift.solvers.grid import Grid, LearnedGrid
from spanlift.solvers.registry import SOLVERS


def start_states(x: Tensor, fine: Tensor) -> Tensor:
    """x_m^start = x (1 + τ_m) / (1 + τ_0) for every m: (M+1, B, D)."""
    scale = ((1 + fine) / (1 + fine[0])).to(x.dtype)
    return scale[:, None, None] * x.flatten(1)[None]


def teacher_states(teacher: Solver, denoiser: Denoiser, x: Tensor) -> Tensor:
    """y_0 = x, y_1 … y_M: the teacher's states on the fine grid, (M+1, B, D)."""
    states = [x.flatten(1)] + [step.x_next.flatten(1) for step in teacher.steps(denoiser, x)]
    return torch.stack(states)


def search_paths(
    denoiser: Denoiser, fine: Tensor, states: Tensor, start: Tensor, steps: int, shape: torch.Size
) -> Tensor:
    """Each sample's path a_1 < … < a_N in fine steps above τ_M (module docstring), (B, N).

    `states` are the teacher's y_0 … y_M and `start` the x_m^start, both (M+1, B, D); `shape` is
    a sample's shape, for the denoiser."""
    last, batch = len(fine) - 1, start.shape[1]
    sigmas = fine.to(start)
    scale = 1 + sigmas
    best = torch.full((last + 1, batch), torch.inf, dtype=start.dtype, device=start.device)
    source = torch.zeros(last + 1, batch, dtype=torch.long, device=start.device)
    arrived, traces = start.clone(), []
    for _ in range(steps):
        current = arrived.clone()
        for m in range(last):
            x = current[m]
            denoised = denoiser(x.reshape(batch, *shape), sigmas[m]).flatten(1)
            h = (sigmas[m + 1 :] - sigmas[m])[:, None, None]
            candidates = x + h * ((x - denoised) / sigmas[m])
            misfit = (candidates - states[m + 1 :]) / scale[m + 1 :, None, None]
            cost = misfit.pow(2).mean(-1)
            better = cost < best[m + 1 :]
            best[m + 1 :] = torch.where(better, cost.float().to(cost.dtype), best[m + 1 :])
            source[m + 1 :] = torch.where(better, m, source[m + 1 :])
            arrived[m + 1 :] = torch.where(better[..., None], candidates, arrived[m + 1 :])
        traces.append(source.clone())
    point, path = torch.full((batch,), last, device=start.device), []
    for trace in reversed(traces):
        point = trace.gather(0, point[None])[0]
        path.append(last - point)
    return torch.stack(path, dim=1)


def cal_medium(paths: Tensor) -> Tensor:
    """The authors' batch path: per position, ⌊(v_{⌊S/2⌋} + v_{⌊S/2⌋−1}) / 2⌋ of the sorted
    values v_0 ≤ … ≤ v_{S−1} of the S samples' paths (S, N)."""
    ordered, middle = paths.sort(dim=0).values, len(paths) // 2
    return torch.div(ordered[middle] + ordered[middle - 1], 2, rounding_mode="floor")


@SOLVERS.register("oss")
class OSS(GridSearch):
    """OSS: a base solver on the median of per-sample DP paths against a teacher's trajectory,
    starting where the paths start (rescaled as a flow latent), not necessarily at σ_max."""

    citation = "Pei et al., 2025 (OSS, Optimal Stepsize for Diffusion Sampling)"
    title = "OSS"
    reference = "bebebe666/OptimalSteps OSS/OSS.py search_OSS, cal_medium"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "euler",
        base_settings: dict[str, Any] | None = None,
        teacher: str = "euler",
        teacher_settings: dict[str, Any] | None = None,
        fine_steps: int = 60,
        fine_schedule: str = "edm",
    ) -> None:
        if isinstance(sigmas, LearnedGrid):
            raise SettingsError(
                "oss may start its grid below σ_max, which a learned grid (fixed ends) cannot "
                "follow; put oss under no grid-learning solver"
            )
        super().__init__(
            sigmas,
            channels,
            base,
            base_settings,
            teacher,
            teacher_settings,
            fine_steps,
            fine_schedule,
        )
        self.register_buffer("top", self.sigmas[0].detach().clone())

    def search(
        self, fine: Tensor, teacher: Solver, batches: Iterable[tuple[Denoiser, Tensor]]
    ) -> Tensor:
        """The grid of `cal_medium` over every training sample's path, top first."""
        paths = []
        for denoiser, x in batches:
            states = teacher_states(teacher.to(x.device), denoiser, x)
            start = start_states(x, fine.to(x.device))
            paths.append(
                search_paths(denoiser, fine, states, start, self.searched_steps, x.shape[1:])
            )
        if not paths:
            raise no_samples(self.name)
        heights = cal_medium(torch.cat(paths).cpu())
        last = len(fine) - 1
        return torch.cat([fine[last - heights.flip(0)], fine[last:]])

    def place(self, chosen: Tensor) -> None:
        """The chosen grid, its first point possibly below σ_max (the grid's bottom is kept)."""
        grid = self.grid.sigmas
        if chosen.shape != grid.shape or chosen[-1] != grid[-1]:
            raise SettingsError(f"oss chose {chosen.tolist()} for the grid {grid.tolist()}")
        grid.copy_(chosen)

    def initial_state(self, x: Tensor) -> Tensor:
        """x at σ_max moved to the chosen σ_0 as a flow latent: x (1 + σ_0) / (1 + σ_max)."""
        ratio = (1 + self.sigmas[0]) / (1 + self.top)  # exactly 1 unsearched: x unchanged
        return x * ratio.to(x.dtype)

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """The base's rollout on the chosen grid, from the chosen start."""
        return self.base.steps(denoiser, self.initial_state(x))
