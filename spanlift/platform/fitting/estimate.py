"""What a `spanlift fit` will cost before it starts: the denoiser evaluations it has counted,
times one evaluation's measured seconds.

Counted, in evaluations of one sample (a backward pass taken as BACKWARD forward ones):

    teacher      seeds not yet cached × the teacher's NFE
    each fit     stages × (iterations × batch × NFE × (1 + BACKWARD)
                           + validations × first validation block × NFE)
    scoring      (test seeds + first validation block) × NFE, per replicate

with two stages for a solver on a base that is fitted first (SpanLift on DyWeight), and the
validation blocks after the first left out: the sequential rule adds them only for a comparison
it cannot decide on the first. One evaluation's seconds are measured on a sampling batch of the
backbone at σ_max (the fastest of three calls after two warm-ups) in the machine's present state,
for the teacher on the process's threads and for the fits on theirs (one each when replicates
run side by side, which divide the fits' part).
"""

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.platform.fitting.settings import FitSettings
from spanlift.platform.results.fit_cache import FitCache
from spanlift.platform.sampling.teacher import teacher_folder
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import base_spec, build, is_learnable, needs_fitted_base

BACKWARD = 2.0
"""Forward evaluations one backward pass costs, roughly."""


@dataclass(frozen=True)
class Work:
    """Evaluations of one sample a command has counted, by part."""

    teacher: float
    fits: float
    scoring: float

    def seconds(self, per_evaluation: float, side_by_side: int, per_fit_evaluation: float) -> float:
        """Wall seconds: the teacher at `per_evaluation`, then the fits and their scoring
        `side_by_side` at once, each at `per_fit_evaluation` (measured on their threads)."""
        fitting = (self.fits + self.scoring) / side_by_side
        return per_evaluation * self.teacher + per_fit_evaluation * fitting


def fit_work(
    settings: FitSettings,
    nfe: int,
    stages: int,
    replicates: int,
    first_block: int,
) -> float:
    """The evaluations of `replicates` fits of `stages` stages each (module docstring)."""
    validations = math.ceil(settings.iterations / settings.validate_every) + 1
    updates = settings.iterations * settings.batch_size * nfe * (1 + BACKWARD)
    return replicates * stages * (updates + validations * first_block * nfe)


@torch.no_grad()
def seconds_per_evaluation(
    backbone: Backbone, largest: int = 256, threads: int | None = None
) -> float:
    """One denoiser evaluation of one sample: the fastest of three timed calls (after two
    warm-ups: a fresh process's first calls set up its kernels) on a sampling batch of the
    backbone (at most `largest`) at σ_max, on `threads` torch threads (default: as they are)."""
    if threads is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return seconds_per_evaluation(backbone, largest)
        finally:
            torch.set_num_threads(before)
    batch = min(largest, backbone.sampling_batch())
    noise = torch.randn(batch, *backbone.shape, generator=torch.Generator().manual_seed(0))
    x = backbone.prior(noise.to(backbone.device))
    sigma = torch.tensor(float(backbone.sigma_max), device=x.device)
    cond = backbone.conditioning(range(batch))
    denoiser = conditioned(backbone, None if cond is None else cond.to(x.device))
    denoiser(x, sigma)
    denoiser(x, sigma)
    timed = []
    for _ in range(3):
        started = time.perf_counter()
        denoiser(x, sigma)
        timed.append(time.perf_counter() - started)
    return min(timed) / batch


def said(seconds: float) -> str:
    """`about 4 min`, `about 40 s`."""
    return f"about {seconds / 60:.0f} min" if seconds >= 90 else f"about {seconds:.0f} s"


def stages_to_fit(spec: SolverSpec, backbone: Backbone, cache: FitCache | None) -> int:
    """The fits `spec` still needs in `cache` (None: an empty one): its fitted base's (when
    missing), then its own (when it is learnable and missing)."""
    if needs_fitted_base(spec, backbone):
        base = None if cache is None else cache.find(base_spec(spec))
        if base is None:
            return 2
        spec = replace(spec, settings={**spec.settings, "base_checkpoint": str(base)})
    if not is_learnable(build(spec, backbone)):
        return 0
    return 0 if cache is not None and cache.find(spec) else 1


def uncached_seeds(
    folder: Path, backbone: Backbone, seed_sets: list[range], teacher: SolverSpec
) -> int:
    """The seeds of `seed_sets` whose teacher entries are not in the cache `folder`."""
    missing = [s for s in seed_sets if not teacher_folder(folder, backbone, teacher, s).exists()]
    return sum(len(s) for s in missing)
