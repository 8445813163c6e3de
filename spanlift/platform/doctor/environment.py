"""The environment a sweep is about to run in: Ray, the MLflow store, the storage, the sweep file.

Each check reads only (an unnamed probe file in the storage's nearest existing folder is opened and
closed); none creates a folder, an MLflow store or an experiment.
"""

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from spanlift.files import check_writable
from spanlift.platform.doctor.report import Skipped

Check = tuple[str, Callable[[], str | None]]


def ray_check(address: str | None) -> str:
    """Join the cluster at `address` (or $RAY_ADDRESS), or start a private local Ray; its nodes,
    CPUs and GPUs. A Ray this check started is stopped again."""
    import ray

    from spanlift.platform.ray_runtime import ray_address, start_ray

    joined = ray.is_initialized()
    if not joined:
        start_ray(
            ray_address(address), Path(tempfile.mkdtemp(prefix="spanlift-doctor-")), verbose=False
        )
    try:
        resources = ray.cluster_resources()
        nodes = sum(node["Alive"] for node in ray.nodes())
    finally:
        if not joined:
            ray.shutdown()
    where = ray_address(address) or "a local Ray"
    return (
        f"{where}: {nodes} node(s), {resources.get('CPU', 0):g} CPUs, "
        f"{resources.get('GPU', 0):g} GPUs"
    )


def mlflow_check(uri: str | None) -> str:
    """The tracking store answers (a server) or its SQLite file can be written (created on the
    first run when absent, not here, and only in a folder that exists)."""
    from spanlift.platform.tracking.store_uri import check_store, resolve_tracking_uri

    uri = resolve_tracking_uri(uri)
    check_store(uri)
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.exists():
            check_writable(path.parent)
            return f"{uri}: absent, will be created by the first run"
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    from mlflow.tracking import MlflowClient

    from spanlift.platform.tracking.runs import first_contact

    with first_contact(uri):  # a sweep starting beside it may be creating the store
        experiments = MlflowClient(uri).search_experiments(max_results=1000)
    return f"{uri}: {len(experiments)} experiment(s)"


def storage_check(storage: str | None, sweep: Path | None) -> str:
    """The storage of `--storage`, else of the sweep file, can be written: a folder, or a bucket
    that exists and takes a probe object."""
    from spanlift.platform.storage import open_storage
    from spanlift.platform.sweep.config import DEFAULT_STORAGE, load_sweep

    if storage is None and sweep is not None:
        storage = load_sweep(sweep).storage
    opened = open_storage(storage or DEFAULT_STORAGE)
    if not opened.remote:
        check_writable(opened.local)
    return f"{opened.uri} is writable"


def sweep_check(sweep: Path | None) -> str:
    """The sweep file is valid and the files and code it names are present (what loading it
    checks), and how many configurations it holds."""
    if sweep is None:
        raise Skipped("no sweep file given")
    from spanlift.platform.sweep.config import load_sweep
    from spanlift.platform.sweep.summary import expected_configurations

    config = load_sweep(sweep)
    return f"{sweep}: backbone {config.backbone}, {expected_configurations(config)} configurations"


def environment_checks(
    sweep: Path | None, address: str | None, tracking_uri: str | None, storage: str | None
) -> Iterator[Check]:
    yield "sweep file", lambda: sweep_check(sweep)
    yield "storage", lambda: storage_check(storage, sweep)
    yield "MLflow store", lambda: mlflow_check(tracking_uri)
    yield "Ray", lambda: ray_check(address)
