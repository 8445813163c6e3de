"""LPIPS (Zhang et al. 2018, AlexNet, v0.1) between solver samples and the teacher's, per seed.

The `lpips` package ships its calibration layers; its AlexNet backbone is torchvision's ImageNet
weights (`alexnet-owt-7be5be79.pth`), which torchvision would download. Offline, they come from
torch's hub cache (`$TORCH_HOME/hub/checkpoints/`) or from a path the user gives. Without them
LPIPS is unavailable, with the reason: it is never computed on a randomly initialised backbone.
"""

import warnings
from dataclasses import dataclass
from pathlib import Path

import lpips
import torch
from torch import Tensor

from spanlift.errors import CheckpointError
from spanlift.platform.evaluation.images import check_samples

ALEXNET_FILE = "alexnet-owt-7be5be79.pth"
ALEXNET_CONVS = 5


class MetricUnavailable(Exception):
    """A metric that cannot be computed here; the message says why and how to enable it."""


def alexnet_weights(path: Path | None = None) -> Path:
    """The AlexNet weights file: `path`, else torch's hub cache; MetricUnavailable when absent."""
    candidate = Path(path) if path else Path(torch.hub.get_dir()) / "checkpoints" / ALEXNET_FILE
    if not candidate.is_file():
        raise MetricUnavailable(
            f"LPIPS unavailable: AlexNet weights {candidate} not found; copy torchvision's "
            f"{ALEXNET_FILE} there or pass its path"
        )
    return candidate


def load_lpips(weights: Path) -> lpips.LPIPS:
    """LPIPS with its shipped calibration and the AlexNet feature weights read from `weights`."""
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


def as_rgb(images: Tensor) -> Tensor:
    check_samples(images)
    images = images.clamp(-1, 1)
    return images.expand(-1, 3, -1, -1) if images.shape[1] == 1 else images


@dataclass(frozen=True)
class MeanState:
    """A mergeable average: sum and count."""

    total: float = 0.0
    count: int = 0

    def merge(self, other: "MeanState") -> "MeanState":
        return MeanState(self.total + other.total, self.count + other.count)

    @property
    def mean(self) -> float:
        return self.total / self.count


@torch.no_grad()
def lpips_state(model: lpips.LPIPS, samples: Tensor, teacher: Tensor) -> MeanState:
    """Summed LPIPS of each sample against the teacher's sample from the same seed."""
    distances = model(as_rgb(samples), as_rgb(teacher)).flatten()
    return MeanState(float(distances.double().sum()), len(distances))
