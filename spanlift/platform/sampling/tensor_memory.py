"""Tensor memory, measured the same way on any device: what a block of code allocates and keeps.

    peak   = max over the block of Σ bytes of the tensor storages it created that were still alive
    kept   = Σ bytes of the storages autograd saved for backward (one count per storage)

`TensorPeak` sees every tensor operation (a `TorchDispatchMode`, backward's included) and counts
each new storage from its creation until the last tensor viewing it is freed: the quantity a
GPU's caching allocator reports as `max_memory_allocated` above what was allocated before, short
of its rounding to blocks and of kernels' workspaces, measured on the CPU too. Tensors made
before the block (weights, inputs) are not counted; views and in-place results share their
input's storage and add nothing. `saved_for_backward` counts what a differentiable call leaves for
backward, without the weights it saves by reference; of that, `fixed` is what does not grow with
the samples of the call: the copies autocast makes of float32 weights for the half-precision ops
that use them (frozen weights are cast again by every op, and each copy an op saves for its
backward stays until then: one set per call, whatever its batch).

Inside `arithmetic_skipped()` a `TensorPeak` allocates the outputs of the costly operations
(convolutions, matrix products, attention, forward and backward) without computing them: each
output is zeros of the size, strides and dtype the operation's meta kernel gives, so every
storage is created and freed as before and the bytes counted are the same, while the arithmetic
that takes the time is left out (`spanlift doctor --memory` on a CPU). Shapes never depend on
these values in a denoiser, a solver or a metric network; a computation whose shapes did would
be measured wrongly there.
"""

import weakref
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only

MIB = 2**20

aten = torch.ops.aten
COSTLY = {
    aten.convolution.default,
    aten.convolution_backward.default,
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten.baddbmm.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
}
"""The operations whose outputs `arithmetic_skipped()` allocates without computing them."""

SKIPPING: ContextVar[bool] = ContextVar("arithmetic_skipped", default=False)


@contextmanager
def arithmetic_skipped() -> Any:
    """Tensor peaks measured inside the block skip the COSTLY operations' arithmetic (module
    docstring)."""
    token = SKIPPING.set(True)
    try:
        yield
    finally:
        SKIPPING.reset(token)


def allocated_not_computed(func: Any, args: Any, kwargs: dict) -> Any:
    """`func`'s outputs as zeros shaped as its meta kernel shapes them, on its inputs' device."""
    device = tensors_in(args)[0].device

    def meta(t: Tensor) -> Tensor:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")

    def zeros(t: Tensor) -> Tensor:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device).zero_()

    shaped = func(*tree_map_only(Tensor, meta, args), **tree_map_only(Tensor, meta, kwargs))
    return tree_map_only(Tensor, zeros, shaped)


def storage_key(tensor: Tensor) -> tuple[str, int]:
    """Which storage a tensor views: its device and address (views share both)."""
    return str(tensor.device), tensor.untyped_storage().data_ptr()


def tensors_in(value: Any) -> list[Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, Tensor)]


