"""Endpoint teacher matching: fit a learned solver through its full N-step rollout.

    J(S) = E_noise ℓ(Φ_S(x_T), Φ*(x_T))      (the paper, eq. 4)

or, with `target="observed"` (a conditional backbone with observations, e.g. nowcasting),
J(S) = E ℓ(D(Φ_S(x_T)), y): the decoded endpoint against what was really observed.

Adam with linear warm-up and cosine decay, gradient-norm clipping, deterministic under a seed.
`fit` is a plain function: a Ray Train worker calls it unchanged. It wraps the solver in DDP when
torch.distributed is initialised (each rank draws its own batches), hands `report` its metrics
every `log_every` iterations and its full state every `checkpoint_every` iterations, and continues
exactly from such a state when given one as `resume`.
"""

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch
from tqdm import tqdm

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.platform.fitting.losses import LOSSES, check_loss_options
from spanlift.platform.fitting.teacher import TeacherSet
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
    batch_size: int = 32
    lr: float = 5e-3
    warmup: int = 20
    grad_clip: float = 1.0
    loss: str = "mse"
    target: str = "teacher"  # or "observed": the backbone's observations instead of the teacher
    seed: int = 0
    log_every: int = 25
    checkpoint_every: int = 50
    loss_options: dict[str, Any] = field(default_factory=dict, hash=False)
    """Keyword arguments of the loss, e.g. `{dinov2_path: /models/dinov2-base, c: 0.1}` for
    `latent`; {} for the losses that take none. (A dict is not hashable: left out of the hash.)"""

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "log_every", "checkpoint_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SettingsError(
                    f"fit setting {name} must be a positive integer, got {getattr(self, name)!r}"
                )
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise SettingsError(f"fit setting lr must be a positive number, got {self.lr!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SettingsError(
                f"fit setting warmup must be a non-negative integer, got {self.warmup!r}"
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


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """lr multiplier: linear from 0 to 1 over `warmup` iterations, then cosine down to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def rollout(
    solver: torch.nn.Module,
    backbone: Backbone,
    noise: torch.Tensor,
    cond: torch.Tensor | None = None,
) -> torch.Tensor:
    """The solver's endpoint from standard normal noise (and the samples' conditioning)."""
    return solver(conditioned(backbone, cond), backbone.prior(noise))


def on_device(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


def endpoint_loss(settings: "FitSettings", backbone: Backbone) -> Callable:
    """ℓ(endpoint, target) as the fit's target asks: against teacher endpoints in sample space,
    or, decoded, against observations in data space."""
    make_loss, options = LOSSES.get(settings.loss), settings.loss_options
    if settings.target == "observed":
        loss_fn = make_loss(lambda data: data, **options)
        return lambda endpoint, target: loss_fn(backbone.decode(endpoint), target)
    return make_loss(backbone.decode, **options)


def distributed(solver: Solver) -> torch.nn.Module:
    """DDP around the solver when torch.distributed is initialised (gradients averaged over ranks)."""
    if not torch.distributed.is_initialized():
        return solver
    device_ids = [solver_device(solver)] if solver_device(solver).type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(
        solver, device_ids=device_ids, find_unused_parameters=True
    )


def solver_device(solver: Solver) -> torch.device:
    return next(solver.parameters()).device


def rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def fit(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    settings: FitSettings = FitSettings(),
    report: Report | None = None,
    progress: bool = True,
    resume: FitState | None = None,
) -> FitResult:
    """Train the solver's trainable parameters to match the teacher's endpoints."""
    params = [p for p in solver.parameters() if p.requires_grad]
    if not params:
        raise SettingsError(f"solver {solver.spec.label()} has no trainable parameters to fit")
    torch.manual_seed(settings.seed)
    batches = torch.Generator().manual_seed(settings.seed + 1000 * rank())
    loss_fn = endpoint_loss(settings, backbone)
    targets = teacher.target(settings.target)
    optimizer = torch.optim.Adam(params, lr=settings.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(settings.warmup, settings.iterations)
    )
    result, first = FitResult(), 0
    if resume:
        solver.load_state_dict(resume["solver"])
        optimizer.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["schedule"])
        batches.set_state(resume["batches"])
        result.losses, first = list(resume["losses"]), resume["iteration"]
        result.seconds = resume["seconds"]
    model, device = distributed(solver), solver_device(solver)
    start = time.perf_counter() - result.seconds
    bar = tqdm(
        range(first, settings.iterations),
        initial=first,
        total=settings.iterations,
        desc=f"fit {solver.spec.label()}",
        disable=not progress,
    )
    for iteration in bar:
        index = torch.randint(
            len(teacher), (min(settings.batch_size, len(teacher)),), generator=batches
        )
        noise, target = teacher.noise[index].to(device), targets[index].to(device)
        cond = on_device(None if teacher.cond is None else teacher.cond[index], device)
        loss = loss_fn(rollout(model, backbone, noise, cond), target)
        if not torch.isfinite(loss):
            raise TrainingDivergedError(
                f"fit of {solver.spec.label()} diverged: loss is {loss.item()} at iteration {iteration} "
                f"(lr={settings.lr}); lower lr or grad_clip"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
        optimizer.step()
        schedule.step()
        result.losses.append(loss.item())
        done = iteration + 1
        last = done == settings.iterations
        if report and (
            iteration % settings.log_every == 0 or done % settings.checkpoint_every == 0 or last
        ):
            bar.set_postfix(loss=f"{loss.item():.3g}")
            state = None
            if done % settings.checkpoint_every == 0 or last:
                state = {
                    "iteration": done,
                    "solver": solver.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(),
                    "batches": batches.get_state(),
                    "losses": result.losses,
                    "seconds": time.perf_counter() - start,
                }
            metrics = {"iteration": done, "loss": loss.item(), "lr": schedule.get_last_lr()[0]}
            report(metrics, state)
    if not all(torch.isfinite(p).all() for p in params):
        raise TrainingDivergedError(
            f"fit of {solver.spec.label()} left non-finite parameters; lower lr"
        )
    result.seconds = time.perf_counter() - start
    return result


@torch.no_grad()
def endpoint_rmse(
    solver: Solver,
    backbone: Backbone,
    teacher: TeacherSet,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
) -> float:
    """sqrt(mean (Φ_S(x_T) − Φ*(x_T))²) over a teacher set."""
    total = 0.0
    for start in range(0, len(teacher), batch_size):
        part = teacher.subset(slice(start, start + batch_size))
        endpoint = rollout(solver, backbone, part.noise.to(device), on_device(part.cond, device))
        error = endpoint - part.endpoints.to(device)
        total += error.square().sum().item()
    return math.sqrt(total / teacher.endpoints.numel())
