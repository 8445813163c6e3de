"""An update's cost as counted work, so that `checkpoint: auto` and `doctor --memory` name the
same settings for the same inputs: no single timing decides between settings that both fit.

A backbone call in an update costs FORWARDS[checkpoint] forwards of its rows: its forward, its
backward (about two forwards: the gradients to its input and to its activations), and what
backward computes again (a whole forward for `calls` and `blocks`, the cheap operations' share
of one for `selective`). A call also costs a fixed time whatever its rows (a GPU's kernel
launches at small batches), counted as `fixed_rows` rows. An update of B samples in passes of
b, with R backbone rows per sample over a rollout, costs

    W = FORWARDS[checkpoint] · R · (⌈B/b⌉ · fixed_rows + B)      forwards of one row

`fixed_rows` = t_0 / t_1 of a call's time t(n) = t_0 + n · t_1, from the medians of REPEATS
timings of a call (without gradients) at one and at WIDE rows on a GPU, rounded to a power of two (0 under 1/√2):
timing noise that moves the ratio by less than a factor √2 from a power of two leaves it as it
is. On a CPU, whose calls take time per row, it is 0 and nothing is timed, so a probe there (the
doctor's, planning for a GPU) ranks by counted forwards alone. Settings of equal W are ranked by
the order of their checkpoints in FORWARDS, then by fewer passes.
"""

import math
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

FORWARDS = {"none": 3.0, "selective": 3.5, "calls": 4.0, "blocks": 4.0}
"""Forwards of one row per call and row of an update (module docstring); `selective` computes
again only the elementwise and normalising operations between the kept matmuls and
convolutions, counted as half a forward."""

REPEATS = 5
"""Timings per row count whose median is the call's time."""

WIDE = 4
"""The rows of the second timed call: t_1 = (t(WIDE) − t(1)) / (WIDE − 1)."""

MOST_FIXED_ROWS = 4096
"""The cap of `fixed_rows` (a call whose second row costs nothing measurable)."""


def update_work(checkpoint: str, rows: int, batch: int, samples: int, fixed_rows: int) -> float:
    """W of an update of `batch` samples in passes of `samples` (module docstring); `rows`: R."""
    passes = math.ceil(batch / samples)
    return FORWARDS[checkpoint] * rows * (passes * fixed_rows + batch)


def timed(device: torch.device, run: Callable[[], Any]) -> float:
    """Wall seconds of `run()`, the device's queue drained before and after."""
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    synchronize()
    start = time.perf_counter()
    run()
    synchronize()
    return time.perf_counter() - start


def fixed_rows(device: torch.device, call_at: Callable[[int], Any]) -> int:
    """A call's fixed time in rows (module docstring): `call_at(n)` runs a call of n rows."""
    if device.type != "cuda":
        return 0
    one, wide = (median_time(device, partial(call_at, rows)) for rows in (1, WIDE))
    per_row = (wide - one) / (WIDE - 1)
    return rounded_ratio(one - per_row, per_row)


def median_time(device: torch.device, run: Callable[[], Any]) -> float:
    """The median of REPEATS timings of `run()`."""
    return statistics.median(timed(device, run) for _ in range(REPEATS))


def rounded_ratio(fixed: float, per_row: float) -> int:
    """fixed / per_row rounded to a power of two, 0 under 1/√2, at most MOST_FIXED_ROWS."""
    if fixed <= 0:
        return 0
    if per_row <= 0 or fixed / per_row >= MOST_FIXED_ROWS:
        return MOST_FIXED_ROWS
    power = round(math.log2(fixed / per_row))
    return 0 if power < 0 else 2**power