class TensorPeak(TorchDispatchMode):
    """Inside `with TensorPeak() as peak:` the bytes of live new storages are counted; `peak.peak`
    is their largest sum, `peak.live` the sum now (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.tracked: set[tuple[str, int]] = set()
        self.skipping = SKIPPING.get()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.skipping and func in COSTLY:
            out = allocated_not_computed(func, args, kwargs)
        else:
            out = func(*args, **kwargs)
        inputs = {storage_key(t) for t in tensors_in((args, kwargs)) if t.numel()}
        for tensor in tensors_in(out):
            key = storage_key(tensor)
            if tensor.device.type == "meta" or key in inputs or key in self.tracked:
                continue
            self.count(tensor.untyped_storage(), key)
        return out

    def count(self, storage: torch.UntypedStorage, key: tuple[str, int]) -> None:
        size = storage.nbytes()
        self.tracked.add(key)
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self.release, key, size)

    def release(self, key: tuple[str, int], size: int) -> None:
        if key in self.tracked:
            self.tracked.discard(key)
            self.live -= size


class WeightCasts(TorchDispatchMode):
    """Inside `with WeightCasts(weights) as casts:`, `casts.keys` holds the live storages made by
    casting one of `weights` to another dtype (autocast's copies, module docstring)."""

    def __init__(self, weights: Iterable[Tensor]) -> None:
        super().__init__()
        self.weights = {storage_key(t) for t in weights}
        self.keys: set[tuple[str, int]] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and storage_key(args[0]) in self.weights:
            key = storage_key(out)
            self.keys.add(key)
            weakref.finalize(out.untyped_storage(), self.keys.discard, key)
        return out


@contextmanager
def saved_for_backward(exclude: Iterable[Tensor] = ()) -> Any:
    """Counts what autograd saves inside the block: yields a dict whose `bytes` is the sum over
    distinct storages, those of `exclude` (weights) left out, and `fixed` the part of it that
    is copies of `exclude` in another dtype (module docstring)."""
    exclude = list(exclude)
    skip = {storage_key(t) for t in exclude}
    seen: set[tuple[str, int]] = set()
    total = {"bytes": 0, "fixed": 0}

    def pack(tensor: Tensor) -> Tensor:
        key = storage_key(tensor)
        if key not in skip and key not in seen:
            seen.add(key)
            size = tensor.untyped_storage().nbytes()
            total["bytes"] += size
            total["fixed"] += size if key in casts.keys else 0
        return tensor

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
    with WeightCasts(exclude) as casts, hooks:
        yield total


def device_peak(device: torch.device, run: Callable[[], Any]) -> int:
    """Peak bytes that `run()` allocates on `device` above what was allocated before: the CUDA
    allocator's own figure on a GPU, `TensorPeak`'s elsewhere."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with TensorPeak() as tracker:
        run()
    return tracker.peak


def free_bytes(device: torch.device) -> int:
    """Memory a fit or evaluation may still allocate on `device`: the GPU's free memory, or the
    machine's available memory for the CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def module_bytes(*modules: torch.nn.Module) -> int:
    """Bytes of the modules' parameters and buffers (each storage once)."""
    seen: dict[tuple[str, int], int] = {}
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            seen[storage_key(tensor)] = tensor.untyped_storage().nbytes()
    return sum(seen.values())


MARGIN = 0.15
"""Share of a device's free memory a plan leaves unplanned (predictions' tolerance)."""


def halvings(size: int) -> list[int]:
    """`size`, then halvings (rounded up) down to 1: the sizes worth trying, largest first."""
    sizes = [size]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // 2))
    return sizes


@dataclass(frozen=True)
class PassCost:
    """What a pass without gradients holds on a device: its peak bytes at one sample (`one`) and
    what each further sample adds (`per_sample`), linear in between and beyond:
    p(b) = one + (b − 1)·per_sample."""

    one: int
    per_sample: int

    @classmethod
    def measured(cls, run: Callable[[int], Any], device: torch.device) -> "PassCost":
        """The cost of `run(samples)`, measured at one and two samples."""
        with torch.no_grad():
            one = device_peak(device, lambda: run(1))
            two = device_peak(device, lambda: run(2))
        return cls(one, max(two - one, 1))

    def batch(self, device: torch.device, cap: int) -> int:
        """The largest of `halvings(cap)` samples predicted to fit the device's free memory with
        MARGIN left (1 when none is)."""
        budget = free_bytes(device) * (1 - MARGIN)
        return next((b for b in halvings(cap) if self.one + (b - 1) * self.per_sample <= budget), 1)


Measure = Callable[[Callable[[int], Any], torch.device], PassCost]


def resolved_batch(
    setting: int | str,
    run: Callable[[int], Any],
    samples: int,
    device: torch.device,
    cap: int,
    measure: Measure = PassCost.measured,
) -> int:
    """A batch-size setting: a number as it is, "auto" as the most samples (at most `samples` and
    `cap`) a pass of `run` is predicted to hold (`PassCost`; `measure` may give one measured
    before)."""
    if setting != "auto":
        return int(setting)
    if samples < 2:
        return max(1, samples)
    return measure(run, device).batch(device, min(samples, cap))
