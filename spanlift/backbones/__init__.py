"""Frozen model adapters, each giving a denoiser D(x, σ) in EDM σ-form. Knows nothing of Ray or MLflow."""

from spanlift.backbones import digits, gmm, latent_nowcast, nowcast  # noqa: F401
from spanlift.backbones.base import Backbone
from spanlift.backbones.registry import BACKBONES


def load_backbone(name: str, **options: object) -> Backbone:
    """The registered backbone `name`, built with its options (e.g. weights=<file>)."""
    return BACKBONES.get(name)(**options)


__all__ = ["BACKBONES", "Backbone", "load_backbone"]
