"""Frozen model adapters, each giving a denoiser D(x, σ) in EDM σ-form. Knows nothing of Ray or MLflow.

Importing this package imports every module in it, so every backbone registers itself (a new
backbone is found by its file being here).
"""

import inspect

from spanlift.backbones.base import Backbone
from spanlift.backbones.registry import BACKBONES
from spanlift.errors import SettingsError
from spanlift.registry import import_modules


def backbone_options(cls: type[Backbone]) -> dict[str, object]:
    """The options a backbone class accepts and their defaults (its constructor's keywords)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {
        p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY or p.default is not p.empty
    }


def load_backbone(name: str, **options: object) -> Backbone:
    """The registered backbone `name`, built with its options (e.g. weights=<file>); an option it
    does not have is an error that lists the ones it has."""
    cls = BACKBONES.get(name)
    unknown = sorted(set(options) - set(backbone_options(cls)))
    if unknown:
        known = ", ".join(backbone_options(cls)) or "none"
        raise SettingsError(f"backbone {name!r} has no option {unknown[0]!r}; its options: {known}")
    return cls(**options)


import_modules(__name__, __path__)  # last: a module may import the functions above (`loaded`)

__all__ = ["BACKBONES", "Backbone", "backbone_options", "load_backbone"]
