"""A fit's memory, predicted from a measured probe, and `checkpoint: auto`'s choice.

The probe runs on the fit's device, at batch 1, under the fit's precision: one backbone call
with gradients to its input (kept for backward, and its peak through backward; again with its
blocks recomputed when it has blocks, and once without gradients), the loss on one sample, and
the solver's own arithmetic over a whole rollout with the backbone replaced by a stand-in
(D = x/2, which keeps nothing) that also counts the rows each call passes. All figures are per
sample, and memory is linear in the samples of a pass, except what a call keeps whatever its
batch: under autocast, the half-precision copies of float32 weights its ops save for backward
(f: `tensor_memory.saved_for_backward`'s `fixed`, once per call). A quantity q measured at one
sample is q' = q − f per sample. For b samples per backward pass the peak is what is kept
until backward plus the largest of what is live beside it at once:

    none    b · (R_g · kept'_call + kept_solver) + C_g · f_call + max(S, L, b · r · transient)
    blocks  the same with the call's blocks recomputed (kept_blk, peak_blk)
    selective  the same with the call recomputed selectively (kept_sel, peak_sel)
    calls   b · R · input + max(b · kept_solver + max(S, L), b · kept_before + call(b · r))

with transient = peak_call − kept_call, S = b · (peak_solver − kept_solver) the solver's own, L = b · peak'_loss + f_loss
the loss through its backward, call(n) = n · peak'_call + f_call a call through its backward, plus
the optimizer's state for the solver's parameters. R: backbone rows per sample over the rollout
(NFE, or K per call for EPD's K points), r: rows of one call, C: calls per rollout; R_g and C_g
count only the calls autograd records (whose state or σ depends on the solver's parameters: a
rollout's first call often does not). A recomputed call runs again in backward when the saved
tensors of what followed it are freed: beside it lives what the rollout kept before its last
recorded call (kept_before), not the rollout's peak. Without gradients (the fit's validation
rollouts, evaluation) a sample costs r · peak_nograd + the solver's state.

`auto` keeps the settings whose predicted peak fits the free memory of the device with a margin
and whose counted work is least (`update_cost.py`: forwards per call, one more for a recomputed
call, and a call's fixed time in rows measured on a GPU and rounded, 0 on a CPU), ties broken
in a fixed order: the same probe names the same settings whatever the timings' noise. On a CPU
passes cost nothing extra and the plain pass is the cheapest that fits; on a GPU a small network
at batch 1 is mostly fixed time, so recomputing beats splitting.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import SettingsError
from spanlift.platform.fitting.losses import loss_networks
from spanlift.platform.fitting.memory import (
    VALIDATION_BATCH,
    MemoryPlan,
    autocast_float32,
    blocks_recomputed,
    recomputed,
    stateful,
)
from spanlift.platform.fitting.optimization import rank_batch
from spanlift.platform.fitting.update_cost import FORWARDS, fixed_rows, update_work
from spanlift.platform.sampling.rollout import on_device, solver_device
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.sampling.tensor_memory import (
    MARGIN,
    device_peak,
    free_bytes,
    halvings,
    saved_for_backward,
)
from spanlift.solvers import Solver


@dataclass(frozen=True)
class CallCost:
    """Bytes per sample of one differentiable computation: saved for backward, and its peak
    through forward and backward above what was allocated before; `fixed` of them the same at
    any batch (module docstring)."""

    kept: int
    peak: int
    fixed: int = 0

    def at(self, samples: int) -> int:
        """The peak of the computation on `samples` samples at once."""
        return samples * (self.peak - self.fixed) + self.fixed


@dataclass(frozen=True)
class BackboneProbe:
    """A backbone call at batch 1 under one precision (module docstring)."""

    call: CallCost
    blocks: CallCost | None
    """The call with its blocks recomputed; None for a backbone without blocks."""
    selective: CallCost
    """The call recomputed selectively (`memory.SAVED_OPS` kept)."""
    nograd: int
    """Peak bytes of the call without gradients."""
    input: int
    """Bytes of the call's input, what a recomputed call keeps."""
    fixed_rows: int
    """A call's fixed time, in rows of its per-row time (`update_cost.py`)."""


@dataclass(frozen=True)
class SolverProbe:
    """The solver's own arithmetic over one rollout of one sample (module docstring)."""

    rollout: CallCost
    nograd: int
    rows: int
    """Backbone rows per sample over a rollout (R)."""
    rows_per_call: int
    """Rows per sample of the widest call (r)."""
    optimizer: int
    """Bytes of the trainable parameters' gradients and AdamW moments."""
    calls: int
    """Backbone calls of a rollout (C)."""
    recorded_rows: int
    """Rows per sample of the calls autograd records (R_g)."""
    recorded_calls: int
    """Calls autograd records (C_g)."""
    kept_before: int
    """Bytes per sample the rollout has saved for backward when its last recorded call starts."""


