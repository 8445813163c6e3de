"""Endpoint losses ℓ(student, teacher) for teacher matching; a loss is chosen by name.

A registered factory receives the backbone (so feature losses can build their extractor once) and
returns a function of (student endpoints, teacher endpoints) → scalar.

    mse        ℓ = mean (x̂ − x*)²                           over samples and pixels
    inception  ℓ = mean (φ(D(x̂)) − φ(D(x*)))²               φ: FID's Inception pool features
    digits     the same with the digits detector's features  (fast; the digits backbone)

D is the backbone's decoder; φ reads the decoded images as the FID protocol does (x · 127.5 + 128,
clipped) but without rounding, so gradients reach the solver. Feature losses fit what FID measures.
"""

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.registry import Registry

LossFn = Callable[[Tensor, Tensor], Tensor]
LOSSES: Registry[Callable[[Backbone], LossFn]] = Registry("loss")


def mean_squared_error(student: Tensor, teacher: Tensor) -> Tensor:
    """ℓ = mean over samples and pixels of (x̂ − x*)²."""
    return (student - teacher).square().mean()


@LOSSES.register("mse")
def mse(backbone: Backbone) -> LossFn:
    return mean_squared_error


def feature_mse(detector_name: str, backbone: Backbone) -> LossFn:
    """ℓ = mean over samples and features of (φ(D(x̂)) − φ(D(x*)))², φ the named FID detector."""
    from spanlift.platform.evaluation.detectors import load_detector  # torch-fidelity: on demand

    with tempfile.TemporaryDirectory() as folder:  # Inception's one-off weight conversion
        detector = load_detector(detector_name, Path(folder))
    detector.extractor.eval().requires_grad_(False)

    def loss(student: Tensor, teacher: Tensor) -> Tensor:
        detector.to(student.device)
        with torch.no_grad():
            target = detector.float_features(backbone.decode(teacher))
        return (detector.float_features(backbone.decode(student)) - target).square().mean()

    return loss


@LOSSES.register("inception")
def inception_features(backbone: Backbone) -> LossFn:
    return feature_mse("inception", backbone)


@LOSSES.register("digits")
def digits_features(backbone: Backbone) -> LossFn:
    return feature_mse("digits", backbone)
