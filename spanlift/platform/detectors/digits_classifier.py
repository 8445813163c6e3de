"""What the digits FID detectors share; only the classifier's architecture differs between them.

Inception scores about 4.5 images/s on a 2-core CPU; on MNIST-like data FID is customarily
computed with a small classifier's penultimate features instead (the LeNet practice). A digits
detector is a classifier of 16×16 digits, `body` (image → D penultimate features, which serve FID)
then a linear `head` (D → 10 class logits), described by a `DigitsDetectorSpec`:

    digits       (digits_detector.py)       the fitting loss's detector, 64-d features
    digits_eval  (digits_eval_detector.py)  an independent one for evaluation, 96-d features

Each is trained by `spanlift train-digits-detector --detector <name>` (train_digits_detector.py)
into a checkpoint `{model: state dict, train: settings and held-out accuracy}` and registered in
torch-fidelity under its own extractor name, so, like every torch-fidelity extractor, it takes
uint8 images [N, 3, H, W] and undoes the EDM protocol itself: x = (pixel − 128) / 127.5 on the
first channel, resized to 16×16 when the images are of another size.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_fidelity.feature_extractor_base import FeatureExtractorBase
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY, register_feature_extractor

from spanlift.backbones.weights import read_weights
from spanlift.errors import CheckpointError

IMAGE_SIZE = 16
CLASSES = 10
WEIGHTS_DIR = Path(__file__).parent / "weights"


class DigitsClassifier(nn.Module):
    """1×16×16 image → `body` → [N, features] → linear `head` → [N, 10] class logits."""

    def __init__(self, body: nn.Module, features: int) -> None:
        super().__init__()
        self.body = body
        self.head = nn.Linear(features, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


@dataclass(frozen=True)
class DigitsDetectorSpec:
    """One digits detector: its names, its architecture, its data split and its training seed.

    The split: the 1 797 scikit-learn digits in the order `torch.randperm(1797,
    generator=torch.Generator().manual_seed(split_seed))`, cut at 80 % (1 437 | 360 images);
    `held_out` says which part is held out, the `last` 360 or the `first` 360, and the other part
    is trained on.
    """

    name: str  # the detector's name in `detectors.DETECTORS`
    body: Callable[[], nn.Module]  # a new, untrained body: 1×16×16 → `features`
    features: int
    held_out: Literal["first", "last"]
    split_seed: int = 0
    seed: int = 0  # training: initialisation, batches, augmentation

    @property
    def extractor(self) -> str:
        """Its name in torch-fidelity's registry: `spanlift-digits`, `spanlift-digits-eval`."""
        return "spanlift-" + self.name.replace("_", "-")

    @property
    def weights(self) -> Path:
        """The committed checkpoint, `weights/<name>_detector.pt`."""
        return WEIGHTS_DIR / f"{self.name}_detector.pt"

    def classifier(self) -> DigitsClassifier:
        return DigitsClassifier(self.body(), self.features)

    def remedy(self, path: Path) -> str:
        """How to make the weights file `path`."""
        option = "" if self.name == "digits" else f" --detector {self.name}"
        return f"create them with `spanlift train-digits-detector{option} --out {path}`"


def load_classifier(spec: DigitsDetectorSpec, path: Path | None = None) -> DigitsClassifier:
    """The trained classifier of `spec` from `path` (default: its committed weights), read with
    `weights_only=True`, in eval mode and frozen."""
    path = Path(path or spec.weights)
    what = f"{spec.name} detector"
    state = read_weights(path, what, spec.remedy(path))
    classifier = spec.classifier()
    try:
        classifier.load_state_dict(state["model"])
    except Exception as exc:
        raise CheckpointError(f"cannot read {what} weights {path}: {exc}") from None
    return classifier.eval().requires_grad_(False)


def to_classifier_input(pixels: Tensor) -> Tensor:
    """uint8 (or float) pixels [N, 3, H, W] in [0, 255] → [N, 1, 16, 16] in [-1, 1]."""
    x = (pixels[:, :1].float() - 128) / 127.5
    if x.shape[-2:] != (IMAGE_SIZE, IMAGE_SIZE):
        x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", antialias=True)
    return x


class DigitsFeatureExtractor(FeatureExtractorBase):
    """torch-fidelity extractor of the detector `spec`: uint8 [N, 3, H, W] → (the D penultimate
    features, named "D", and "logits"). Differentiable in float pixels, too (feature losses).

    A subclass names its detector, `class X(DigitsFeatureExtractor, spec=SPEC)`, and is registered
    in torch-fidelity under `SPEC.extractor` by being defined."""

    spec: ClassVar[DigitsDetectorSpec]

    def __init_subclass__(cls, spec: DigitsDetectorSpec, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.spec = spec
        if spec.extractor not in FEATURE_EXTRACTORS_REGISTRY:
            register_feature_extractor(spec.extractor, cls)

    def __init__(
        self,
        name: str,
        features_list: list[str],
        feature_extractor_weights_path: str | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(name, features_list)
        weights = Path(feature_extractor_weights_path) if feature_extractor_weights_path else None
        self.classifier = load_classifier(self.spec, weights)

    def forward(self, pixels: Tensor) -> tuple[Tensor, ...]:
        features = self.classifier.body(to_classifier_input(pixels))
        out = {str(self.spec.features): features, "logits": self.classifier.head(features)}
        return tuple(out[name] for name in self.features_list)

    @classmethod
    def get_provided_features_list(cls) -> tuple[str, ...]:
        return str(cls.spec.features), "logits"

    @classmethod
    def get_default_feature_layer_for_metric(cls, metric: str) -> str:
        return "logits" if metric == "isc" else str(cls.spec.features)

    @staticmethod
    def can_be_compiled() -> bool:
        return False

    @staticmethod
    def get_dummy_input_for_compile() -> Tensor:
        return torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
