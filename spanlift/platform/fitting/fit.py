"""Endpoint teacher matching: fit a learned solver through its full N-step rollout.

`fit(solver, backbone, teacher, settings)` takes a solver, the frozen backbone and the teacher's
noise and endpoints, and updates the solver's trainable parameters so that its rollout matches
the teacher (the loss the solver's supervision asks for: `objective`). It returns a `FitResult`:
the training and validation losses, the fit's seconds, the states it kept on its way, how many
iterations it ran and what ended it. It guarantees:

- the solver ends with the kept state, chosen on validation seeds it never trained on: the best
  state that beat the starting state by more than the noise of that comparison, else the
  starting state (`earns_its_place`, `judged`);
- `iterations` is the cap; with `patience` the fit stops sooner once it no longer gains
  (`patience_counted`);
- the same inputs give the same numbers (under `settings.seed`; on a GPU, with
  `settings.deterministic`), and a fit resumed from a state it reported continues exactly
  (`update_loop`).
"""

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.platform.fitting.losses import LOSSES
from spanlift.platform.fitting.memory import VALIDATION_BATCH, MemoryPlan, check_stateful_loss
from spanlift.platform.fitting.memory_plan import memory_plan
from spanlift.platform.fitting.optimization import Optimization
from spanlift.platform.fitting.resolution import resolves, warn_if_coarse
from spanlift.platform.fitting.sequential import (
    GAIN,
    NO_GAIN,
    UNDECIDED,
    early_decision,
    early_order,
)
from spanlift.platform.fitting.settings import Best, FitResult, FitState, Objective, Report
from spanlift.platform.fitting.settings import FitSettings as FitSettings
from spanlift.platform.sampling.model_statistics import model_statistics
from spanlift.platform.sampling.rollout import on_device, solver_device
from spanlift.platform.sampling.teacher import TeacherSet, supervision_sigmas
from spanlift.platform.sampling.validation_blocks import (
    SingleBlock,
    ValidationBlocks,
    as_blocks,
)
from spanlift.solvers import Solver
from spanlift.solvers.on_base import searched, searches, statistics_request, use_statistics

DEFAULT_SETTINGS = FitSettings()


def endpoint_loss(settings: "FitSettings", backbone: Backbone) -> Callable:
    """ℓ(endpoint, target) as the fit's target asks: against teacher endpoints in sample space,

        J(S) = E_noise ℓ(Φ_S(x_T), Φ*(x_T))      (the paper, eq. 4)

    or, with `target="observed"` (a conditional backbone with observations, e.g. nowcasting),
    decoded, against what was really observed in data space: J(S) = E ℓ(D(Φ_S(x_T)), y)."""
    make_loss, options = LOSSES.get(settings.loss), settings.loss_options
    if settings.target == "observed":
        loss_fn = make_loss(lambda data: data, **options)
        return lambda endpoint, target: loss_fn(backbone.decode(endpoint), target)
    return make_loss(backbone.decode, **options)