@dataclass(frozen=True)
class FitProbe:
    """What a fit's memory is predicted from (module docstring), per sample."""

    backbone: BackboneProbe
    solver: SolverProbe
    loss: CallCost

    def peak(self, checkpoint: str, samples: int) -> int:
        """Predicted working bytes of an update in passes of `samples` (module docstring)."""
        model, solver = self.backbone, self.solver
        rows = samples * solver.rows_per_call
        own = samples * (solver.rollout.peak - solver.rollout.kept)
        rollout = samples * solver.rollout.kept
        loss = self.loss.at(samples)
        if checkpoint == "calls":
            inputs = samples * solver.rows * model.input
            again = samples * solver.kept_before + model.call.at(rows)
            return inputs + max(rollout + max(own, loss), again) + solver.optimizer
        call = model.call
        if checkpoint == "blocks" and model.blocks:
            call = model.blocks
        if checkpoint == "selective":
            call = model.selective
        kept = samples * solver.recorded_rows * (call.kept - call.fixed)
        kept += solver.recorded_calls * call.fixed + rollout
        transient = rows * (call.peak - call.kept)
        return kept + max(own, loss, transient) + solver.optimizer

    def rollout_peak(self, samples: int) -> int:
        """Predicted bytes of a rollout without gradients of `samples` samples."""
        return samples * (self.solver.rows_per_call * self.backbone.nograd + self.solver.nograd)

    def work(self, checkpoint: str, batch: int, samples: int) -> float:
        """The counted work of an update of `batch` in passes of `samples` (`update_cost.py`)."""
        rows, fixed = self.solver.rows, self.backbone.fixed_rows
        return update_work(checkpoint, rows, batch, samples, fixed)


def candidate_checkpoints(blocks: bool) -> tuple[str, ...]:
    """The checkpoints `auto` weighs: blocks only for a backbone that has them."""
    return ("none", "selective", "calls", "blocks") if blocks else ("none", "selective", "calls")


def choose(
    probe: FitProbe, batch: int, budget: int, checkpoints: tuple[str, ...], sizes: list[int]
) -> tuple[str, int]:
    """(checkpoint, samples per pass) of the cheapest plan among `checkpoints` × `sizes` whose
    predicted peak is within `budget`; a SettingsError naming what one sample needs when none
    is."""
    order = list(FORWARDS)
    options = [
        (probe.work(checkpoint, batch, samples), order.index(checkpoint), -samples, checkpoint)
        for checkpoint in checkpoints
        for samples in sizes
        if probe.peak(checkpoint, samples) <= budget
    ]
    if not options:
        least = min(probe.peak(checkpoint, min(sizes)) for checkpoint in checkpoints)
        raise SettingsError(
            f"the fit needs {least / 2**30:.2f} GiB for {min(sizes)} sample(s) per pass with "
            f"the least memory of checkpoint {'/'.join(checkpoints)}, and "
            f"{budget / 2**30:.2f} GiB are free to plan (free memory less {MARGIN:.0%}): use a "
            "device with more memory, or precision bfloat16"
        )
    _, _, fewest, checkpoint = min(options)  # ties: FORWARDS' order, then fewer passes
    samples = -fewest
    return checkpoint, samples


def memory_plan(
    solver: Solver, backbone: Backbone, train: TeacherSet, settings: Any, loss_fn: Callable
) -> MemoryPlan:
    """The plan a fit runs with: what its settings ask, or with `checkpoint: auto` what the probe
    of `loss_fn` (the endpoint loss) and the backbone chooses on the solver's device, with its
    predicted peak. A `micro_batch` given beside `auto` is kept, and a loss that trains its own
    network takes one pass per update: auto then chooses the checkpoint alone."""
    batch = rank_batch(settings)
    plan = MemoryPlan.of(settings.checkpoint, settings.precision, settings.micro_batch, batch)
    blocks = bool(backbone.blocks())
    if settings.checkpoint == "blocks" and not blocks:
        raise SettingsError(
            f"backbone {type(backbone).__name__} has no blocks to recompute one at a time; "
            "use checkpoint calls"
        )
    if settings.checkpoint != "auto":
        return plan
    device = solver_device(solver)
    probe = probe_fit(solver, backbone, train, settings.precision, loss_fn)
    budget = int(free_bytes(device) * (1 - MARGIN))
    checkpoints = candidate_checkpoints(blocks)
    whole = settings.micro_batch or (batch if stateful(loss_fn) else 0)  # one pass per update
    sizes = [min(whole, batch)] if whole else halvings(batch)
    checkpoint, samples = choose(probe, batch, budget, checkpoints, sizes)
    fitting = [s for s in halvings(VALIDATION_BATCH) if probe.rollout_peak(s) <= budget]
    return replace(
        plan,
        checkpoint=checkpoint,
        micro_batch=0 if samples >= batch else samples,
        rollout_batch=max(fitting or [1]),
        chosen_by="auto",
        predicted_peak=probe.peak(checkpoint, samples),
    )


def call_cost(
    call: Callable[[Tensor], Tensor], x: Tensor, exclude: list[Tensor], device: torch.device
) -> CallCost:
    """Kept and peak bytes of `call(x)`, with gradients to x only (nothing accumulates in any
    parameter), through backward."""
    kept = {"bytes": 0, "fixed": 0}

    def run() -> None:
        state = x.detach().requires_grad_(True)
        with saved_for_backward(exclude) as counted:
            out = call(state)
        kept.update(counted)
        if out.requires_grad:
            torch.autograd.grad(out, state, torch.ones_like(out))

    peak = device_peak(device, run)
    return CallCost(kept["bytes"], peak, kept["fixed"])


