"""Paths written in a sweep file are relative to the file's folder, wherever the sweep is run."""

from pathlib import Path
from typing import Any

from spanlift.platform.storage import is_uri

DEFAULT_STORAGE = "runs/sweeps"
"""Results folder when the file names none: relative to the working directory, like MLflow's
default store. A relative path written in the file is relative to the file's folder."""

PATH_OPTIONS = ("weights", "path", "dir", "root", "data", "code", "prompts")
"""Backbone and loss options whose names end so hold paths: relative ones are relative to the
file."""


def within(folder: Path, path: str) -> str:
    """`path` as an absolute path, a relative one taken from `folder`."""
    return str((folder / Path(path).expanduser()).resolve())


def absolute_paths(options: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Backbone or loss options with their path-valued ones (see PATH_OPTIONS) made absolute."""
    return {
        key: within(folder, value)
        if isinstance(value, str) and key.endswith(PATH_OPTIONS)
        else value
        for key, value in options.items()
    }


def fit_paths(fit: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Fit settings with their path-valued loss options made absolute."""
    options = fit.get("loss_options")
    if not isinstance(options, dict):
        return fit  # absent, or refused with its key path by FitSettings
    return {**fit, "loss_options": absolute_paths(options, folder)}


def tracking_uri(uri: str | None, folder: Path) -> str | None:
    """A relative sqlite store written in the file is relative to the file's folder."""
    if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + within(folder, uri.removeprefix("sqlite:///"))
    return uri


def stored_at(storage: str | None, folder: Path) -> str:
    """The file's `storage`: a bucket URI as written, a folder relative to the file's folder."""
    if not storage:
        return DEFAULT_STORAGE
    return storage if is_uri(storage) else str((folder / storage).resolve())
