"""A rollout's peak memory with one backbone call run per input shape (the doctor on a CPU).

    peak = the largest live bytes of the rollout (`TensorPeak`), where a backbone call of
           input shapes S that starts with L bytes live reaches L + T(S)
    T(S) = the transient peak of the first call of shapes S above the bytes live at its start
           (its output included), measured by running it

A network allocates by its inputs' shapes, not their values, so every call of shapes S reaches
L + T(S). The first call of each shape runs; a later one returns a copy of that call's output
(allocated where the real output would be) and adds L + T(S) to the count: the peak of running
every call, at one call's compute per shape. On a CPU a SANA-size call takes seconds, and an
evaluation probe makes dozens of them; on a GPU the doctor runs every call.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.platform.sampling.tensor_memory import TensorPeak, device_peak, storage_key


def shapes_of(*args: Any) -> tuple:
    """The shapes and dtypes of a call's tensor arguments (None for a missing one)."""
    return tuple((a.shape, a.dtype) if isinstance(a, Tensor) else a for a in args)


class ReplayedCalls:
    """`peak(run)`: the peak bytes of `run()` with `backbone`'s calls replayed after the first
    of each shape (module docstring). First calls are kept across `peak` calls."""

    def __init__(self, backbone: Backbone) -> None:
        self.backbone = backbone
        self.first: dict[tuple, tuple[int, Tensor]] = {}  # shapes -> (T, the call's output)
        self.calls_run = 0

    def peak(self, run: Callable[[], Any]) -> int:
        real, own = self.backbone.denoise, "denoise" in vars(self.backbone)
        with TensorPeak() as tracker:

            def denoise(x: Tensor, sigma: Tensor, *rest: Any) -> Tensor:
                key, start = shapes_of(x, sigma, *rest), tracker.live
                if key in self.first:
                    transient, output = self.first[key]
                    tracker.peak = max(tracker.peak, start + transient)
                    return output.clone()
                before, tracker.peak = tracker.peak, start
                out = real(x, sigma, *rest)
                self.calls_run += 1
                transient, reached = tracker.peak - start, max(before, tracker.peak)
                self.first[key] = (transient, uncounted_copy(tracker, out))
                tracker.peak = reached
                return out

            self.backbone.denoise = denoise
            try:
                run()
            finally:
                if own:  # a denoise set on the instance before (a wrapper) is put back
                    self.backbone.denoise = real
                else:
                    del self.backbone.denoise
        return tracker.peak


def uncounted_copy(tracker: TensorPeak, tensor: Tensor) -> Tensor:
    """A copy of `tensor` kept for replays, left out of the tracker's live bytes and peak."""
    peak = tracker.peak
    copy = tensor.detach().clone()
    tracker.release(storage_key(copy), copy.untyped_storage().nbytes())
    tracker.peak = peak
    return copy


def rollout_peak(device: torch.device, replayed: ReplayedCalls, run: Callable[[], Any]) -> int:
    """Peak bytes of a rollout `run()`: replayed on a CPU, every call run on a GPU."""
    return device_peak(device, run) if device.type == "cuda" else replayed.peak(run)