@dataclass(frozen=True)
class StandInCall:
    """One backbone call of a rollout with the stand-in model (`rollout_calls`)."""

    rows: int
    recorded: bool
    """Whether autograd records the call: its state or σ depends on the solver's parameters."""
    kept_before: int
    """Bytes the rollout had saved for backward when the call started."""


def rollout_calls(solver: Solver, x: Tensor) -> list[StandInCall]:
    """The backbone calls of one rollout from x (x without gradients, as a fit's noise; the
    stand-in model, the solver's parameters recording)."""
    calls: list[StandInCall] = []
    with saved_for_backward(list(solver.parameters())) as kept:

        def stand_in(state: Tensor, sigma: Tensor) -> Tensor:
            recorded = state.requires_grad or (isinstance(sigma, Tensor) and sigma.requires_grad)
            calls.append(StandInCall(len(state), recorded, kept["bytes"]))
            return stand_in_model(state, sigma)

        solver(stand_in, x.detach())
    return calls


def stand_in_model(state: Tensor, sigma: Tensor) -> Tensor:
    """D = x/2: a model that keeps nothing for backward, so a rollout measures the solver."""
    return state * 0.5


def probe_backbone(
    backbone: Backbone, one: TeacherSet, precision: str, device: torch.device
) -> BackboneProbe:
    """One call of the backbone on the first sample of `one`, at σ = √(σ_min σ_max)."""
    x = backbone.prior(one.noise[:1].to(device))
    sigma = torch.as_tensor(math.sqrt(backbone.sigma_min * backbone.sigma_max), device=device)
    cond = on_device(None if one.cond is None else one.cond[:1], device)
    denoiser = autocast_float32(conditioned(backbone, cond), precision, device)

    def call(state: Tensor) -> Tensor:
        return denoiser(state, sigma)

    weights = weights_of(backbone)
    blocks = None
    if backbone.blocks():
        with blocks_recomputed(backbone.blocks()):
            blocks = call_cost(call, x, weights, device)
    plain = call_cost(call, x, weights, device)
    selective = call_cost(recomputed(call, selective=True), x, weights, device)
    with torch.no_grad():
        nograd = device_peak(device, lambda: call(x))
        fixed = fixed_rows(device, lambda rows: call(torch.cat([x] * rows)))
    return BackboneProbe(plain, blocks, selective, nograd, x.numel() * x.element_size(), fixed)


def probe_solver(solver: Solver, x: Tensor) -> SolverProbe:
    """The solver's rollout from the state x (one sample) with the stand-in model."""
    device = x.device
    params = list(solver.parameters())
    with torch.no_grad():
        nograd = device_peak(device, lambda: solver(stand_in_model, x))
    calls = rollout_calls(solver, x)
    recorded = [call for call in calls if call.recorded]
    trained = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    return SolverProbe(
        rollout=call_cost(lambda state: solver(stand_in_model, state), x, params, device),
        nograd=nograd,
        rows=max(1, sum(call.rows for call in calls)),
        rows_per_call=max([call.rows for call in calls] or [1]),
        optimizer=3 * trained,
        calls=max(1, len(calls)),
        recorded_rows=sum(call.rows for call in recorded),
        recorded_calls=len(recorded),
        kept_before=max([call.kept_before for call in recorded] or [0]),
    )


def probe_fit(
    solver: Solver, backbone: Backbone, train: TeacherSet, precision: str, loss_fn: Callable
) -> FitProbe:
    """Measure what the module docstring predicts from, on the solver's device."""
    device = solver_device(solver)
    one = train.subset(slice(0, 1))
    return FitProbe(
        probe_backbone(backbone, one, precision, device),
        probe_solver(solver, backbone.prior(one.noise.to(device))),
        loss_cost(loss_fn, one.endpoints.to(device), precision, device, weights_of(backbone)),
    )


def weights_of(*modules: torch.nn.Module) -> list[Tensor]:
    """The modules' parameters and buffers: what a probe's figures leave out (resident)."""
    return [t for module in modules for t in (*module.parameters(), *module.buffers())]


def loss_cost(
    loss_fn: Callable,
    target: Tensor,
    precision: str,
    device: torch.device,
    weights: Sequence[Tensor] = (),
) -> CallCost:
    """The loss on one sample with gradients to the student's endpoint; a loss that trains a
    network of its own on each call is measured without gradients (it must not learn here).
    `weights`: those of the networks it calls besides its own (the backbone's decoder)."""
    loss = autocast_float32(loss_fn, precision, device)
    student = target + 0.01 * torch.randn_like(target)
    if stateful(loss_fn):
        with torch.no_grad():
            return CallCost(0, device_peak(device, lambda: loss(student, target)))
    weights = [*weights, *weights_of(*loss_networks(loss_fn))]
    return call_cost(lambda endpoint: loss(endpoint, target).reshape(1), student, weights, device)
