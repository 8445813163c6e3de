"""Train the digits FID detector: cross-entropy on scikit-learn's digits, 80/20 split.

Training images are shifted by up to one pixel and noised (σ ~ U(0, 0.2)) so the features stay
stable on generated samples, which are never quite clean. The held-out accuracy is stored in the
checkpoint and printed.

Usage: spanlift train-digits-detector --out spanlift/platform/evaluation/weights/digits_detector.pt
"""

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import Tensor
from tqdm import tqdm

from spanlift.backbones.digits import digits_dataset
from spanlift.platform.evaluation.digits_detector import IMAGE_SIZE, DigitsClassifier

MAX_NOISE = 0.2


def split(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(train images, train labels, test images, test labels) from a seeded 80/20 permutation."""
    images = digits_dataset(IMAGE_SIZE)
    labels = torch.from_numpy(load_digits().target).long()
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(images))
    train, test = order[:cut], order[cut:]
    return images[train], labels[train], images[test], labels[test]


def augment(x: Tensor) -> Tensor:
    """A random shift of −1, 0 or +1 pixels per axis, and Gaussian noise of a random level."""
    dy, dx = torch.randint(-1, 2, (2,)).tolist()
    x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    return x + torch.rand(len(x), 1, 1, 1) * MAX_NOISE * torch.randn_like(x)


@torch.no_grad()
def accuracy(model: DigitsClassifier, images: Tensor, labels: Tensor) -> float:
    return (model.eval()(images).argmax(dim=1) == labels).float().mean().item()


def train_digits_detector(
    out: Path, steps: int = 1500, batch_size: int = 128, lr: float = 2e-3, seed: int = 0
) -> tuple[Path, float]:
    """Train, save `{model, train}` to `out`, return (path, held-out accuracy)."""
    torch.manual_seed(seed)
    train_x, train_y, test_x, test_y = split(seed)
    model = DigitsClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    start = time.perf_counter()
    for _ in (bar := tqdm(range(steps), desc="train digits detector")):
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
    torch.save(
        {
            "model": model.state_dict(),
            "train": settings
            | {"test_accuracy": held_out, "seconds": round(time.perf_counter() - start, 1)},
        },
        out,
    )
    return out, held_out
