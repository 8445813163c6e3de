"""MLflow: one run per evaluated solver configuration, found again by the configuration's key.

A configuration is identified by the tag `spanlift.key` (backbone, teacher, fit settings and
solver spec hashed together). A trial that is retried or resumed reopens its unfinished run
instead of starting a second one, and a configuration with a finished run is not evaluated again.
"""

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.solvers import SolverSpec

KEY_TAG = "spanlift.key"
FAILURE_TAG = "spanlift.failure"
DEFAULT_URI = "sqlite:///mlflow.db"


def absolute_uri(uri: str) -> str:
    """A local store URI made absolute, so Ray workers in other folders reach the same store."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    if "://" not in uri:
        return Path(uri).resolve().as_uri()
    return uri


def configuration_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def solver_params(backbone: str, spec: SolverSpec, nfe: int) -> dict[str, Any]:
    """The params every run of a solver carries; the leaderboard groups and labels by them."""
    settings = spec.settings
    return {
        "backbone": backbone,
        "solver": spec.name,
        "configuration": spec.label(),
        "base": settings.get("base", ""),
        "nfe": nfe,
        "schedule": spec.schedule,
        "operator": settings.get("operator", ""),
        "kernel_size": settings.get("kernel_size", ""),
        "hidden_dim": settings.get("hidden_dim", ""),
        "blocks": settings.get("blocks", ""),
    }


def connect(uri: str) -> MlflowClient:
    """A client for `uri`, checked by one request so a bad URI fails before any work starts."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as exc:  # MLflow raises many types for an unreachable store
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise SettingsError(
            f"tracking URI {uri} cannot be reached ({reason}); start the tracking server or pass "
            f"--tracking-uri {DEFAULT_URI} for a local store"
        ) from None
    return client


def experiment_id(client: MlflowClient, name: str, create: bool = False) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    if not create:
        raise SettingsError(f"no MLflow experiment named {name!r} at {client.tracking_uri}")
    artifacts = None
    if client.tracking_uri.startswith("sqlite:"):
        store = Path(client.tracking_uri.removeprefix("sqlite:///"))
        artifacts = (store.parent / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=artifacts)


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

    def find(self, key: str) -> RunRecord | None:
        """The configuration's run: the finished one if any, else the newest."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'"
        )
        if not runs:
            return None
        run = next((r for r in runs if r.info.status == "FINISHED"), runs[0])
        return RunRecord(
            run.info.run_id,
            run.info.status,
            dict(run.data.metrics),
            run.data.tags.get(FAILURE_TAG, ""),
        )

    def open(self, key: str, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """The run to record this configuration in: its earlier unfinished run, or a new one."""
        earlier = self.find(key)
        if earlier is not None:
            self.client.update_run(earlier.run_id, status="RUNNING")
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
    ) -> None:
        """Log final metrics, params known only after evaluation, artifacts; mark FINISHED."""
        timestamp = int(1000 * time.time())
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), timestamp, 0) for k, v in metrics.items()],
            params=[Param(k, str(v)) for k, v in (params or {}).items()],
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
