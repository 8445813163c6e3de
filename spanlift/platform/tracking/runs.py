"""MLflow: one run per evaluated solver configuration, found again by the configuration's key.

A configuration is identified by the tag `spanlift.key` (`configuration.Configuration.key`) and
the version of the code that produced it (`spanlift.code_version`). A trial that is retried or
resumed reopens its unfinished run instead of starting a second one, and a configuration with a
finished run of the same code version is not evaluated again. Experiments are tagged so that
MLflow's UI opens them on the runs table; runs carry MLflow's source tags (command, git commit).
"""

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.tracking.database import is_postgres, schema_lock, shown
from spanlift.platform.tracking.store_uri import DEFAULT_URI, check_store, local_store
from spanlift.solvers import SolverSpec

KEY_TAG = "spanlift.key"
FAILURE_TAG = "spanlift.failure"
CODE_TAG = "spanlift.code_version"
PARENT_TAG = "mlflow.parentRunId"
REPLICATE_PARAM = "configuration.key"
"""The run param the replicates of one configuration share: its key up to the fit seed."""
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
"""MLflow 3's UI opens an untagged experiment on its GenAI traces page; this opens the runs."""


def solver_params(backbone: str, spec: SolverSpec) -> dict[str, Any]:
    """The params every run of a solver carries; the leaderboard groups and labels by them."""
    settings = spec.settings
    return {
        "backbone": backbone,
        "solver": spec.name,
        "configuration": spec.label(),
        "base": settings.get("base", ""),
        "nfe": spec.nfe,
        "schedule": spec.schedule,
        "operator": settings.get("operator", ""),
        "kernel_size": settings.get("kernel_size", ""),
        "hidden_dim": settings.get("hidden_dim", ""),
        "blocks": settings.get("blocks", ""),
    }


def run_name(spec: SolverSpec, label: str = "") -> str:
    """What a run shows in MLflow's runs table, e.g. `spanlift[base=dyweight,kernel_size=3] nfe=4`,
    or with a sweep entry's `label` `SpanLift (pooled) nfe=4`."""
    return f"{label or spec.label()} nfe={spec.nfe}"


def connect(uri: str, read_only: bool = False) -> MlflowClient:
    """A client for `uri`, checked by one request so a bad URI fails before any work starts; a
    local store is created only in a folder that exists, a database store only with its driver
    installed (`check_store`).

    `read_only`: a local store that does not exist is an error instead of being created (MLflow
    creates an empty store on first contact)."""
    store = local_store(uri)
    if read_only and store is not None and not store.exists():
        raise SettingsError(
            f"no MLflow store at {store}: run this where the sweep ran (it writes mlflow.db in its "
            "working folder), or pass --tracking-uri"
        )
    check_store(uri)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep the console ours
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    try:
        with first_contact(uri):
            client = MlflowClient(tracking_uri=uri)
            client.search_experiments(max_results=1)
    except SettingsError:
        raise
    except Exception as exc:  # MLflow raises many types for an unreachable store
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise SettingsError(
            f"tracking URI {shown(uri)} cannot be reached ({reason}); start the tracking server or pass "
            f"--tracking-uri {DEFAULT_URI} for a local store"
        ) from None
    return client


