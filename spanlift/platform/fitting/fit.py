"""Endpoint teacher matching: fit a learned solver through its full N-step rollout.

    J(S) = E_noise ℓ(Φ_S(x_T), Φ*(x_T))      (the paper, eq. 4)

or, with `target="observed"` (a conditional backbone with observations, e.g. nowcasting),
J(S) = E ℓ(D(Φ_S(x_T)), y): the decoded endpoint against what was really observed. A solver that
declares trajectory supervision (AMED, EPD) is matched at each of its grid points σ_1 … σ_N:

    J(S) = E [ 1/(N−1) Σ_{i<N} mean (x_i − x_i*)²  +  ℓ(x_N, x_N*) ]

and one that declares an input slack r (LD3) may move each training noise within a ball:
x_T' = x_T + δ with ‖δ‖ ≤ r ‖x_T‖, δ learned per training seed (LD3's soft teacher loss).

The kept state is chosen on validation seeds: the validation teacher set a caller passes (a sweep's
and `spanlift fit`'s validation seeds, `spanlift.seeds`), else a fraction `validation` of the
teacher set held out (its last seeds). The loss on it is measured before the first iteration and
every `validate_every` iterations, in G = min(32, seeds) groups of seeds. A later state must earn
its place: it may replace the starting state only when it beats it by more than the noise of that
comparison,

    mean_g (L_0,g − L_t,g) > sd_g(L_0,g − L_t,g) / √G      (one paired standard error),

and among the states that do, the fit keeps the one of lowest validation loss; when none does, it
keeps its starting state (so a solver that starts as its base, like SpanLift, never ends
significantly worse than its base on seeds it never saw). AdamW (`weight_decay`, 0: Adam) with
linear warm-up and cosine decay, gradient-norm clipping, deterministic under a seed.
`fit` is a plain function: a Ray Train worker calls it unchanged. It wraps the solver in DDP when
torch.distributed is initialised (each rank draws its own batches), hands `report` its metrics
every `log_every` iterations and its full state every `checkpoint_every` iterations, and continues
exactly from such a state when given one as `resume`.
"""

import itertools
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.platform.fitting.losses import LOSSES, check_loss_options
from spanlift.platform.sampling.rollout import on_device
from spanlift.platform.sampling.teacher import TeacherSet, supervision_sigmas
from spanlift.solvers import Solver

FitState = dict[str, Any]
"""Everything a fit needs to continue exactly: next iteration, solver, optimizer, lr schedule and
batch-sampler state, losses so far. Plain tensors and numbers, so it loads with weights_only."""

Report = Callable[[dict[str, float], FitState | None], None]
"""Called with metrics every `log_every` iterations; with the state too at checkpoint iterations."""


TARGETS = ("teacher", "observed")
"""What a fit matches: the teacher's endpoints, or the backbone's observations."""


