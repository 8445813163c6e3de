"""GITS (Chen et al., ICML 2024, "On the Trajectory Regularity of ODE-based Diffusion Sampling"):
a base solver on a time grid chosen by dynamic programming over a fine teacher grid.

Warm-up: a teacher solver runs from the training noise over a fine grid τ_0 > … > τ_M (M =
`fine_steps`, the `fine_schedule` between the grid's ends), keeping its states y_m and derivatives
d_m = (y_m − D(y_m, τ_m)) / τ_m. The cost of a coarse step τ_m → τ_n (m < n) is how far one Euler
step from the teacher's state lands from the teacher's state there, averaged over the samples:

    ŷ_{mn} = y_m + (τ_n − τ_m) d_m,
    c_{mn} = mean ‖ŷ_{mn} − y_n‖₁  (`l1`),   mean ‖ŷ_{mn} − y_n‖₂  (`l2`),
             mean [dev(ŷ_{mn}) − dev(y_n)]  (`dev`, the default),
    dev(z) = ‖(y_M − z) − ⟨y_M − z, e⟩ e‖,   e = (y_M − y_0) / ‖y_M − y_0‖

(dev: the distance from the chord y_0 → y_M, the trajectory regularity the paper builds on).
The N-step path 0 = m_0 < m_1 < … < m_N = M minimises the cost with later steps weighted by γ:

    V_1(m) = c_{mM},     V_k(m) = min_{m<n<M} c_{mn} + γ V_{k−1}(n),     γ = `coeff` (1.15),

followed from m_0 = 0 (the first minimum on ties), and the grid is σ_k = τ_{m_k}.

With a base that takes the analytical first step (AFS: its first step costs no evaluation), the
DP chooses N − 1 steps, and one more point is put between the first two (GITS's AFS, as in the
authors' code, which keeps the NFE of the N − 1 steps): the fine point τ_k, 0 < k < m_1, whose grid
τ_0, τ_k, τ_{m_1}, …, τ_M brings the base's own rollout (AFS included) nearest the teacher's
endpoint y_M on the warm-up noise,

    k = argmin_{0<k<m_1} mean ‖x̂_k − y_M‖₂     (the first minimum on ties).

With m_1 = 1 there is no such point, and the search is refused (more `fine_steps` leave room).

The search is no gradient fit: a fit calls `prepare` once before its first update with the
training noise, which runs the warm-up and the DP and writes the chosen σ into the grid the base
steps on (a buffer, so the solver checkpoints and reloads like any fitted one; `searched` records
that it ran, and a searched GITS keeps its grid). GITS is a solver over a base, like LD3, and not
a schedule: a schedule is a pure function of the step count, while the chosen grid depends on the
model and is state. Unsearched, GITS is its base on the base schedule. A grid ending at σ = 0
(`edm_to_zero`) keeps that last step; the search covers σ_0 … σ_{N−1} (with AFS the endpoint
compared is the state at σ_{N−1}). Handed a learned grid (LD3 over GITS), the search sets its
logits: LD3 then starts from the searched grid.

Against diff-sampler's gits-main: its `num_steps` counts time points (the README's 7-point
CIFAR-10 grid is 6 steps, NFE 6 for iPNDM); spanlift counts steps. Its warm-up teacher is iPNDM
of its default order 4 on 61 points, and with AFS it hands the student's AFS to the teacher too,
so the teacher's first step is the student's free one, c_{01} = 0, and the DP takes τ_1 as its
first point, leaving no room for the AFS point (on the Gaussian mixture at NFE 4–6 it then samples
with one evaluation fewer than it counts); here `teacher` and `teacher_settings` (the teacher's
own defaults when unset: iPNDM order 3, no AFS; {order: 4} is gits-main's). Its AFS point is
chosen on its last warm-up batch; here on all the training noise.
"""

import math
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.registry import Registry
from spanlift.solvers.base import Denoiser, History, Solver, Step
from spanlift.solvers.grid import FixedGrid, Grid, LearnedGrid
from spanlift.solvers.on_base import OnBase
from spanlift.solvers.operators import check_positive
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.schedules import SCHEDULES
from spanlift.solvers.spec import check_settings, ends_at_zero

