"""Which MLflow store a command uses, said by its URI, and what can be checked of it before MLflow
loads (a command's `--tracking-uri` is checked as its options are read, before its first line).
"""

import os
from pathlib import Path

from spanlift.errors import SettingsError
from spanlift.platform.tracking.database import check_driver

DEFAULT_URI = "sqlite:///mlflow.db"


def resolve_tracking_uri(explicit: str | None = None, from_file: str | None = None) -> str:
    """The store to use: --tracking-uri, else $MLFLOW_TRACKING_URI, else the sweep file's, else
    sqlite:///mlflow.db in the working directory; made absolute for Ray workers."""
    return absolute_uri(
        explicit or os.environ.get("MLFLOW_TRACKING_URI") or from_file or DEFAULT_URI
    )


def absolute_uri(uri: str) -> str:
    """A local store URI made absolute, so Ray workers in other folders reach the same store."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    if "://" not in uri:
        return Path(uri).resolve().as_uri()
    return uri


def local_store(uri: str) -> Path | None:
    """The file or folder a local store URI (`sqlite:///…`, `file://…`) names; None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///"))
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    return None


def check_local_store(uri: str) -> None:
    """Refuse a local store whose folder does not exist: MLflow would create the folder and an
    empty store in it, where a mistyped URI is meant. A new store is made only in a folder that
    exists."""
    store = local_store(absolute_uri(uri))
    if store is not None and not store.parent.is_dir():
        raise SettingsError(
            f"tracking URI {uri}: folder {store.parent} does not exist; correct the URI, or create "
            "the folder for a new store"
        )


def check_store(uri: str) -> None:
    """What can be checked of a store URI without reaching it: a local store's folder exists
    (`check_local_store`), a database URI's driver is installed (`database.check_driver`)."""
    check_local_store(uri)
    check_driver(uri)
