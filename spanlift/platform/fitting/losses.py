"""Endpoint losses ℓ(student, teacher) for teacher matching; a loss is chosen by name.

A registered factory receives the decoder D from samples to data (the backbone's `decode`; the
identity when the fit already compares decoded data with observations) and the fit's
`loss_options` as keyword arguments, builds what it needs once (a feature extractor) and returns
a function of (student, target) → scalar.

    mse        ℓ = mean (x̂ − x*)²                           over samples and pixels
    inception  ℓ = mean (φ(D(x̂)) − φ(D(x*)))²               φ: FID's Inception pool features
    digits     the same with the `digits` detector's features  (fast; the digits backbone, whose
               FID defaults to the independent `digits_eval` detector, not this one)
    pooled     ℓ = Σ_{p ∈ 1, 4, 16} mean (M_p D(x̂) − M_p D(x*))²   M_p: p×p max-pooling
    latent     ℓ = c · mean (ẑ − z*)² + mean (f(D(ẑ)) − f(D(z*)))²   f: a frozen DINOv2
    adversarial  ℓ = ℓ_distill + w · mean softplus(−(f(D(x̂)) − f(D(x*))))   f: a discriminator
               trained during the fit (GAS; `adversarial.py`), for image backbones

Under a fit's half precision (`memory.py`) the networks run under autocast and their features are
cast to float32 before the difference and the mean: the reduction stays float32.

φ reads the decoded images as the FID protocol does (x · 127.5 + 128, clipped) but without
rounding, so gradients reach the solver. Feature losses fit what FID measures; `pooled` fits what
the nowcasting scores CSI, CSI-4 and CSI-16 measure (fields max-pooled by 1, 4 and 16), cheaply.

Each loss declares the pretrained networks it fits features of (`PRETRAINED`); a run records them
(`fit.loss_networks`), and the leaderboard marks a value measured with one of them.
"""

import inspect
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from spanlift.errors import SettingsError
from spanlift.registry import Registry

LossFn = Callable[[Tensor, Tensor], Tensor]
Decode = Callable[[Tensor], Tensor]
LOSSES: Registry[Callable[..., LossFn]] = Registry("loss")
"""name → factory(decode, **loss_options) → ℓ"""


def check_loss_options(name: str, options: dict[str, Any]) -> None:
    """Refuse options the loss `name` does not take, and a missing one that it needs (the
    factory's keyword parameters are its options), without building the loss."""
    parameters = list(inspect.signature(LOSSES.get(name)).parameters.values())[1:]  # after decode
    accepted = [p.name for p in parameters]
    takes = f"its options are: {', '.join(accepted)}" if accepted else "it takes no options"
    for key in options:
        if key not in accepted:
            raise SettingsError(f"loss {name!r} has no option {key!r}; {takes}")
    for parameter in parameters:
        if parameter.default is inspect.Parameter.empty and parameter.name not in options:
            raise SettingsError(f"loss {name!r} needs the option {parameter.name!r}; {takes}")


NETWORKS_PARAM = "fit.loss_networks"
"""The run param naming the pretrained networks a fit's loss used (`pretrained_networks`)."""
PRETRAINED: dict[str, tuple[str, ...]] = {
    "mse": (),
    "pooled": (),
    "inception": ("inception",),
    "digits": ("digits",),
    "latent": ("dinov2",),
}
"""The pretrained networks each loss fits features of, named as the metrics name the networks
they measure with (`EvaluationMetric.networks`): a detector's registered name, or `dinov2`."""


def pretrained_networks(name: str, options: dict[str, Any]) -> tuple[str, ...]:
    """The pretrained networks the loss `name` with `options` fits features of; a value measured
    with one of them was partly optimised against itself (the leaderboard marks it). The
    adversarial loss: those of its distillation loss (its critic starts at random)."""
    if name == "adversarial":
        return pretrained_networks(options.get("distill", "mse"), {})
    LOSSES.get(name)  # an unknown name lists the known ones
    return PRETRAINED[name]


def networks_param(name: str, options: dict[str, Any]) -> dict[str, str]:
    """`{fit.loss_networks: "inception"}`: the networks as a run records them, comma-separated
    ("" for none)."""
    return {NETWORKS_PARAM: ",".join(pretrained_networks(name, options))}


def holding(loss: LossFn, *networks: torch.nn.Module) -> LossFn:
    """`loss`, marked with the frozen networks it computes with (`loss.networks`): the weights a
    fit's memory plan counts for it."""
    loss.networks = list(networks)  # type: ignore[attr-defined]
    return loss