def objective(
    solver: Solver,
    settings: "FitSettings",
    backbone: Backbone,
    plan: MemoryPlan | None = None,
    raw_loss: Callable | None = None,
) -> Objective:
    """The loss of one batch, for the supervision the solver declares: the endpoint's
    (`endpoint_loss`), or for trajectory supervision (AMED, EPD) a match at each grid point:

        J(S) = E [ 1/(N−1) Σ_{i<N} mean (x_i − x_i*)²  +  ℓ(x_N, x_N*) ]   over σ_1 … σ_N

    A solver that declares an input slack r (LD3) may move each training noise within a ball:
    x_T' = x_T + δ with ‖δ‖ ≤ r ‖x_T‖, δ learned per training seed (LD3's soft teacher loss;
    `optimization.py` keeps δ in it). Its backbone calls and loss networks run as the memory plan
    says (default: as `settings` ask); `raw_loss`: the endpoint loss, when already built."""
    plan = plan or MemoryPlan.of(
        settings.checkpoint, settings.precision, settings.micro_batch, settings.batch_size
    )
    device = solver_device(solver)
    raw_loss = raw_loss or endpoint_loss(settings, backbone)
    check_stateful_loss(raw_loss, settings.loss, plan, settings.batch_size)
    loss_fn = plan.loss(raw_loss, device)
    trajectory = solver.supervision == "trajectory"
    if trajectory and settings.target == "observed":
        raise SettingsError(
            f"solver {solver.spec.label()} is supervised by the teacher's trajectory; "
            "fit target 'observed' has none"
        )
    sigmas = supervision_sigmas(solver)

    def loss(
        model: torch.nn.Module,
        batch: TeacherSet,
        slack: torch.Tensor | None,
        groups: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        noise = batch.noise.to(device) + (0 if slack is None else slack)
        x = backbone.prior(noise)
        denoiser = plan.denoiser(conditioned(backbone, on_device(batch.cond, device)), device)
        if not trajectory:
            endpoint, target = model(denoiser, x), batch.target(settings.target).to(device)

            def of(rows: Any) -> torch.Tensor:
                return loss_fn(endpoint[rows], target[rows])
        else:
            states, targets = (
                model(denoiser, x, trajectory=True),
                batch.states_at(sigmas).to(device),
            )

            def of(rows: Any) -> torch.Tensor:
                s, t = states[rows], targets[rows]
                path = (s[:, :-1] - t[:, :-1]).square().mean() if len(sigmas) > 1 else 0
                return path + loss_fn(s[:, -1], t[:, -1])

        return of(slice(None)) if groups is None else torch.stack([of(g) for g in groups])

    return loss


def split_validation(teacher: TeacherSet, fraction: float) -> tuple[TeacherSet, TeacherSet | None]:
    """(train, validation): the last round(fraction · N) seeds held out (at least one, and at
    least one left to train on); (teacher, None) for fraction 0."""
    held = min(max(1, round(fraction * len(teacher))), len(teacher) - 1) if fraction else 0
    if held < 1:
        return teacher, None
    cut = len(teacher) - held
    return teacher.subset(slice(0, cut)), teacher.subset(slice(cut, None))


VALIDATION_GROUPS = 32
"""Groups of validation seeds whose losses pair a later state with the starting state."""
NOISE_MULTIPLE = 1.0
"""How many paired standard errors a later state must beat the starting state by (the choice of 1
against 0 and 2 is measured in docs/results.md, "Which state a fit keeps")."""


@torch.no_grad()
def validation_losses(
    solver: Solver, loss: Objective, validation: TeacherSet, batch: int = VALIDATION_BATCH
) -> Tensor:
    """The loss of each of min(VALIDATION_GROUPS, N) groups of consecutive validation seeds (sizes
    differing by at most one), rolled out as many whole groups at a time as `batch` seeds hold
    (at least one; no slack, no DDP)."""
    groups = torch.arange(len(validation)).tensor_split(min(VALIDATION_GROUPS, len(validation)))
    per_batch = max(1, batch // len(groups[0]))
    losses = []
    for start in range(0, len(groups), per_batch):
        chunk = groups[start : start + per_batch]
        rows = torch.cat(list(chunk))
        local = [g - rows[0] for g in chunk]
        losses.append(loss(solver, validation.subset(slice(rows[0], rows[-1] + 1)), None, local))
    return torch.cat(losses).detach().cpu()


def mean_loss(groups: Tensor, validation: TeacherSet) -> float:
    """The mean loss over the validation seeds, from the groups' losses (weighted by size)."""
    sizes = torch.arange(len(validation)).tensor_split(len(groups))
    weights = torch.tensor([len(s) for s in sizes], dtype=groups.dtype)
    return float((groups * weights).sum() / weights.sum())


def validation_loss(
    solver: Solver, loss: Objective, validation: TeacherSet, batch: int = VALIDATION_BATCH
) -> float:
    """The mean loss over the whole validation set."""
    return mean_loss(validation_losses(solver, loss, validation, batch), validation)


def earns_its_place(start: Tensor, later: Tensor) -> bool:
    """Whether a later state earns its place: it beats the starting state by more than the noise
    of that comparison over the same G groups of validation seeds,

        mean_g (L_0,g − L_t,g) > NOISE_MULTIPLE · sd_g(L_0,g − L_t,g) / √G

    (with one group, any gain). Among the states that do, the fit keeps the one of lowest
    validation loss; when none does, its starting state (so a solver that starts as its base,
    like SpanLift, never ends significantly worse than its base on seeds it never saw)."""
    gain = start - later
    if len(gain) < 2:
        return bool(gain.sum() > 0)
    noise = NOISE_MULTIPLE * gain.std() / math.sqrt(len(gain))
    return bool(gain.mean() > noise)


MAX_KEPT = 32
"""States a fit keeps on its way at most. A kept state changes only when a validation beats every
earlier one beyond its noise, so a fit rarely keeps more (300 iterations validated every 25: at
most 13); past it, the state between the two closest in time is dropped (never the first or the
newest), so those kept stay spread over the fit. A solver's state is small (SpanLift's operator:
tens of thousands of parameters), so 32 copies stay a few MB."""


def keep_state(
    result: FitResult, iteration: int, seconds: float, loss: float, state: dict[str, Tensor]
) -> None:
    """Add a kept state to `result.kept` with its iteration, fit seconds and validation loss (its
    weights on the CPU; the starting state first, at 0 s), so the states a fit would have ended
    with had it stopped earlier can be scored (`spanlift leaderboard --at-cost`). Past
    `MAX_KEPT`, drop the state i (0 < i < last) whose neighbours lie closest in time (smallest
    seconds[i+1] − seconds[i−1])."""
    on_cpu = {name: value.cpu() for name, value in state.items()}  # no copy when on the CPU
    result.kept.append(
        {"iteration": iteration, "seconds": seconds, "val_loss": loss, "state": on_cpu}
    )
    if len(result.kept) > MAX_KEPT:
        times = [k["seconds"] for k in result.kept]
        drop = min(range(1, len(times) - 1), key=lambda i: times[i + 1] - times[i - 1])
        del result.kept[drop]


def validation_resolves(best: Best) -> float | None:
    """The smallest relative gain over the starting state the kept-state rule resolves on the
    validation seeds the fit used (`resolution.resolves` of the starting state's group losses
    on every block it was measured on); None without validation seeds."""
    if best.start is None:
        return None
    return resolves(torch.cat(best.start), NOISE_MULTIPLE)


def seeds_used(best: Best, blocks: "ValidationBlocks | SingleBlock | None") -> int | None:
    """The validation seeds of the blocks the fit used (those the starting state was measured
    on); None without validation seeds."""
    if blocks is None or best.start is None:
        return None
    return sum(blocks.size(j) for j in range(len(best.start)))


def resolution_at_cap(
    best: Best, blocks: "ValidationBlocks | SingleBlock"
) -> tuple[float | None, int]:
    """What all the validation seeds would resolve, scaled from the first block's resolution
    as 1/√n (`resolution.py`), and their number: the fit warns when that is coarser than
    `resolution.WANTED_GAIN` (`warn_if_coarse`)."""
    first, seeds = validation_resolves(best), blocks.size(0)
    total = sum(blocks.size(j) for j in range(blocks.count))
    return (None if first is None else first * math.sqrt(seeds / total)), total


def state_copy(solver: Solver) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in solver.state_dict().items()}


def distributed(solver: Solver) -> torch.nn.Module:
    """DDP around the solver when torch.distributed is initialised (gradients averaged over ranks)."""
    if not torch.distributed.is_initialized() or not trainable(solver):
        return solver
    device_ids = [solver_device(solver)] if solver_device(solver).type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(
        solver, device_ids=device_ids, find_unused_parameters=True
    )


@contextmanager
def deterministic_algorithms(on: bool) -> Iterator[None]:
    """PyTorch's deterministic algorithms while the block runs, when `on` (with the cuBLAS
    workspace setting they need on a GPU, unless the user set one); the previous mode after."""
    if not on:
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def fit(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    settings: FitSettings = DEFAULT_SETTINGS,
    report: Report | None = None,
    progress: bool = True,
    resume: FitState | None = None,
    validation: TeacherSet | ValidationBlocks | None = None,
) -> FitResult:
    """Train the solver's trainable parameters to match the teacher (`objective`); the solver
    ends with the kept state: the best validation state that earned its place, else its starting
    state. `validation`: the seeds that choose it (a sweep's and `spanlift fit`'s validation
    seeds, `spanlift.seeds`; default: the last `settings.validation` of the teacher set, held out
    from training, `split_validation`; `ValidationBlocks`: seeds added while the comparison is
    undecided, `judged`). `report` gets the metrics every `log_every` iterations and the fit's
    full state every `checkpoint_every`; given such a state as `resume`, the fit continues
    exactly from it. A plain function: a Ray Train worker calls it unchanged, and it wraps the
    solver in DDP when torch.distributed is initialised (each rank draws its own batches)."""
    with deterministic_algorithms(settings.deterministic):
        return fit_steps(solver, backbone, teacher, settings, report, progress, resume, validation)


def fit_steps(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    settings: FitSettings,
    report: Report | None,
    progress: bool,
    resume: FitState | None,
    validation: TeacherSet | ValidationBlocks | None,
) -> FitResult:
    """`fit`'s loop. The fit's clock starts before the solver's own search (`prepare`: GITS's and
    OSS's grids, DPM-Solver-v3's statistics), which is part of its cost. What backward keeps, the
    networks' precision and the backward passes an update takes follow the fit's memory plan
    (`memory.py`; `checkpoint: auto` measures and chooses, `memory_plan.py`); the updates are
    `optimization.py`'s (AdamW, warm-up and cosine decay, gradient-norm clipping)."""
    params = trainable(solver)
    torch.manual_seed(settings.seed)
    if validation is None:
        train, validation = split_validation(teacher, settings.validation)
    else:
        train = teacher
    blocks = None if validation is None else as_blocks(validation)
    if settings.patience and validation is None:
        raise SettingsError(
            f"fit setting patience ({settings.patience}) needs validation seeds; this fit has none"
        )
    raw_loss = endpoint_loss(settings, backbone)
    plan = memory_plan(solver, backbone, train, settings, raw_loss)
    started = time.perf_counter()  # the fit's clock: its search (`prepare`) counts
    with plan.blocks_of(backbone.blocks):
        if not resume:
            prepare(solver, backbone, train, plan.rollout_batch)
        loss = objective(solver, settings, backbone, plan, raw_loss)  # after `prepare`: the grid
        steps = Optimization.set_up(solver, params, train, settings, plan)
        result = FitResult(memory=plan.params())
        if resume:
            best = steps.restore(solver, resume, result)
        else:
            best = starting_best(solver, loss, blocks, settings, result, plan.rollout_batch)
            result.seconds = time.perf_counter() - started  # where `update_loop`'s clock goes on
            if blocks is not None:
                warn_if_coarse(*resolution_at_cap(best, blocks))
        run = FitRun(solver, steps, loss, train, blocks, settings, report, progress)
        update_loop(run, best, result)
    if not all(torch.isfinite(p).all() for p in params):
        raise TrainingDivergedError(
            f"fit of {solver.spec.label()} left non-finite parameters; lower lr"
        )
    return result


@dataclass(frozen=True)
class FitRun:
    """What a fit's updates work with and never change: the solver, how it is updated, its loss,
    the training set, the validation seeds (None: nothing held out, the last state is kept), the
    settings, and where and how it reports."""

    solver: Solver
    steps: Optimization
    loss: Objective
    train: TeacherSet
    blocks: "ValidationBlocks | SingleBlock | None"
    settings: FitSettings
    report: Report | None = None
    progress: bool = True


def update_loop(run: FitRun, best: Best, result: FitResult) -> None:
    """The updates from the first not yet made (a resumed fit's next) to the last, validating
    every `validate_every` iterations and at the last (`validated`), keeping the best state,
    stopping by the `patience` rule, and reporting as the settings say; the solver ends with the
    kept state, `result` filled in."""
    solver, steps, settings = run.solver, run.steps, run.settings
    model = distributed(solver)
    start = time.perf_counter() - result.seconds
    first = len(result.losses)
    if not steps.params:  # a search alone (GITS): one pass scores and reports the searched state
        first = max(first, settings.iterations - 1)
    end = first if result.stopped_by else settings.iterations  # resumed from its last state
    result.iterations_run = first
    bar = tqdm(
        range(first, end),
        initial=first,
        total=settings.iterations,
        desc=f"fit {solver.spec.label()}",
        disable=not run.progress,
    )
    for iteration in bar:
        value = steps.measured_step(solver, model, run.loss, run.train, iteration, settings, result)
        result.losses.append(value)
        done = result.iterations_run = iteration + 1
        last = done == settings.iterations
        metrics = {"iteration": done, "loss": value, "lr": steps.schedule.get_last_lr()[0]}
        if run.blocks is not None and (done % settings.validate_every == 0 or last):
            best, metrics["val_loss"] = validated(run, done, start, best, result)
            if settings.patience and best.stale >= settings.patience and not last:
                last, result.stopped_by = True, "rule"
        elif run.blocks is None and last:  # nothing held out: the last state is the one kept
            keep_state(result, done, time.perf_counter() - start, math.nan, state_copy(solver))
        if last:
            result.stopped_by = result.stopped_by or "cap"
        if last and best.state is not None:
            solver.load_state_dict(best.state)  # the kept state is what the last report saves
        bar.set_postfix(loss=f"{value:.3g}")
        checkpoint = done % settings.checkpoint_every == 0 or last
        if run.report and (iteration % settings.log_every == 0 or checkpoint):
            seconds = time.perf_counter() - start
            state = steps.state(solver, done, result, best, seconds) if checkpoint else None
            run.report({**metrics, "best_iteration": best.iteration}, state)
        if last:
            break
    result.seconds = time.perf_counter() - start
    result.best_iteration = best.iteration
    result.stopped_by = result.stopped_by or "cap"
    result.validation_resolves = validation_resolves(best)
    result.validation_seeds = seeds_used(best, run.blocks)


def validated(
    run: FitRun, done: int, start: float, best: Best, result: FitResult
) -> tuple[Best, float]:
    """The held-out loss after `done` updates, on the first block of validation seeds (recorded
    in `result` with its fit seconds since `start`), the state kept when it earns its place
    (`judged`; also kept in `result.kept`, `keep_state`), and the stopping rule's count. For a
    fit with validation seeds (`run.blocks`)."""
    blocks = run.blocks
    later, kept, best = judged(run.solver, run.loss, blocks, best, run.steps.plan.rollout_batch)
    value = result.validation[done] = mean_loss(later[0], blocks.block(0))
    seconds = result.validation_seconds[done] = time.perf_counter() - start
    if kept:
        state = state_copy(run.solver)
        best = replace(best, iteration=done, loss=value, state=state, kept_groups=later)
        keep_state(result, done, seconds, value, state)
    return patience_counted(best, later), value


def judged(
    solver: Solver,
    loss: Objective,
    blocks: "ValidationBlocks | SingleBlock",
    best: Best,
    batch: int,
) -> tuple[list[Tensor], bool, Best]:
    """The solver's group losses on each block its choice needed, whether its state is kept,
    and `best` with the starting and kept states' losses on the blocks added. Validation seeds
    given as `ValidationBlocks` are used block by block: a state is measured on the first block
    (256 seeds), which the validation curve reports, and the sequential test of `sequential.py`
    decides whether it gains over the starting state and is better than the kept one, adding
    blocks (the starting and the kept state measured on each, `covering`) while it is undecided
    and applying the fixed rule (lowest loss, `earns_its_place` over the start) at the last
    (`verdict`); a validation set given whole is one block, decided by the fixed rule."""
    later: list[Tensor] = []
    while True:
        best = covering(solver, loss, blocks, best, len(later), batch)
        later.append(validation_losses(solver, loss, blocks.block(len(later)), batch))
        decided = verdict(best, later, blocks)
        if decided != UNDECIDED:
            return later, decided == GAIN, best


def verdict(best: Best, later: list[Tensor], blocks: "ValidationBlocks | SingleBlock") -> str:
    """GAIN (keep the later state), NO_GAIN or UNDECIDED on the first len(later) blocks: it must
    gain over the starting state (`compared`) and, when another state is kept, be better than
    it (`ordered`)."""
    used = len(later)
    start_kept = best.kept_groups is None
    if start_kept and used == blocks.count and not lower(later, best.start[:used], blocks):
        return NO_GAIN  # the fixed rule: lower than the kept state, here the starting one
    over_start = compared(best.start[:used], later, blocks.count)
    if best.kept_groups is None or over_start == NO_GAIN:
        return over_start
    over_kept = ordered(best.kept_groups[:used], later, blocks)
    if over_kept != GAIN:
        return over_kept
    return over_start


def compared(start: list[Tensor], later: list[Tensor], looks: int) -> str:
    """GAIN, NO_GAIN or UNDECIDED for a later state against the starting state on the first
    len(later) blocks: the sequential test's early look, or at the last the fixed-sample rule
    (`earns_its_place`)."""
    joined_start, joined_later = torch.cat(start), torch.cat(later)
    if len(later) < looks:
        return early_decision(joined_start, joined_later, looks)
    return GAIN if earns_its_place(joined_start, joined_later) else NO_GAIN


def ordered(
    kept: list[Tensor], later: list[Tensor], blocks: "ValidationBlocks | SingleBlock"
) -> str:
    """GAIN when the later state is better than the kept one on the first len(later) blocks,
    NO_GAIN when not, UNDECIDED while the sequential test cannot tell; at the last look, the
    lower mean loss."""
    if len(later) < blocks.count:
        return early_order(torch.cat(kept), torch.cat(later), blocks.count)
    return GAIN if lower(later, kept, blocks) else NO_GAIN


def lower(
    later: list[Tensor], other: list[Tensor], blocks: "ValidationBlocks | SingleBlock"
) -> bool:
    """Whether the later state's mean loss is below the other's on the same blocks."""
    return blocks_mean(later, blocks) < blocks_mean(other, blocks)


def blocks_mean(groups: list[Tensor], blocks: "ValidationBlocks | SingleBlock") -> float:
    """The mean loss over the seeds of the first len(groups) blocks, from their group losses."""
    sizes = [blocks.size(j) for j in range(len(groups))]
    means = [mean_loss(g, blocks.block(j)) for j, g in enumerate(groups)]
    if len(means) == 1:
        return means[0]
    return sum(m * n for m, n in zip(means, sizes, strict=True)) / sum(sizes)


def covering(
    solver: Solver,
    loss: Objective,
    blocks: "ValidationBlocks | SingleBlock",
    best: Best,
    index: int,
    batch: int,
) -> Best:
    """`best` with the starting and the kept state's group losses on blocks 0 … `index`, those
    missing computed from their weights (the block generated when it is new)."""
    start = list(best.start)
    while len(start) <= index:
        start.append(losses_with(solver, best.start_state, loss, blocks.block(len(start)), batch))
    kept = None if best.kept_groups is None else list(best.kept_groups)
    while kept is not None and len(kept) <= index:
        kept.append(losses_with(solver, best.state, loss, blocks.block(len(kept)), batch))
    return replace(best, start=start, kept_groups=kept)


def losses_with(
    solver: Solver, state: dict[str, Tensor], loss: Objective, block: TeacherSet, batch: int
) -> Tensor:
    """`validation_losses` of the solver with the weights `state`; its own weights after."""
    own = state_copy(solver)
    solver.load_state_dict(state)
    try:
        return validation_losses(solver, loss, block, batch)
    finally:
        solver.load_state_dict(own)


def patience_counted(best: Best, groups: list[Tensor]) -> Best:
    """`best` with the stopping rule's count after a validation of these group losses: reset
    when they beat the last state that gained (at first the starting state) by more than the
    noise (`earns_its_place`, on the blocks both were measured on), else one more validation
    without a gain. With `patience` p > 0 the fit stops once p validations in a row have not
    gained (`update_loop`); `iterations` stays the cap."""
    gained = best.last_gain
    used = min(len(gained), len(groups))
    if earns_its_place(torch.cat(gained[:used]), torch.cat(groups[:used])):
        return replace(best, gained=groups, stale=0)
    return replace(best, gained=gained, stale=best.stale + 1)


def trainable(solver: Solver) -> list[torch.nn.Parameter]:
    """The parameters a fit updates; a solver without any is refused, unless it searches."""
    params = [p for p in solver.parameters() if p.requires_grad]
    if not params and not searches(solver):
        raise SettingsError(f"solver {solver.spec.label()} has no trainable parameters to fit")
    return params


@torch.no_grad()
def prepare(
    solver: Solver, backbone: Backbone, train: TeacherSet, batch: int = VALIDATION_BATCH
) -> None:
    """The solver's own search on the training noise, in the backbone's sampling batches (at
    most `batch`), once before the first update (GITS's grid; nothing for most solvers)."""
    request = statistics_request(solver)
    if request is not None:  # DPM-Solver-v3's EMS, from the teacher's endpoints, cached
        use_statistics(solver, model_statistics(backbone, train, request))
    search = searched(solver)  # the solver's, or its base's (a GITS under SpanLift)
    if search is None:
        return
    device, size = solver_device(solver), min(backbone.sampling_batch(), batch)
    parts = (train.subset(slice(start, start + size)) for start in range(0, len(train), size))
    search.prepare(
        (conditioned(backbone, on_device(p.cond, device)), backbone.prior(p.noise.to(device)))
        for p in parts
    )


def starting_best(
    solver: Solver,
    loss: Objective,
    blocks: "ValidationBlocks | SingleBlock | None",
    settings: FitSettings,
    result: FitResult,
    batch: int = VALIDATION_BATCH,
) -> Best:
    """The best state before the first update: the starting state scored on the first block of
    validation seeds (`batch` seeds at a time; the fit records what they resolve,
    `validation_resolves`), or, with nothing held out, a placeholder for the last state."""
    if blocks is None:
        keep_state(result, 0, 0.0, math.nan, state_copy(solver))
        return Best(iteration=settings.iterations, loss=math.inf)
    start = validation_losses(solver, loss, blocks.block(0), batch)
    result.validation[0] = mean_loss(start, blocks.block(0))
    result.validation_seconds[0] = 0.0  # before the fit's clock starts
    state = state_copy(solver)
    keep_state(result, 0, 0.0, result.validation[0], state)
    return Best(
        iteration=0, loss=result.validation[0], state=state, start=[start], start_state=state
    )
