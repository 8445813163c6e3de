"""The weights of a `torch.save` file that also holds other objects, read without running its code.

A Lightning checkpoint keeps more than its `state_dict`: its `hyper_parameters` are whatever the
module saved, e.g. PreDiff's training module saves its config as an omegaconf `DictConfig`, which
`torch.load(weights_only=True)` refuses (omegaconf is not a class torch allows) and a full unpickle
would build by running omegaconf's code, or any code the file names. Here the file is read with
torch's weights-only unpickler, and every global it names that torch does not allow (found by
`torch.serialization.get_unsafe_globals_in_checkpoint`, without unpickling) is read as an inert
`Placeholder`: built from nothing, ignoring the state pickled for it, running no code. Tensors and
the containers torch allows come back as they were; a placeholder where a tensor is expected is
the caller's to refuse (`Placeholder.source` names what the file held there).
"""

from pathlib import Path

import torch


class Placeholder:
    """What stands in for an object of a global torch does not allow; `source` is its name."""

    source = ""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass


def placeholder_for(name: str) -> tuple[type, str]:
    """A Placeholder class that reads the global `name` (module.qualified_name) of a file."""
    return type(f"Placeholder[{name}]", (Placeholder,), {"source": name}), name


def foreign_globals(path: Path) -> list[str]:
    """The globals of the file at `path` that torch does not allow; none for files that are not
    zip checkpoints (torch.load then says what they are)."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except (ValueError, RuntimeError):
        return []


def load_tensors(path: Path) -> object:
    """torch.load(path, weights_only=True) with the file's other globals read as placeholders."""
    stand_ins = [placeholder_for(name) for name in foreign_globals(path)]
    with torch.serialization.safe_globals(stand_ins):
        return torch.load(path, map_location="cpu", weights_only=True)


UNPICKLER_REASON = "WeightsUnpickler error:"
"""Where torch.load's weights-only refusal, a dozen lines of advice, says what it met."""


def reason(exc: BaseException) -> str:
    """One line of what torch.load reported: for a weights-only refusal, the unpickler's reason."""
    text = str(exc)
    if UNPICKLER_REASON in text:
        text = text.split(UNPICKLER_REASON, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0].split(". Please use")[0] if lines else type(exc).__name__