@dataclass(frozen=True)
class FitSettings:
    iterations: int = 300
    """Optimizer steps of the fit."""
    batch_size: int = 32
    """Teacher samples per step."""
    lr: float = 5e-3
    """Peak learning rate (after the warm-up, before the cosine decay)."""
    warmup: int = 20
    """Steps of linear learning-rate warm-up."""
    grad_clip: float = 1.0
    """Largest gradient norm; larger gradients are scaled down to it."""
    loss: str = "mse"
    """The endpoint loss ℓ; `loss_options` are its keyword arguments."""
    target: str = "teacher"
    """What the endpoint is matched to: "teacher" endpoints or, decoded, the backbone's
    "observed" data."""
    seed: int = 0
    """Seeds the solver's initial weights and the batches drawn."""
    log_every: int = 25
    """Steps between metric reports."""
    checkpoint_every: int = 50
    """Steps between full-state reports a fit can resume from."""
    loss_options: dict[str, Any] = field(default_factory=dict, hash=False)
    """Keyword arguments of the loss, e.g. `{dinov2_path: /models/dinov2-base, c: 0.1}` for
    `latent`; {} for the losses that take none. (A dict is not hashable: left out of the hash.)"""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay; 0 is Adam."""
    validation: float = 0.1
    """Fraction of the teacher set held out to choose the kept state when no validation set is
    given (a sweep and `spanlift fit` give one: their validation seeds); 0: keep the last
    state."""
    validate_every: int = 25
    """Steps between validation losses."""
    deterministic: bool = False
    """PyTorch's deterministic algorithms during the fit (on a GPU, with the cuBLAS workspace
    they need); without it a GPU fit may differ in its last bits from run to run."""

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "log_every", "checkpoint_every", "validate_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SettingsError(
                    f"fit setting {name} must be a positive integer, got {getattr(self, name)!r}"
                )
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise SettingsError(f"fit setting lr must be a positive number, got {self.lr!r}")
        if not 0 <= self.weight_decay < math.inf:
            raise SettingsError(
                f"fit setting weight_decay must be a number ≥ 0, got {self.weight_decay!r}"
            )
        if not 0 <= self.validation < 1:
            raise SettingsError(
                f"fit setting validation must be a fraction in [0, 1), got {self.validation!r}"
            )
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SettingsError(
                f"fit setting warmup must be a non-negative integer, got {self.warmup!r}"
            )
        if not isinstance(self.deterministic, bool):
            raise SettingsError(
                f"fit setting deterministic must be true or false, got {self.deterministic!r}"
            )
        if not isinstance(self.loss_options, dict):
            raise SettingsError(
                f"fit setting loss_options must be a mapping of option names to values, "
                f"got {self.loss_options!r}"
            )
        check_loss_options(self.loss, self.loss_options)
        if self.target not in TARGETS:
            raise SettingsError(
                f"fit setting target must be one of {', '.join(TARGETS)}, got {self.target!r}"
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The names of the settings, as a sweep file's `fit:` section may give them."""
        return tuple(f.name for f in fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data, the identity of a fit (fit and run keys, sweep state).
        `loss_options` only when there are some, so a fit without them keeps the keys of the
        checkpoints and runs already stored."""
        data = asdict(self)
        if not self.loss_options:
            del data["loss_options"]
        if not self.deterministic:
            del data["deterministic"]
        return data

    def updated(self, changes: dict[str, Any]) -> "FitSettings":
        """These settings with `changes` on top. Loss options belong to their loss: changing the
        loss without giving its options starts from none."""
        if changes.get("loss", self.loss) != self.loss and "loss_options" not in changes:
            changes = {**changes, "loss_options": {}}
        return replace(self, **changes)


@dataclass
class FitResult:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    validation: dict[int, float] = field(default_factory=dict)
    """Validation loss by iteration (0: before the first update)."""
    best_iteration: int = 0
    """The iteration whose state the fit kept (the last one when nothing is held out)."""


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """lr multiplier: linear from 0 to 1 over `warmup` iterations, then cosine down to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def endpoint_loss(settings: "FitSettings", backbone: Backbone) -> Callable:
    """ℓ(endpoint, target) as the fit's target asks: against teacher endpoints in sample space,
    or, decoded, against observations in data space."""
    make_loss, options = LOSSES.get(settings.loss), settings.loss_options
    if settings.target == "observed":
        loss_fn = make_loss(lambda data: data, **options)
        return lambda endpoint, target: loss_fn(backbone.decode(endpoint), target)
    return make_loss(backbone.decode, **options)


Objective = Callable[..., torch.Tensor]
"""(model, batch of the teacher set, input slack δ or None[, groups]) → the scalar loss of the
batch, or with `groups` (index tensors into the batch) the loss of each group, from one rollout."""


def objective(solver: Solver, settings: "FitSettings", backbone: Backbone) -> Objective:
    """The loss of one batch, for the supervision the solver declares (module docstring)."""
    loss_fn = endpoint_loss(settings, backbone)
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
        device = solver_device(solver)
        noise = batch.noise.to(device) + (0 if slack is None else slack)
        x = backbone.prior(noise)
        denoiser = conditioned(backbone, on_device(batch.cond, device))
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
"""How many paired standard errors a later state must beat the starting state by. Measured on
the mixture (`benchmarks/kept_state.py`: SpanLift on DyWeight, NFE 5, 1 000 iterations, fit seeds
0, 1, 2, 256 validation seeds), SpanLift's test RMSE over its base's: 0 and 1 give 1.000, 0.956,
1.006, 2 gives 1.000 three times (it throws the 4.4 % gain away); with nothing to learn
(tests/test_kept_state.py), 0 keeps states 0.6–0.9 % worse on test seeds, 1 and 2 the starting
state (docs/results.md)."""


VALIDATION_BATCH = 256
"""Validation seeds rolled out at once (whole groups; no gradients, so larger than a batch)."""


@torch.no_grad()
def validation_losses(solver: Solver, loss: Objective, validation: TeacherSet) -> Tensor:
    """The loss of each of min(VALIDATION_GROUPS, N) groups of consecutive validation seeds (sizes
    differing by at most one), rolled out a few whole groups at a time (no slack, no DDP)."""
    groups = torch.arange(len(validation)).tensor_split(min(VALIDATION_GROUPS, len(validation)))
    per_batch = max(1, VALIDATION_BATCH // len(groups[0]))
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


def validation_loss(solver: Solver, loss: Objective, validation: TeacherSet) -> float:
    """The mean loss over the whole validation set."""
    return mean_loss(validation_losses(solver, loss, validation), validation)


def earns_its_place(start: Tensor, later: Tensor) -> bool:
    """Whether a later state beats the starting state by more than the noise of the comparison:
    mean_g(L_0,g − L_t,g) > NOISE_MULTIPLE · sd_g / √G over the same G groups (with one group,
    any gain)."""
    gain = start - later
    if len(gain) < 2:
        return bool(gain.sum() > 0)
    noise = NOISE_MULTIPLE * gain.std() / math.sqrt(len(gain))
    return bool(gain.mean() > noise)


def state_copy(solver: Solver) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in solver.state_dict().items()}


def slack_limits(noise: torch.Tensor, radius: float) -> torch.Tensor:
    """r‖x_T‖ per training seed: the radius of each seed's LD3 ball."""
    return radius * noise.flatten(1).norm(dim=1)


def project_slack(slack: torch.Tensor, limits: torch.Tensor) -> None:
    """δ ← δ · min(1, r‖x_T‖ / ‖δ‖) per seed: back into LD3's ball."""
    norms = slack.flatten(1).norm(dim=1).clamp_min(1e-12)
    slack.mul_((limits / norms).clamp(max=1).view(-1, *[1] * (slack.dim() - 1)))


def distributed(solver: Solver) -> torch.nn.Module:
    """DDP around the solver when torch.distributed is initialised (gradients averaged over ranks)."""
    if not torch.distributed.is_initialized() or not trainable(solver):
        return solver
    device_ids = [solver_device(solver)] if solver_device(solver).type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(
        solver, device_ids=device_ids, find_unused_parameters=True
    )


def solver_device(solver: Solver) -> torch.device:
    return next(itertools.chain(solver.parameters(), solver.buffers())).device


def rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


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
    settings: FitSettings = FitSettings(),
    report: Report | None = None,
    progress: bool = True,
    resume: FitState | None = None,
    validation: TeacherSet | None = None,
) -> FitResult:
    """Train the solver's trainable parameters to match the teacher (module docstring); the
    solver ends with the kept state: the best validation state that earned its place, else its
    starting state. `validation`: the seeds that choose it (default: the last `settings.validation`
    of the teacher set, held out from training)."""
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
    validation: TeacherSet | None,
) -> FitResult:
    """`fit`'s loop."""
    params = trainable(solver)
    torch.manual_seed(settings.seed)
    if validation is None:
        train, validation = split_validation(teacher, settings.validation)
    else:
        train = teacher
    if not resume:
        prepare(solver, backbone, train)
    loss = objective(solver, settings, backbone)  # after `prepare`: it reads the solver's grid
    steps = Optimization.set_up(solver, params, train, settings)
    result = FitResult()
    if resume:
        best = steps.restore(solver, resume, result)
    else:
        best = starting_best(solver, loss, validation, settings, result)
    model = distributed(solver)
    start = time.perf_counter() - result.seconds
    first = resume["iteration"] if resume else 0
    if not params:  # a search alone (GITS): one pass scores and reports the searched state
        first = max(first, settings.iterations - 1)
    bar = tqdm(
        range(first, settings.iterations),
        initial=first,
        total=settings.iterations,
        desc=f"fit {solver.spec.label()}",
        disable=not progress,
    )
    for iteration in bar:
        value = steps.step(solver, model, loss, train, iteration, settings)
        result.losses.append(value)
        done = iteration + 1
        last = done == settings.iterations
        metrics = {"iteration": done, "loss": value, "lr": steps.schedule.get_last_lr()[0]}
        if validation is not None and (done % settings.validate_every == 0 or last):
            groups = validation_losses(solver, loss, validation)
            metrics["val_loss"] = result.validation[done] = mean_loss(groups, validation)
            if metrics["val_loss"] < best["loss"] and earns_its_place(best["start"], groups):
                best = {**best, "iteration": done, "loss": metrics["val_loss"]}
                best["state"] = state_copy(solver)
        if last and best["state"] is not None:
            solver.load_state_dict(best["state"])  # the kept state is what the last report saves
        bar.set_postfix(loss=f"{value:.3g}")
        checkpoint = done % settings.checkpoint_every == 0 or last
        if report and (iteration % settings.log_every == 0 or checkpoint):
            seconds = time.perf_counter() - start
            state = steps.state(solver, done, result, best, seconds) if checkpoint else None
            report({**metrics, "best_iteration": best["iteration"]}, state)
    if not all(torch.isfinite(p).all() for p in params):
        raise TrainingDivergedError(
            f"fit of {solver.spec.label()} left non-finite parameters; lower lr"
        )
    result.seconds = time.perf_counter() - start
    result.best_iteration = best["iteration"]
    return result


