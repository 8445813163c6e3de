"""How a fit updates the solver: AdamW over its parameters (and LD3's input slack δ), the
warm-up–cosine lr schedule, the batches drawn per DDP rank, and the memory plan's backward passes
(`memory.py`), with loss scaling for float16. `Optimization` is also what a fit's saved state
holds of all that, and restores exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from spanlift.errors import SettingsError, TrainingDivergedError
from spanlift.platform.fitting.memory import MemoryPlan
from spanlift.platform.fitting.settings import Best, FitResult, FitSettings, FitState, Objective
from spanlift.platform.sampling.rollout import solver_device
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.sampling.tensor_memory import MIB, device_peak
from spanlift.solvers import Solver
from spanlift.solvers.capabilities import Alternating, HasInputSlack


def rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """lr multiplier: linear from 0 to 1 over `warmup` iterations, then cosine down to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def slack_limits(noise: torch.Tensor, radius: float) -> torch.Tensor:
    """r‖x_T‖ per training seed: the radius of each seed's LD3 ball."""
    return radius * noise.flatten(1).norm(dim=1)


def project_slack(slack: torch.Tensor, limits: torch.Tensor) -> None:
    """δ ← δ · min(1, r‖x_T‖ / ‖δ‖) per seed: back into LD3's ball."""
    norms = slack.flatten(1).norm(dim=1).clamp_min(1e-12)
    slack.mul_((limits / norms).clamp(max=1).view(-1, *[1] * (slack.dim() - 1)))


