"""psnr: the peak signal-to-noise ratio of each decoded sample against the teacher's sample from
the same seed, in dB, averaged over the samples:

    MSE_n  = (1/D) Σ_d (x_{n,d} − x*_{n,d})²      over the D values (channels × pixels) of sample n
    PSNR_n = 10 log10(R² / MSE_n),   R = 2       the range of samples in [−1, 1]: R² = 4
    psnr   = (1/N) Σ_n PSNR_n

Samples and teacher samples are decoded and clipped to [−1, 1] as every sample metric reads them
(the teacher's come from its own rollout of the seed's noise, as LPIPS's do). A sample equal to
its teacher's has PSNR_n = +∞, and so has the mean. Higher is better: the endpoint is closer to
the teacher's.
"""

from typing import Any

import torch
from torch import Tensor

from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    Finished,
    Row,
    SampleMetric,
    Setup,
    Traits,
)
from spanlift.platform.evaluation.metrics.states import MeanState

NAME = "psnr"
PEAK_SQUARED = 4.0
"""R² for samples in [−1, 1]."""


@torch.no_grad()
def psnr_state(samples: Tensor, teacher: Tensor) -> MeanState:
    """The summed PSNR_n of the samples against the teacher's (module docstring)."""
    errors = (samples.double() - teacher.double()).square().flatten(1).mean(dim=1)
    return MeanState(float((10 * torch.log10(PEAK_SQUARED / errors)).sum()), len(samples))


@METRICS.register(NAME)
class Psnr(SampleMetric):
    rows = (
        Row(
            NAME,
            "max",
            "PSNR in dB against the teacher's sample of the same seed, mean over samples",
            (f"{NAME}.reference", "eval.samples"),
        ),
    )

    def measures(self, setup: Setup, traits: Traits) -> dict[str, Any]:
        teacher = setup.teacher
        return {f"{NAME}.reference": f"teacher {teacher.label()} nfe={teacher.nfe}, same seeds"}

    def state(self, batch: Batch, network: Any) -> MeanState:
        return psnr_state(batch.samples, batch.teacher)

    def finish(self, state: MeanState, prepared: Any, done: Done) -> Finished:
        against = done.measures[f"{NAME}.reference"]
        line = f"{NAME} {state.mean:.4f} dB  (against {against})"
        return Finished({NAME: state.mean}, lines=(line,))