def trainable(solver: Solver) -> list[torch.nn.Parameter]:
    """The parameters a fit updates; a solver without any is refused, unless it searches."""
    params = [p for p in solver.parameters() if p.requires_grad]
    if not params and not solver.searches:
        raise SettingsError(f"solver {solver.spec.label()} has no trainable parameters to fit")
    return params


@torch.no_grad()
def prepare(solver: Solver, backbone: Backbone, train: TeacherSet) -> None:
    """The solver's own search on the training noise, in the backbone's sampling batches, once
    before the first update (GITS's grid; nothing for most solvers)."""
    device, size = solver_device(solver), backbone.sampling_batch()
    parts = (train.subset(slice(start, start + size)) for start in range(0, len(train), size))
    solver.prepare(
        (conditioned(backbone, on_device(p.cond, device)), backbone.prior(p.noise.to(device)))
        for p in parts
    )


Best = dict[str, Any]
"""The kept state so far: its iteration, its validation loss and the solver's weights (None
while the starting state is kept without a copy), and the starting state's group losses
(`start`) every later state is compared with."""


def starting_best(
    solver: Solver,
    loss: Objective,
    validation: TeacherSet | None,
    settings: FitSettings,
    result: FitResult,
) -> Best:
    """The best state before the first update: the starting state scored on the validation set,
    or, with nothing held out, a placeholder for the last state."""
    if validation is None:
        return {"iteration": settings.iterations, "loss": math.inf, "state": None, "start": None}
    start = validation_losses(solver, loss, validation)
    result.validation[0] = mean_loss(start, validation)
    return {
        "iteration": 0,
        "loss": result.validation[0],
        "state": state_copy(solver),
        "start": start,
    }


