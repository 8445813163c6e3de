"""The memory settings of a fit: what backward keeps, in what precision, over how many passes.

A fit differentiates its loss through the N backbone calls of a rollout. Plainly, autograd keeps
every call's activations until backward, so memory grows as batch × NFE × (one call's
activations): 118 MiB per sample and NFE for an EDM CIFAR-10-size U-Net in float32. Three
settings change that without changing what is fitted:

    checkpoint   none    keep every activation
                 calls   keep each backbone call's inputs only and run the call again in
                         backward (torch.utils.checkpoint, non-reentrant); the loss networks too
                 blocks  the same one block at a time inside the backbone (its `blocks()`):
                         a transformer's block inputs are kept, one block's activations live
                 selective  keep the outputs of the expensive operations (convolutions,
                         matmuls, attention: SAVED_OPS) and compute the cheap ones between
                         them (normalisations, activations, additions) again in backward
                         (torch's selective activation checkpointing); the loss networks too
                 auto    chosen with micro_batch by a measured probe (`memory_plan.py`)
    precision    float32 | bfloat16 | float16: the backbone's and the loss networks' calls run
                 under autocast and return float32; the solver's parameters, its state, the
                 loss reduction and the optimizer stay float32 (float16 with loss scaling)
    micro_batch  k > 0: the batch is split into passes of k samples whose gradients add up,
                 pass j weighted by its share n_j / n of the batch:
                     ∇ (1/n) Σ_s ℓ_s = Σ_j (n_j / n) ∇ (1/n_j) Σ_{s ∈ j} ℓ_s
                 the same update as one pass, to float rounding; 0: one pass

Recomputation gives the plain fit's gradients to float32 rounding (bit for bit on a CPU).
`checkpoint` and `micro_batch` therefore do not enter a fit's identity; `precision` does.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint as recompute_in_backward
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from spanlift.errors import SettingsError

CHECKPOINTS = ("none", "calls", "blocks", "selective", "auto")
RECOMPUTING = ("calls", "blocks", "selective")
"""The checkpoints under which backward computes something again (the loss networks too)."""


def aten_ops(*names: str) -> list[Any]:
    """The default overloads of the aten operators `names` this torch build has."""
    ops = [getattr(torch.ops.aten, name, None) for name in names]
    return [op.default for op in ops if op is not None and hasattr(op, "default")]


SAVED_OPS = aten_ops(
    "convolution",
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_mm",
)
"""The operations whose outputs `checkpoint: selective` keeps: those whose time grows with the
product of their operands' sizes; everything else is computed again in backward."""
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}
MEMORY_ONLY = ("checkpoint", "micro_batch")
"""Fit settings that change memory and time but not the fitted weights (to float rounding)."""

VALIDATION_BATCH = 256
"""Validation seeds rolled out at once without gradients, when memory settings ask nothing."""


