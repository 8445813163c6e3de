"""lpips: LPIPS (Zhang et al. 2018, AlexNet, v0.1) between solver samples and the teacher's,
per seed,

    lpips = (1/N) Σ_n d(x_n, x_n^teacher),   the teacher sampling the same seed n;

with observations (nowcasting), the mean over frames of d(forecast frame, observed frame).

The `lpips` package ships its calibration layers; its AlexNet backbone is torchvision's ImageNet
weights (`alexnet-owt-7be5be79.pth`), which torchvision would download. Offline, they come from
torch's hub cache (`$TORCH_HOME/hub/checkpoints/`) or from a path the user gives. Without them
LPIPS is unavailable, with the reason: it is never computed on a randomly initialised backbone.

AlexNet's stride-4 stem leaves almost nothing of small images (16×16 digits), so images under
`MIN_SIZE` pixels are upsampled bilinearly to it first; both sides of a pair get the same resize.
"""

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.errors import CheckpointError, MetricUnavailable
from spanlift.files import file_sha256
from spanlift.platform.detectors.images import check_samples
from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    Finished,
    Host,
    Options,
    Row,
    SampleMetric,
    Setup,
    Traits,
)
from spanlift.platform.evaluation.metrics.states import MeanState

if TYPE_CHECKING:  # lpips imports torchvision (1.3 s): loaded only where LPIPS is computed
    import lpips

NAME = "lpips"
ALEXNET_FILE = "alexnet-owt-7be5be79.pth"
ALEXNET_CONVS = 5
MIN_SIZE = 64


def alexnet_weights(path: Path | None = None) -> Path:
    """The AlexNet weights file: `path`, else torch's hub cache; MetricUnavailable when absent."""
    candidate = Path(path) if path else Path(torch.hub.get_dir()) / "checkpoints" / ALEXNET_FILE
    if not candidate.is_file():
        raise MetricUnavailable(
            f"LPIPS unavailable: AlexNet weights {candidate} not found; copy torchvision's "
            f"{ALEXNET_FILE} there or pass its path"
        )
    return candidate


def lpips_identity(weights: Path) -> str:
    """`alexnet:<sha256[:12]>` of the weights file: what an LPIPS value was measured with."""
    return f"alexnet:{file_sha256(weights)[:12]}"


def load_lpips(weights: Path) -> "lpips.LPIPS":
    """LPIPS with its shipped calibration and the AlexNet feature weights read from `weights`."""
    import lpips

    with warnings.catch_warnings():  # torchvision's note on lpips' deprecated `pretrained=`
        warnings.simplefilter("ignore", UserWarning)
        model = lpips.LPIPS(net="alex", pnet_rand=True, verbose=False)  # backbone filled below
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"cannot read AlexNet weights {weights}: {exc}") from None
    modules = {
        name: module
        for slice_ in model.net.children()  # slice1 … slice5, named by AlexNet feature index
        for name, module in slice_.named_children()
    }
    loaded = 0
    with torch.no_grad():
        for key, value in state.items():
            parts = key.split(".")
            if parts[0] != "features" or parts[1] not in modules:
                continue
            target = getattr(modules[parts[1]], parts[2])
            if target.shape != value.shape:
                raise CheckpointError(
                    f"{weights}: {key} has shape {tuple(value.shape)}, expected {tuple(target.shape)}"
                )
            target.copy_(value)
            loaded += 1
    if loaded != 2 * ALEXNET_CONVS:
        raise CheckpointError(
            f"{weights}: {loaded} of the {2 * ALEXNET_CONVS} AlexNet feature tensors found "
            "(expected torchvision's alexnet state dict)"
        )
    return model.eval().requires_grad_(False)


def lpips_input(images: Tensor) -> Tensor:
    """[-1, 1] samples as LPIPS takes them: clipped, three channels, at least MIN_SIZE pixels."""
    check_samples(images)
    images = images.clamp(-1, 1)
    images = images.expand(-1, 3, -1, -1) if images.shape[1] == 1 else images
    height, width = images.shape[-2:]
    if min(height, width) < MIN_SIZE:
        scale = MIN_SIZE / min(height, width)
        size = (round(height * scale), round(width * scale))
        images = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
    return images


@torch.no_grad()
def lpips_state(model: "lpips.LPIPS", samples: Tensor, teacher: Tensor) -> MeanState:
    """Summed LPIPS of each sample against the teacher's sample from the same seed."""
    distances = model(lpips_input(samples), lpips_input(teacher)).flatten()
    return MeanState(float(distances.double().sum()), len(distances))


@torch.no_grad()
def frame_lpips(model: "lpips.LPIPS", forecast: Tensor, observed: Tensor) -> MeanState:
    """Summed LPIPS of each forecast frame against the observed one, frames as grey images."""
    per_frame = (*forecast.shape[:2], 1, *forecast.shape[2:])
    return lpips_state(
        model, forecast.reshape(per_frame).flatten(0, 1), observed.reshape(per_frame).flatten(0, 1)
    )


@dataclass(frozen=True)
class LpipsOptions(Options):
    lpips_weights: Path | None = None
    """AlexNet weights for LPIPS; None: torch's hub cache
    (~/.cache/torch/hub/checkpoints/alexnet-owt-7be5be79.pth)."""


@METRICS.register(NAME)
class Lpips(SampleMetric):
    Options = LpipsOptions
    rows = (
        Row(
            NAME,
            "min",
            "LPIPS against the teacher's sample of the same seed",
            (f"{NAME}.detector", f"{NAME}.reference", "eval.samples"),
        ),
    )

    @classmethod
    def networks(cls, params: Mapping[str, str]) -> frozenset[str]:
        return frozenset({"alexnet"})

    def measures(self, setup: Setup, traits: Traits) -> dict[str, Any]:
        """The AlexNet weights and what the samples are compared with; MetricUnavailable
        without the weights."""
        teacher = setup.teacher
        reference = f"teacher {teacher.label()} nfe={teacher.nfe}, same seeds"
        if traits.observed:
            reference = f"observed frames of {traits.identity}, per frame"
        return {
            f"{NAME}.detector": lpips_identity(alexnet_weights(self.options.lpips_weights)),
            f"{NAME}.reference": reference,
        }

    def load(self, host: Host) -> "lpips.LPIPS":
        return load_lpips(alexnet_weights(self.options.lpips_weights)).to(host.device)

    def state(self, batch: Batch, network: "lpips.LPIPS") -> MeanState:
        if batch.observed is not None:
            return frame_lpips(network, batch.samples, batch.observed)
        return lpips_state(network, batch.samples, batch.teacher)

    def finish(self, state: MeanState, prepared: Any, done: Done) -> Finished:
        against = done.measures.get(f"{NAME}.reference", "")
        line = f"{NAME} {state.mean:.4f}" + (f"  (against {against})" if against else "")
        return Finished({NAME: state.mean}, lines=(line,))