@dataclass
class Optimization:
    """What a fit steps and what a checkpoint saves of it: AdamW over the solver's parameters
    (and LD3's input slack δ, without weight decay), the warm-up–cosine lr schedule, and the
    generator that draws the batches (seeded per DDP rank)."""

    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    batches: torch.Generator
    slack: torch.Tensor | None = None
    limits: torch.Tensor | None = None

    @classmethod
    def set_up(
        cls,
        solver: Solver,
        params: list[torch.nn.Parameter],
        train: TeacherSet,
        settings: FitSettings,
    ) -> "Optimization":
        batches = torch.Generator().manual_seed(settings.seed + 1000 * rank())
        slack = limits = None
        groups: list[dict[str, Any]] = [{"params": params}]
        if solver.input_slack > 0:
            device = solver_device(solver)
            slack = torch.zeros_like(train.noise, device=device, requires_grad=True)
            limits = slack_limits(train.noise, solver.input_slack).to(device)
            groups.append({"params": [slack], "weight_decay": 0.0})
        optimizer = torch.optim.AdamW(groups, lr=settings.lr, weight_decay=settings.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, warmup_cosine(settings.warmup, settings.iterations)
        )
        return cls(params, optimizer, schedule, batches, slack, limits)

    def step(
        self,
        solver: Solver,
        model: torch.nn.Module,
        loss: Objective,
        train: TeacherSet,
        iteration: int,
        settings: FitSettings,
    ) -> float:
        """One update on a batch drawn from `train`; its loss (a non-finite one is refused)."""
        index = torch.randint(
            len(train), (min(settings.batch_size, len(train)),), generator=self.batches
        )
        slack = None if self.slack is None else self.slack[index.to(self.slack.device)]
        value = loss(model, train.subset(index), slack)
        if not torch.isfinite(value):
            raise TrainingDivergedError(
                f"fit of {solver.spec.label()} diverged: loss is {value.item()} at iteration "
                f"{iteration} (lr={settings.lr}); lower lr or grad_clip"
            )
        if not self.params:  # nothing to update (a solver fitted by its search alone)
            return value.item()
        self.optimizer.zero_grad(set_to_none=True)
        value.backward()
        for p in solver.inactive_parameters(iteration):  # alternating schemes (S4S-Alt)
            p.grad = None
        torch.nn.utils.clip_grad_norm_(self.params, settings.grad_clip)
        self.optimizer.step()
        self.schedule.step()
        if self.slack is not None:
            with torch.no_grad():
                project_slack(self.slack, self.limits)
        return value.item()

    def state(
        self, solver: Solver, done: int, result: FitResult, best: Best, seconds: float
    ) -> FitState:
        """Everything `restore` needs to continue after `done` iterations exactly."""
        return {
            "iteration": done,
            "solver": solver.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "batches": self.batches.get_state(),
            "losses": result.losses,
            "seconds": seconds,
            "validation": result.validation,
            "best": best,
            "slack": None if self.slack is None else self.slack.detach().cpu(),
        }

    def restore(self, solver: Solver, saved: FitState, result: FitResult) -> Best:
        """Load a `state` into the solver, this optimization and `result`; its best state."""
        solver.load_state_dict(saved["solver"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.schedule.load_state_dict(saved["schedule"])
        self.batches.set_state(saved["batches"])
        result.losses = list(saved["losses"])
        result.seconds = saved["seconds"]
        result.validation = dict(saved["validation"])
        if self.slack is not None:
            self.slack.data.copy_(saved["slack"])
        return dict(saved["best"])