def recomputed(function: Callable[..., Any], selective: bool = False) -> Callable[..., Any]:
    """`function`, whose activations are not kept but computed again in backward (when
    gradients are being recorded; otherwise it simply runs); `selective`: the outputs of
    SAVED_OPS kept, only the operations between them computed again."""
    contexts = {  # what it keeps passes through saved-tensor hooks (they count it)
        "context_fn": partial(create_selective_checkpoint_contexts, SAVED_OPS),
        "respect_saved_tensors_hooks": True,
    }

    def call(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return function(*args, **kwargs)
        options = contexts if selective else {}
        return recompute_in_backward(function, *args, use_reentrant=False, **options, **kwargs)

    return call


def autocast_float32(
    function: Callable[..., Tensor], precision: str, device: torch.device
) -> Callable[..., Tensor]:
    """`function` run under autocast at `precision`, its result cast back to float32."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return function

    def call(*args: Any, **kwargs: Any) -> Tensor:
        with torch.autocast(device.type, dtype=dtype):
            return function(*args, **kwargs).float()

    return call


@contextmanager
def blocks_recomputed(blocks: list[torch.nn.Module]) -> Iterator[None]:
    """Each block's forward recomputed in backward while the block runs (`checkpoint: blocks`);
    the blocks are as before afterwards."""
    blocks = list({id(block): block for block in blocks}.values())
    for block in blocks:
        block.forward = recomputed(block.forward)
    try:
        yield
    finally:
        for block in blocks:
            del block.forward  # the class's own forward again


@dataclass(frozen=True)
class MemoryPlan:
    """The memory settings a fit runs with, resolved (`auto` chosen): module docstring."""

    checkpoint: str = "none"
    precision: str = "float32"
    micro_batch: int = 0
    rollout_batch: int = VALIDATION_BATCH
    """Samples rolled out at once without gradients (validation, a solver's search)."""
    chosen_by: str = "settings"
    """"settings", or "auto" when a probe chose checkpoint and micro_batch."""
    predicted_peak: int | None = None
    """Bytes the probe predicted for the fit's peak on its device (auto), else None."""

    @classmethod
    def of(cls, checkpoint: str, precision: str, micro_batch: int, batch: int) -> "MemoryPlan":
        """The plan settings ask for. A fit that asks to save memory for its gradients rolls out
        no more samples at once without them than one backward pass holds."""
        saving = checkpoint != "none" or micro_batch > 0
        rollout = (micro_batch or batch) if saving else VALIDATION_BATCH
        return cls(checkpoint, precision, micro_batch, rollout)

    def denoiser(self, denoiser: Callable, device: torch.device) -> Callable:
        """A backbone call as this plan runs it: autocast, and recomputed in backward (calls,
        selective)."""
        call = autocast_float32(denoiser, self.precision, device)
        if self.checkpoint in ("calls", "selective"):
            return recomputed(call, selective=self.checkpoint == "selective")
        return call

    def loss(self, loss_fn: Callable, device: torch.device) -> Callable:
        """The loss as this plan runs it: its networks under autocast, recomputed in backward
        whenever the backbone's calls or blocks are (unless the loss trains a network of its
        own on each call, `stateful`: it must run once); selectively with `selective`."""
        call = autocast_float32(loss_fn, self.precision, device)
        recompute = self.checkpoint in RECOMPUTING and not stateful(loss_fn)
        return recomputed(call, self.checkpoint == "selective") if recompute else call

    def passes(self, index: Tensor) -> tuple[Tensor, ...]:
        """The batch's rows split into backward passes of `micro_batch` (one pass for 0)."""
        return index.split(self.micro_batch or max(1, len(index)))

    def blocks_of(self, blocks: Callable[[], list[torch.nn.Module]]) -> Any:
        """A context in which the backbone's blocks are recomputed, when the plan says so."""
        return blocks_recomputed(blocks()) if self.checkpoint == "blocks" else nullcontext()

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler:
        """Loss scaling for float16 (its narrow exponent underflows small gradients); a pass-
        through otherwise."""
        return torch.amp.GradScaler(device.type, enabled=self.precision == "float16")

    def params(self) -> dict[str, Any]:
        """What a run records of the plan."""
        recorded = {
            "fit.memory.checkpoint": self.checkpoint,
            "fit.memory.precision": self.precision,
            "fit.memory.micro_batch": self.micro_batch,
            "fit.memory.rollout_batch": self.rollout_batch,
            "fit.memory.chosen_by": self.chosen_by,
        }
        if self.predicted_peak is not None:
            recorded["fit.memory.predicted_peak_mib"] = round(self.predicted_peak / 2**20, 1)
        return recorded


def stateful(loss_fn: Callable) -> bool:
    """Whether a loss updates a network of its own on every call with gradients (GAS's
    discriminator): it cannot be recomputed nor split into passes."""
    return bool(getattr(loss_fn, "stateful", False))


def check_memory_settings(checkpoint: str, precision: str, micro_batch: Any) -> None:
    """One line for a memory setting outside what it accepts."""
    if checkpoint not in CHECKPOINTS:
        raise SettingsError(
            f"fit setting checkpoint must be one of {', '.join(CHECKPOINTS)}, got {checkpoint!r}"
        )
    if precision not in PRECISIONS:
        raise SettingsError(
            f"fit setting precision must be one of {', '.join(PRECISIONS)}, got {precision!r}"
        )
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 0:
        raise SettingsError(
            "fit setting micro_batch must be a non-negative integer (0: the whole batch), "
            f"got {micro_batch!r}"
        )


def check_stateful_loss(loss_fn: Callable, loss: str, plan: MemoryPlan, batch: int) -> None:
    """Refuse micro-batches with a loss that trains its own network once per pass."""
    if stateful(loss_fn) and 0 < plan.micro_batch < batch:
        raise SettingsError(
            f"loss {loss!r} trains its own network once per backward pass; micro_batch "
            f"{plan.micro_batch} would train it {-(-batch // plan.micro_batch)} times per "
            "update: use micro_batch 0 (and checkpoint calls to save memory)"
        )
