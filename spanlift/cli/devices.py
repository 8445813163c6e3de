"""A `--device` named on a command line, refused at once where torch cannot use it (a CUDA device
on a machine without one), instead of at its first tensor with a traceback."""

import argparse
from typing import Any


def missing_device(name: str) -> str:
    """Why torch cannot use the device `name` here, or '' when it can."""
    import torch

    if torch.device(name).type == "cuda" and not torch.cuda.is_available():
        return f"--device {name}: no CUDA device is visible to torch on this machine"
    return ""


def device_option(name: str) -> Any:
    """`type=` of a script's `--device`: the torch device, or argparse's one-line error (exit
    status 2) where it is not a device or torch cannot use it."""
    import torch

    try:
        why = missing_device(name)
    except RuntimeError as error:  # not a device name torch knows
        raise argparse.ArgumentTypeError(f"--device {name}: {error}") from None
    if why:
        raise argparse.ArgumentTypeError(why)
    return torch.device(name)
