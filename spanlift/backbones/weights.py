"""Reading a backbone's weights file: a missing or unreadable file is an error that says how to
make or provide one, and a digest of the weights names them in the backbone's identity."""

import hashlib
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.unet import UNet, UNetConfig
from spanlift.errors import CheckpointError


def read_weights(path: Path, what: str, remedy: str) -> dict:
    """The checkpoint dict at `path`, read with `weights_only=True`; `remedy` says how to get one."""
    if not path.is_file():
        raise CheckpointError(f"{what} weights not found: {path}; {remedy}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"cannot read {what} weights {path}: {exc}") from None


def weights_digest(state: Mapping[str, Tensor]) -> str:
    """16 hex digits of SHA-256 over the tensors' bytes, in state-dict order."""
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in state.values())).hexdigest()[:16]


def edm_unet(state: dict, path: Path, what: str) -> EDMPrecond:
    """The EDM-preconditioned U-Net a checkpoint describes (`config`, `sigma_data`, `ema`)."""
    config = UNetConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in state["config"].items()}
    )
    model = EDMPrecond(UNet(config), sigma_data=state["sigma_data"])
    try:
        model.load_state_dict(state["ema"])
    except RuntimeError as exc:
        raise CheckpointError(f"{what} weights {path} do not fit the network: {exc}") from None
    return model