Metric = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""(candidates ŷ, teacher states y, y_0, y_M), each (…, B, D) → the per-row batch mean cost."""
METRICS: Registry[Metric] = Registry("gits metric")
Warmed = tuple[Denoiser, Tensor, Tensor]
"""A warm-up batch: its model, its states x at σ_max and the teacher's endpoints y_M (B, D)."""


@METRICS.register("l1")
def l1_cost(candidates: Tensor, targets: Tensor, start: Tensor, end: Tensor) -> Tensor:
    return (candidates - targets).abs().sum(-1).mean(-1)


@METRICS.register("l2")
def l2_cost(candidates: Tensor, targets: Tensor, start: Tensor, end: Tensor) -> Tensor:
    return (candidates - targets).norm(dim=-1).mean(-1)


@METRICS.register("dev")
def deviation_cost(candidates: Tensor, targets: Tensor, start: Tensor, end: Tensor) -> Tensor:
    return (chord_distance(candidates, start, end) - chord_distance(targets, start, end)).mean(-1)


def chord_distance(points: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """‖(y_M − z) − ⟨y_M − z, e⟩ e‖ with e = (y_M − y_0)/‖y_M − y_0‖, per sample (last dim D)."""
    unit = (end - start) / (end - start).norm(dim=-1, keepdim=True)
    offset = end - points
    return (offset - (offset * unit).sum(-1, keepdim=True) * unit).norm(dim=-1)


def warm_up(teacher: Solver, denoiser: Denoiser, x: Tensor) -> tuple[Tensor, Tensor]:
    """The teacher's states y_0 … y_M (M+1, B, D) and derivatives d_0 … d_{M−1} (M, B, D)."""
    states, derivatives = [x.flatten(1)], []
    for step in teacher.steps(denoiser, x):
        derivatives.append(step.history[0].derivative.flatten(1))
        states.append(step.x_next.flatten(1))
    return torch.stack(states), torch.stack(derivatives)


def cost_matrix(fine: Tensor, states: Tensor, derivatives: Tensor, metric: Metric) -> Tensor:
    """c_{mn} for m < n on the fine grid (float64, (M+1) × (M+1), zero elsewhere); computed in
    float32 at least."""
    work = torch.promote_types(states.dtype, torch.float32)
    states, derivatives = states.to(work), derivatives.to(work)
    last = len(fine) - 1
    cost = torch.zeros(last + 1, last + 1, dtype=torch.float64)
    sigmas = fine.to(work)
    for m in range(last):
        h = (sigmas[m + 1 :] - sigmas[m]).reshape(-1, 1, 1)
        candidates = states[m] + h * derivatives[m]
        row = metric(candidates, states[m + 1 :], states[0], states[-1])
        cost[m, m + 1 :] = row.double().cpu()
    return cost


def dynamic_programming(cost: Tensor, steps: int, coeff: float) -> list[int]:
    """0 = m_0 < … < m_N = M minimising V (module docstring); the first minimum on ties."""
    last = len(cost) - 1
    inside = torch.ones_like(cost, dtype=torch.bool).triu(1)
    inside[:, last] = False  # a step to τ_M is V_1's
    inner = torch.where(inside, cost, math.inf)  # c_{mn} for m < n < M, inf elsewhere
    value, choices = cost[:, last], []
    for _ in range(steps - 1):
        totals = inner + coeff * value[None, :]
        choice = totals.argmin(dim=1)
        value = totals.gather(1, choice[:, None])[:, 0]
        choices.append(choice)
    path = [0]
    for choice in reversed(choices):
        path.append(int(choice[path[-1]]))
    return [*path, last]


def check_coeff(coeff: float) -> float:
    if isinstance(coeff, bool) or not isinstance(coeff, int | float) or not 0 < coeff < math.inf:
        raise SettingsError(f"gits coeff must be a finite number > 0, got {coeff!r}")
    return float(coeff)


def searchable(sigmas: Tensor | Grid, solver: str = "gits") -> FixedGrid | LearnedGrid:
    """The grid a search writes into: a tensor as a fixed grid, or the fixed or learned grid it is
    handed (LD3 over GITS); a grid computed from another solver is refused."""
    if isinstance(sigmas, FixedGrid | LearnedGrid):
        return sigmas
    if isinstance(sigmas, Grid):
        raise SettingsError(f"{solver} searches its own grid; it cannot step on another solver's")
    return FixedGrid(sigmas)


class GridSearch(OnBase):
    """A base solver on the grid a search picks over a fine grid τ_0 > … > τ_M (`fine_steps` steps
    of `fine_schedule` between the grid's ends) from a teacher's warm-up there (GITS, OSS).

    `search(fine, teacher, batches)` returns the σ it chose for the points σ_0 … σ_{N'} (N' = N,
    or N − 1 on a grid ending at σ = 0, whose last step is kept); `place` writes them into the grid
    the base steps on. A fit calls `prepare` once before its first update with the training noise;
    the chosen σ are a buffer, so the solver checkpoints and reloads like any fitted one, and
    `searched` records that it ran (a searched solver keeps its grid). Unsearched, it is its base
    on the base schedule.
    """

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int,
        base: str,
        base_settings: dict[str, Any] | None,
        teacher: str,
        teacher_settings: dict[str, Any] | None,
        fine_steps: int,
        fine_schedule: str,
    ) -> None:
        super().__init__(searchable(sigmas, self.name), channels, base, base_settings)
        self.teacher, self.teacher_settings = teacher, dict(teacher_settings or {})
        check_settings(teacher, self.teacher_settings)
        searched_steps = self.num_steps - int(self.ends_at_zero)
        self.fine_steps = check_positive(f"{self.name} fine_steps", fine_steps)
        if fine_steps < searched_steps:
            raise SettingsError(
                f"{self.name} fine_steps must be at least the {searched_steps} steps it chooses, "
                f"got {fine_steps}"
            )
        if ends_at_zero(fine_schedule):
            raise SettingsError(
                f"{self.name} fine_schedule must end above σ = 0, got {fine_schedule!r}"
            )
        self.fine_schedule, self.channels = fine_schedule, channels
        self.register_buffer("searched", torch.tensor(False))

    @property
    def searched_steps(self) -> int:
        """N': the steps the search chooses (a last step to σ = 0 is kept, not searched)."""
        return self.num_steps - int(self.ends_at_zero)

    def fine_grid(self) -> Tensor:
        """τ_0 … τ_M: the fine schedule between the ends of the grid the search covers."""
        grid = self.sigmas.detach()
        top, bottom = float(grid[0]), float(grid[-2] if self.ends_at_zero else grid[-1])
        fine = SCHEDULES.get(self.fine_schedule)(self.fine_steps, bottom, top)
        fine[0], fine[-1] = top, bottom  # exactly the grid's ends, not their rounding
        return fine.to(grid.device)

    @abstractmethod
    def search(
        self, fine: Tensor, teacher: Solver, batches: Iterable[tuple[Denoiser, Tensor]]
    ) -> Tensor:
        """The chosen σ_0 … σ_{N'} (points of `fine`), from the training states at σ_max."""

    def place(self, chosen: Tensor) -> None:
        """Write the chosen grid (σ = 0 appended where the grid ends there) into the base's grid."""
        self.grid.assign(chosen)

    @torch.no_grad()
    def prepare(self, batches: Iterable[tuple[Denoiser, Tensor]]) -> None:
        """Search the grid on the training states at σ_max, batch by batch; once: a searched
        solver keeps its grid."""
        if bool(self.searched):
            return
        fine = self.fine_grid()
        teacher = SOLVERS.get(self.teacher).build(fine, self.channels, **self.teacher_settings)
        chosen = self.search(fine, teacher, batches)
        if self.ends_at_zero:
            chosen = torch.cat([chosen, chosen.new_zeros(1)])
        self.place(chosen)
        self.searched.fill_(True)

    def steps(self, denoiser: Denoiser, x: Tensor) -> Iterator[Step]:
        """The base's own rollout, on the (searched) grid."""
        return self.base.steps(denoiser, x)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        return self.base.direction(i, x, history, denoiser)


