"""Train a digits FID detector: cross-entropy on scikit-learn's digits, on its spec's 80/20 split.

Every digits detector trains the same way; only its architecture, split and seed differ (its
`DigitsDetectorSpec`). Training images are shifted by up to one pixel and noised (σ ~ U(0, 0.2))
so the features stay stable on generated samples, which are never quite clean. The held-out
accuracy is stored in the checkpoint and printed.

Usage: spanlift train-digits-detector [--detector digits_eval]
"""

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import Tensor, nn
from tqdm import tqdm

from spanlift.backbones.digits import digits_dataset
from spanlift.platform.detectors.digits_classifier import IMAGE_SIZE, DigitsDetectorSpec

MAX_NOISE = 0.2
TRAIN_FRACTION = 0.8
DIGITS = 1797  # images in scikit-learn's digits


def split_indices(spec: DigitsDetectorSpec, count: int = DIGITS) -> tuple[Tensor, Tensor]:
    """(train, held-out) indices into the digits of `spec`'s split: the seeded permutation cut at
    80 %, its `held_out` part (the first or the last 20 %) held out."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(spec.split_seed))
    held_out = count - int(TRAIN_FRACTION * count)
    if spec.held_out == "last":
        return order[: count - held_out], order[count - held_out :]
    return order[held_out:], order[:held_out]


def split(spec: DigitsDetectorSpec) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(train images, train labels, held-out images, held-out labels) of `spec`'s split."""
    images = digits_dataset(IMAGE_SIZE)
    labels = torch.from_numpy(load_digits().target).long()
    train, test = split_indices(spec, len(images))
    return images[train], labels[train], images[test], labels[test]


def augment(x: Tensor) -> Tensor:
    """A random shift of −1, 0 or +1 pixels per axis, and Gaussian noise of a random level."""
    dy, dx = torch.randint(-1, 2, (2,)).tolist()
    x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    return x + torch.rand(len(x), 1, 1, 1) * MAX_NOISE * torch.randn_like(x)


@torch.no_grad()
def accuracy(model: nn.Module, images: Tensor, labels: Tensor) -> float:
    return (model.eval()(images).argmax(dim=1) == labels).float().mean().item()


def train_digits_detector(
    spec: DigitsDetectorSpec,
    out: Path,
    steps: int = 1500,
    batch_size: int = 128,
    lr: float = 2e-3,
    seed: int | None = None,
) -> tuple[Path, float]:
    """Train `spec`'s classifier (seed: default the spec's), save `{model, train}` to `out`,
    return (path, held-out accuracy)."""
    seed = spec.seed if seed is None else seed
    torch.manual_seed(seed)
    train_x, train_y, test_x, test_y = split(spec)
    model = spec.classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    start = time.perf_counter()
    for _ in (bar := tqdm(range(steps), desc=f"train {spec.name} detector")):
        pick = torch.randint(len(train_x), (batch_size,))
        loss = F.cross_entropy(model.train()(augment(train_x[pick])), train_y[pick])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    held_out = accuracy(model, test_x, test_y)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed}
    data = {"split_seed": spec.split_seed, "held_out": spec.held_out, "test_images": len(test_x)}
    torch.save(
        {
            "model": model.state_dict(),
            "train": settings
            | data
            | {"test_accuracy": held_out, "seconds": round(time.perf_counter() - start, 1)},
        },
        out,
    )
    return out, held_out