@dataclass
class Optimization:
    """What a fit steps and what a checkpoint saves of it: AdamW over the solver's parameters
    (and LD3's input slack δ, without weight decay), the warm-up–cosine lr schedule, the
    generator that draws the batches (seeded per DDP rank), and the memory plan's passes and
    loss scaling."""

    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR
    batches: torch.Generator
    plan: MemoryPlan
    scaler: torch.amp.GradScaler
    slack: torch.Tensor | None = None
    limits: torch.Tensor | None = None

    @classmethod
    def set_up(
        cls,
        solver: Solver,
        params: list[torch.nn.Parameter],
        train: TeacherSet,
        settings: FitSettings,
        plan: MemoryPlan | None = None,
    ) -> Optimization:
        plan = plan or MemoryPlan.of(
            settings.checkpoint, settings.precision, settings.micro_batch, settings.batch_size
        )
        batches = torch.Generator().manual_seed(settings.seed + 1000 * rank())
        slack = limits = None
        groups: list[dict[str, Any]] = [{"params": params}]
        device = solver_device(solver)
        if isinstance(solver, HasInputSlack) and solver.input_slack > 0:
            slack = torch.zeros_like(train.noise, device=device, requires_grad=True)
            limits = slack_limits(train.noise, solver.input_slack).to(device)
            groups.append({"params": [slack], "weight_decay": 0.0})
        optimizer = torch.optim.AdamW(groups, lr=settings.lr, weight_decay=settings.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, warmup_cosine(settings.warmup, settings.iterations)
        )
        scaler = plan.grad_scaler(device)
        return cls(params, optimizer, schedule, batches, plan, scaler, slack, limits)

    def measured_step(
        self,
        solver: Solver,
        model: torch.nn.Module,
        loss: Objective,
        train: TeacherSet,
        iteration: int,
        settings: FitSettings,
        result: FitResult,
    ) -> float:
        """`step`; the fit's first update is measured (its peak bytes above what was allocated
        before, into `result.memory`) on a GPU always, elsewhere when a probe chose the plan."""
        device = solver_device(solver)
        measure = not result.memory.get("fit.memory.measured_peak_mib") and (
            device.type == "cuda" or self.plan.chosen_by == "auto"
        )
        if not measure:
            return self.step(solver, model, loss, train, iteration, settings)
        value: list[float] = []
        peak = device_peak(
            device, lambda: value.append(self.step(solver, model, loss, train, iteration, settings))
        )
        result.memory["fit.memory.measured_peak_mib"] = round(peak / MIB, 1)
        return value[0]

    def step(
        self,
        solver: Solver,
        model: torch.nn.Module,
        loss: Objective,
        train: TeacherSet,
        iteration: int,
        settings: FitSettings,
    ) -> float:
        """One update on a batch drawn from `train`, in the plan's backward passes; its loss (a
        non-finite one is refused)."""
        index = torch.randint(
            len(train), (min(rank_batch(settings), len(train)),), generator=self.batches
        )
        if not self.params:  # nothing to update (a solver fitted by its search alone)
            with torch.no_grad():
                return self.checked(
                    loss(model, train.subset(index), None), solver, iteration, settings
                )
        self.optimizer.zero_grad(set_to_none=True)
        passes = self.plan.passes(index)
        value = 0.0
        for n, rows in enumerate(passes):
            slack = None if self.slack is None else self.slack[rows.to(self.slack.device)]
            with gradients_synchronised(model, last=n == len(passes) - 1):
                part, share = loss(model, train.subset(rows), slack), len(rows) / len(index)
                value += share * self.checked(part, solver, iteration, settings)
                self.scaler.scale(part * share).backward()
        self.update(solver, iteration, settings)
        return value

    def checked(
        self, value: Tensor, solver: Solver, iteration: int, settings: FitSettings
    ) -> float:
        """The loss as a number; a non-finite one stops the fit."""
        if not torch.isfinite(value):
            raise TrainingDivergedError(
                f"fit of {solver.spec.label()} diverged: loss is {value.item()} at iteration "
                f"{iteration} (lr={settings.lr}); lower lr or grad_clip"
            )
        return value.item()

    def update(self, solver: Solver, iteration: int, settings: FitSettings) -> None:
        """The optimizer step on the accumulated gradients: unscaled, the inactive parameters'
        dropped, clipped; then the lr schedule and LD3's projection back into its ball."""
        self.scaler.unscale_(self.optimizer)
        if isinstance(solver, Alternating):  # alternating schemes (S4S-Alt)
            for p in solver.inactive_parameters(iteration):
                p.grad = None
        torch.nn.utils.clip_grad_norm_(self.params, settings.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.schedule.step()
        if self.slack is not None:
            with torch.no_grad():
                project_slack(self.slack, self.limits)

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
            "validation_seconds": result.validation_seconds,
            "kept": result.kept,
            "best": best.to_dict(),
            "slack": None if self.slack is None else self.slack.detach().cpu(),
            "memory": dict(result.memory),
            "stopped_by": result.stopped_by,
            **({"scaler": self.scaler.state_dict()} if self.scaler.is_enabled() else {}),
        }

    def restore(self, solver: Solver, saved: FitState, result: FitResult) -> Best:
        """Load a `state` into the solver, this optimization and `result`; its best state (saved
        by this version or an earlier one, `Best.from_dict`)."""
        solver.load_state_dict(saved["solver"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.schedule.load_state_dict(saved["schedule"])
        self.batches.set_state(saved["batches"])
        if "scaler" in saved:
            self.scaler.load_state_dict(saved["scaler"])
        result.losses = list(saved["losses"])
        result.seconds = saved["seconds"]
        result.validation = dict(saved["validation"])
        result.validation_seconds = dict(saved.get("validation_seconds", {}))
        result.kept = list(saved.get("kept", []))
        result.stopped_by = saved.get("stopped_by", "")
        if self.slack is not None:
            self.slack.data.copy_(saved["slack"])
        return Best.from_dict(saved["best"])


def world_size() -> int:
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def rank_batch(settings: FitSettings) -> int:
    """Samples each DDP rank draws per update: `batch_size` is the effective batch, split evenly
    over the ranks."""
    ranks = world_size()
    if settings.batch_size % ranks:
        raise SettingsError(
            f"fit setting batch_size {settings.batch_size} is the batch of one update over all "
            f"{ranks} workers: it must be a multiple of {ranks}"
        )
    return settings.batch_size // ranks


def gradients_synchronised(model: torch.nn.Module, last: bool) -> Any:
    """DDP averages gradients over ranks on the last backward pass of an update only."""
    if last or not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return nullcontext()
    return model.no_sync()
