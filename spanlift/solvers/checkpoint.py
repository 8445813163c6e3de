"""Solver checkpoints: the spec and the parameters, written atomically, read with weights_only=True."""

from pathlib import Path, PurePath
from typing import Any

import torch

from spanlift.errors import CheckpointError
from spanlift.files import atomic_write

FORMAT = "spanlift-solver/1"


def atomic_torch_save(obj: Any, path: Path) -> None:
    """`torch.save` through a temporary file: never a partial file at `path`."""
    with atomic_write(path) as partial:
        torch.save(obj, partial)


def as_text_paths(value: Any) -> Any:
    """`value` with every path in it written as text: what `weights_only` reading accepts."""
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, dict):
        return {k: as_text_paths(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(as_text_paths(v) for v in value)
    return value


def save_solver(
    path: Path, solver: torch.nn.Module, metadata: dict[str, Any] | None = None
) -> Path:
    state = {k: v.detach().cpu() for k, v in solver.state_dict().items()}
    payload = {
        "format": FORMAT,
        "spec": as_text_paths(solver.spec.to_dict()),
        "state": state,
        "metadata": metadata or {},
    }
    atomic_torch_save(payload, Path(path))
    return Path(path)


def read_checkpoint(path: Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a spanlift checkpoint: {exc}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a spanlift solver checkpoint ({FORMAT})")
    return payload


def load_solver_state(path: Path, expected: str) -> dict[str, torch.Tensor]:
    payload = read_checkpoint(path)
    name = payload["spec"]["name"]
    if name != expected:
        raise CheckpointError(f"checkpoint {path} holds solver {name!r}, expected {expected!r}")
    return payload["state"]