def no_samples(name: str) -> SettingsError:
    return SettingsError(f"{name} needs training noise to search its grid; it was given none")


@SOLVERS.register("gits")
class GITS(GridSearch):
    """GITS: a base on a DP-searched grid; with AFS, NFE steps by DP + the AFS point by endpoint error.

    The DP runs over a fine grid from teacher warm-up paths (module docstring)."""

    citation = "Chen et al., ICML 2024 (GITS)"
    title = "GITS"
    reference = "zju-pi/diff-sampler gits-main/gits_utils.py get_dp_list, dp"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "ipndm",
        base_settings: dict[str, Any] | None = None,
        teacher: str = "ipndm",
        teacher_settings: dict[str, Any] | None = None,
        fine_steps: int = 60,
        fine_schedule: str = "edm",
        metric: str = "dev",
        coeff: float = 1.15,
    ) -> None:
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
        self.metric = METRICS.get(metric)
        self.coeff = check_coeff(coeff)

    def search(
        self, fine: Tensor, teacher: Solver, batches: Iterable[tuple[Denoiser, Tensor]]
    ) -> Tensor:
        """The DP's points on the mean cost over all samples; with AFS, the DP's N' − 1 steps and
        the AFS point between its first two."""
        total, warmed = torch.zeros(len(fine), len(fine), dtype=torch.float64), []
        for denoiser, x in batches:
            states, derivatives = warm_up(teacher.to(x.device), denoiser, x)
            total += len(x) * cost_matrix(fine, states, derivatives, self.metric)
            warmed.append((denoiser, x, states[-1]))
        samples = sum(len(x) for _, x, _ in warmed)
        if not samples:
            raise no_samples(self.name)
        cost, searched = total / samples, self.searched_steps
        if not (self.afs and searched > 1):
            return fine[dynamic_programming(cost, searched, self.coeff)]
        path = dynamic_programming(cost, searched - 1, self.coeff)
        path.insert(1, self.afs_point(fine, path, warmed))
        return fine[path]

    def afs_point(self, fine: Tensor, path: list[int], warmed: list[Warmed]) -> int:
        """k ∈ (0, m_1) whose grid τ_0, τ_k, τ_{m_1}, … brings the base nearest the teacher's
        endpoint: argmin mean ‖x̂_k − y_M‖₂ over all warm-up samples, the first on ties."""
        candidates = range(1, path[1])
        if not candidates:
            raise SettingsError(
                f"gits has no fine point between σ_0 and its first searched point σ = "
                f"{float(fine[path[1]]):.4g} for the AFS step; raise fine_steps"
            )
        errors = [self.endpoint_error(fine[[0, k, *path[1:]]], warmed) for k in candidates]
        return candidates[min(range(len(errors)), key=errors.__getitem__)]

    def endpoint_error(self, chosen: Tensor, warmed: list[Warmed]) -> float:
        """mean ‖x̂ − y_M‖₂: the base's rollout on `chosen` (σ_0 … σ_{N'}) against the teacher's
        endpoints, the base stepping on a fixed grid for the while."""
        holder = self.base
        while isinstance(holder, OnBase):
            holder = holder.base
        original, grid = holder.grid, chosen
        if self.ends_at_zero:
            grid = torch.cat([chosen, chosen.new_zeros(1)])
        holder.grid = FixedGrid(grid).to(chosen.device)
        try:
            total = 0.0
            for denoiser, x, end in warmed:
                landed = self.base.trajectory(denoiser, x)[len(chosen) - 2].flatten(1)
                work = torch.promote_types(landed.dtype, torch.float32)
                total += float((landed.to(work) - end.to(work)).norm(dim=-1).sum())
        finally:
            holder.grid = original
        return total / sum(len(x) for _, x, _ in warmed)
