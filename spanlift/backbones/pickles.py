"""Models shipped as Python pickles: loading one runs code from the file and imports the classes
it names, so it needs the user's explicit opt-in and, often, the folder of the package the model
was written in (e.g. a clone of the NVlabs EDM repository for its `dnnlib` and `torch_utils`).
"""

import hashlib
import pickle
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spanlift.errors import CheckpointError, SettingsError


def require_opt_in(allow_pickle: object, path: Path, what: str) -> None:
    """Refuse to unpickle `path` unless the user passed allow_pickle=true."""
    if allow_pickle is not True:
        raise CheckpointError(
            f"{what} {path} is a pickle and loading it runs code from the file: pass "
            f"allow_pickle=true if you trust it"
        )


def make_importable(code: str | Path | None, what: str) -> None:
    """Put the folder holding a pickled model's packages on sys.path (first), for good."""
    if code is None:
        return
    code = Path(code).expanduser()
    if not code.is_dir():
        raise SettingsError(
            f"{what} code={code} is not a folder; pass the folder that holds the model's packages"
        )
    if str(code) not in sys.path:
        sys.path.insert(0, str(code))


def unpickle(path: Path, what: str, code_hint: str) -> Any:
    """pickle.load of `path` (the caller checked the opt-in); a class that cannot be imported is an
    error that names the missing module and `code_hint` (where its package comes from)."""
    try:
        with path.open("rb") as file:
            return pickle.load(file)
    except ModuleNotFoundError as exc:
        raise CheckpointError(
            f"{what} {path} needs the module {exc.name!r}, which cannot be imported: {code_hint}"
        ) from None
    except Exception as exc:
        raise CheckpointError(f"cannot read {what} {path}: {type(exc).__name__}: {exc}") from None


def files_digest(paths: Iterable[Path]) -> str:
    """16 hex digits of SHA-256 over the files' digests, in order."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as file:
            digest.update(hashlib.file_digest(file, "sha256").digest())
    return digest.hexdigest()[:16]