def loss_networks(loss: LossFn) -> list[torch.nn.Module]:
    """The networks a loss computes with (`holding`); none for a loss of tensors alone."""
    return list(getattr(loss, "networks", []))


def mean_squared_error(student: Tensor, teacher: Tensor) -> Tensor:
    """ℓ = mean over samples and pixels of (x̂ − x*)²."""
    return (student - teacher).square().mean()


@LOSSES.register("mse")
def mse(decode: Decode) -> LossFn:
    return mean_squared_error


def feature_mse(detector_name: str, decode: Decode) -> LossFn:
    """ℓ = mean over samples and features of (φ(D(x̂)) − φ(D(x*)))², φ the named FID detector."""
    from spanlift.platform.detectors.registry import load_detector  # torch-fidelity: on demand

    with tempfile.TemporaryDirectory() as folder:  # Inception's one-off weight conversion
        detector = load_detector(detector_name, Path(folder))
    detector.extractor.eval().requires_grad_(False)

    def loss(student: Tensor, teacher: Tensor) -> Tensor:
        detector.to(student.device)
        with torch.no_grad():
            target = detector.float_features(decode(teacher)).float()
        return (detector.float_features(decode(student)).float() - target).square().mean()

    return holding(loss, detector.extractor)


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


@LOSSES.register("latent")
def latent_and_dinov2(decode: Decode, dinov2_path: str | Path, c: float = 0.1) -> LossFn:
    """ℓ(ẑ, z*) = c · mean (ẑ − z*)² + mean (f(D(ẑ)) − f(D(z*)))²   (the paper, eq. dino_loss)

    for latent models: ẑ, z* the student's and the teacher's latents, D the backbone's frozen
    decoder, f the CLS features of a frozen DINOv2 read from the local folder `dinov2_path`
    (`dinov2.py`: which features, how images are prepared). The teacher's features carry no
    gradient.

    The paper writes squared norms, sums over a sample's elements; here both terms are means, as
    in the other losses, so c weighs mean squared errors and does not depend on the latent's size.
    A weight c_sum between the paper's sums is c = c_sum · dim z / dim f between these means
    (dim z: latent elements per sample; dim f: feature elements per sample, 768 for dinov2-base).
    """
    from spanlift.platform.fitting.dinov2 import load_dinov2  # transformers: on demand

    if isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c < math.inf:
        raise SettingsError(f"loss 'latent': option c must be a number ≥ 0, got {c!r}")
    if not isinstance(dinov2_path, str | Path) or not str(dinov2_path):
        raise SettingsError(
            f"loss 'latent': option dinov2_path must be a folder, got {dinov2_path!r}"
        )
    features = load_dinov2(dinov2_path)

    def loss(student: Tensor, target: Tensor) -> Tensor:
        features.to(student.device)
        with torch.no_grad():
            target_features = features(decode(target)).float()
        latent = (student - target).square().mean()
        return c * latent + (features(decode(student)).float() - target_features).square().mean()

    return holding(loss, features)


@LOSSES.register("adversarial")
def adversarial(
    decode: Decode,
    distill: str = "mse",
    weight: float = 0.1,
    lr: float = 1e-4,
    gamma: float = 0.2,
    width: int = 32,
) -> LossFn:
    """GAS's loss: the registered loss `distill` plus `weight` times the relativistic term of a
    discriminator of `width` trained with Adam at `lr` and R1/R2 penalty `gamma` (`adversarial.py`).
    GAS weighs the term 0.1 on CIFAR-10 (and 1 on latent models), with γ = 0.2."""
    from spanlift.platform.fitting.adversarial import AdversarialLoss

    if distill == "adversarial":
        raise SettingsError("loss 'adversarial': option distill must name another loss")
    check_loss_options(distill, {})
    for name, value, least in (
        ("weight", weight, "≥ 0"),
        ("lr", lr, "> 0"),
        ("gamma", gamma, "≥ 0"),
    ):
        number = not isinstance(value, bool) and isinstance(value, int | float)
        if not number or not math.isfinite(value) or value < 0 or (value == 0 and least == "> 0"):
            raise SettingsError(
                f"loss 'adversarial': option {name} must be a number {least}, got {value!r}"
            )
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise SettingsError(
            f"loss 'adversarial': option width must be a positive integer, got {width!r}"
        )
    return AdversarialLoss(decode, LOSSES.get(distill)(decode), weight, lr, gamma, width)
