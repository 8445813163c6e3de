"""Endpoint losses ℓ(student, teacher) for teacher matching; a loss is chosen by name.

A registered factory receives the decoder D from samples to data (the backbone's `decode`; the
identity when the fit already compares decoded data with observations), builds what it needs
once (a feature extractor) and returns a function of (student, target) → scalar.

    mse        ℓ = mean (x̂ − x*)²                           over samples and pixels
    inception  ℓ = mean (φ(D(x̂)) − φ(D(x*)))²               φ: FID's Inception pool features
    digits     the same with the digits detector's features  (fast; the digits backbone)
    pooled     ℓ = Σ_{p ∈ 1, 4, 16} mean (M_p D(x̂) − M_p D(x*))²   M_p: p×p max-pooling

φ reads the decoded images as the FID protocol does (x · 127.5 + 128, clipped) but without
rounding, so gradients reach the solver. Feature losses fit what FID measures; `pooled` fits what
the nowcasting scores CSI, CSI-4 and CSI-16 measure (fields max-pooled by 1, 4 and 16), cheaply.
"""

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.registry import Registry

LossFn = Callable[[Tensor, Tensor], Tensor]
Decode = Callable[[Tensor], Tensor]
LOSSES: Registry[Callable[[Decode], LossFn]] = Registry("loss")


def mean_squared_error(student: Tensor, teacher: Tensor) -> Tensor:
    """ℓ = mean over samples and pixels of (x̂ − x*)²."""
    return (student - teacher).square().mean()


@LOSSES.register("mse")
def mse(decode: Decode) -> LossFn:
    return mean_squared_error


def feature_mse(detector_name: str, decode: Decode) -> LossFn:
    """ℓ = mean over samples and features of (φ(D(x̂)) − φ(D(x*)))², φ the named FID detector."""
    from spanlift.platform.evaluation.detectors import load_detector  # torch-fidelity: on demand

    with tempfile.TemporaryDirectory() as folder:  # Inception's one-off weight conversion
        detector = load_detector(detector_name, Path(folder))
    detector.extractor.eval().requires_grad_(False)

    def loss(student: Tensor, teacher: Tensor) -> Tensor:
        detector.to(student.device)
        with torch.no_grad():
            target = detector.float_features(decode(teacher))
        return (detector.float_features(decode(student)) - target).square().mean()

    return loss


@LOSSES.register("inception")
def inception_features(decode: Decode) -> LossFn:
    return feature_mse("inception", decode)


@LOSSES.register("digits")
def digits_features(decode: Decode) -> LossFn:
    return feature_mse("digits", decode)


POOLS = (1, 4, 16)


@LOSSES.register("pooled")
def pooled_fields(decode: Decode) -> LossFn:
    """Σ_p mean (M_p D(x̂) − M_p D(x*))² over the pools that divide the field's size."""

    def loss(student: Tensor, target: Tensor) -> Tensor:
        student, target = decode(student), decode(target)
        pools = [p for p in POOLS if student.shape[-1] % p == 0 and student.shape[-2] % p == 0]
        return sum(
            (F.max_pool2d(student, p) - F.max_pool2d(target, p)).square().mean() for p in pools
        )

    return loss
