"""Solvers built around a registered base solver (SpanLift, LD3): they keep the base's accounting.

Such a solver holds the base as `self.base` and takes the settings `base` and `base_settings`. It
spends the base's NFE, evaluates the model as the base does (AFS included), and steps on the
base's grid, learned or not.
"""

from typing import Any, ClassVar

from torch import Tensor

from spanlift.solvers.base import Denoiser, Point, Solver
from spanlift.solvers.registry import SOLVERS


class OnBase(Solver):
    """Delegates NFE, evaluation and σ to `self.base`; `default_base` names it when unset."""

    default_base: ClassVar[str]
    base: Solver

    @classmethod
    def build(cls, sigmas: Tensor, channels: int, **settings: Any) -> "OnBase":
        return cls(sigmas, channels=channels, **settings)

    @classmethod
    def nfe_for_steps(cls, steps: int, settings: dict[str, Any], to_zero: bool = False) -> int:
        base = SOLVERS.get(settings.get("base", cls.default_base))
        return base.nfe_for_steps(steps, settings.get("base_settings") or {}, to_zero)

    @property
    def nfe(self) -> int:
        return self.base.nfe

    def sigma(self, i: int, like: Tensor) -> Tensor:
        return self.base.sigma(i, like)

    def evaluate(self, denoiser: Denoiser, x: Tensor, i: int) -> Point:
        return self.base.evaluate(denoiser, x, i)
