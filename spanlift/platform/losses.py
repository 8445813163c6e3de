"""Endpoint losses ℓ(student, teacher) for teacher matching; a loss is chosen by name.

A registered factory receives the backbone (so feature losses can build their extractor once) and
returns a function of (student endpoints, teacher endpoints) → scalar.
"""

from collections.abc import Callable

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