@contextmanager
def first_contact(uri: str) -> Iterator[None]:
    """Hold the folder of a SQLite store locked while MLflow first opens it there, or a
    PostgreSQL database's advisory lock (`database.schema_lock`, which also fails with one line
    where the server does not answer).

    MLflow creates and migrates a new SQLite store on first contact, and two processes doing so
    at once each run the migration: all but one fail. Under the lock one process creates the
    store and the others wait, then find it complete. A tracking server or file store needs no
    lock."""
    if is_postgres(uri):
        with schema_lock(uri):
            yield
        return
    store = local_store(uri) if uri.startswith("sqlite:///") else None
    if store is None:
        yield
        return
    folder = os.open(store.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # closing the descriptor releases the lock


UI_ADDRESS = "http://127.0.0.1:5000"
"""Where `mlflow ui` serves by default."""
RUNS_TABLE = "#/experiments/{id}/runs?workflowType=machine_learning"
"""MLflow 3's UI page of an experiment's runs table. The query overrides the browser-wide
"GenAI / Model training" switch, which otherwise may open the experiment on its traces page."""


def runs_page(uri: str, experiment: str, metric: str = "", mode: str = "min") -> tuple[str, str]:
    """(the command that serves MLflow's UI for `uri`, or "" for a tracking server; the address of
    `experiment`'s runs table there, sorted by `metric` best first when given).

    MLflow's UI takes the sort order from the address but not the columns shown: the metric's
    column is added with Columns → Metrics."""
    found = MlflowClient(uri).get_experiment_by_name(experiment)
    page = RUNS_TABLE.format(id=found.experiment_id if found else "0")
    if metric:
        page += f"&orderByKey=metrics.%60{quote(metric)}%60&orderByAsc={str(mode == 'min').lower()}"
    if uri.startswith(("http://", "https://")):
        return "", f"{uri.rstrip('/')}/{page}"
    return f"mlflow ui --backend-store-uri {uri}", f"{UI_ADDRESS}/{page}"


def experiment_id(client: MlflowClient, name: str, create: bool = False) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if create and not set(EXPERIMENT_KIND.items()) <= set(experiment.tags.items()):
            for key, value in EXPERIMENT_KIND.items():
                client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id
    if not create:
        names = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise SettingsError(
            f"no MLflow experiment named {name!r} at {client.tracking_uri}; it has: "
            + (", ".join(names) or "none")
        )
    artifacts = None
    if client.tracking_uri.startswith("sqlite:"):
        store = Path(client.tracking_uri.removeprefix("sqlite:///"))
        artifacts = (store.parent / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=artifacts, tags=EXPERIMENT_KIND)


def source_tags(command: str) -> dict[str, str]:
    """MLflow's own source tags: the command that ran, and the git commit of the code if any."""
    tags = {"mlflow.source.name": command, "mlflow.source.type": "LOCAL"}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    return {**tags, "mlflow.source.git.commit": commit} if commit else tags


@dataclass
class RunRecord:
    run_id: str
    status: str
    metrics: dict[str, float]
    failure: str = ""


class ConfigurationRuns:
    """The runs of one experiment, addressed by configuration key."""

    def __init__(self, uri: str, experiment: str) -> None:
        self.client = MlflowClient(tracking_uri=uri)
        self.experiment_id = experiment_id(self.client, experiment)

    def find(self, key: str, code_version: str | None = None) -> RunRecord | None:
        """The configuration's run made by `code_version` (None: by any version): the finished
        one if any, else the newest."""
        query = f"tags.`{KEY_TAG}` = '{key}'"
        if code_version is not None:
            query += f" and tags.`{CODE_TAG}` = '{code_version}'"
        runs = self.client.search_runs([self.experiment_id], filter_string=query)
        if not runs:
            return None
        run = next((r for r in runs if r.info.status == "FINISHED"), runs[0])
        return RunRecord(
            run.info.run_id,
            run.info.status,
            dict(run.data.metrics),
            run.data.tags.get(FAILURE_TAG, ""),
        )

    def open(
        self,
        key: str,
        name: str,
        params: dict[str, Any],
        tags: dict[str, str],
        reopen_finished: bool = False,
    ) -> str:
        """The run to record this configuration in: its earlier unfinished run of the same code
        version (`tags[CODE_TAG]`), or with `reopen_finished` its earlier run whatever its
        status, else a new one."""
        earlier = self.find(key, tags.get(CODE_TAG))
        if earlier is not None and (reopen_finished or earlier.status != "FINISHED"):
            self.client.update_run(earlier.run_id, status="RUNNING")
            self.client.log_batch(earlier.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
            return earlier.run_id
        return self.create(key, name, params, tags)

    def create(self, key: str, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """A new run of the configuration, whatever runs it had before."""
        run = self.client.create_run(self.experiment_id, run_name=name, tags={KEY_TAG: key, **tags})
        self.client.log_batch(
            run.info.run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
        )
        return run.info.run_id

    def finish(
        self,
        run_id: str,
        metrics: dict[str, float],
        artifacts: list[Path],
        params: dict[str, Any] | None = None,
        histories: dict[str, Sequence[float] | dict[int, float]] | None = None,
    ) -> None:
        """Log final metrics, params known only after evaluation, artifacts, and metric
        histories (a list: value i at step i, e.g. the fit's loss per iteration; a mapping:
        step → value, e.g. the validation loss every few iterations); mark FINISHED."""
        timestamp = int(1000 * time.time())
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), timestamp, 0) for k, v in metrics.items()],
            params=[Param(k, str(v)) for k, v in (params or {}).items()],
        )
        for name, values in (histories or {}).items():
            points = sorted(values.items() if isinstance(values, dict) else enumerate(values))
            for start in range(0, len(points), 1000):  # MLflow takes 1 000 metrics a batch
                self.client.log_batch(
                    run_id,
                    metrics=[
                        Metric(name, float(v), timestamp, int(i))
                        for i, v in points[start : start + 1000]
                    ],
                )
        for path in artifacts:
            self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, "FINISHED")

    def interrupt(self, run_id: str) -> None:
        """Mark the run failed without a reason tag, so the configuration is tried again."""
        self.client.set_terminated(run_id, "FAILED")

    def fail(self, run_id: str, reason: str) -> None:
        self.client.log_batch(run_id, tags=[RunTag(FAILURE_TAG, reason[:5000])])
        self.client.set_terminated(run_id, "FAILED")
