"""An analysis as one MLflow run: its settings as params, key figures as metrics, files as artifacts."""

import re
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from spanlift.platform.tracking.runs import experiment_id, source_tags

ANALYSIS_TAG = "spanlift.analysis"


def metric_key(*parts: str) -> str:
    """An MLflow-valid key (letters, digits, _ - . / and spaces) from `parts` joined by '/'."""
    return "/".join(re.sub(r"[^0-9A-Za-z_\-. ]+", "_", part).strip("_") for part in parts)


def record_analysis(
    client: MlflowClient,
    experiment: str,
    analysis: str,
    params: dict[str, Any],
    metrics: dict[str, float],
    artifacts: list[Path],
    histories: dict[str, list[float]] | None = None,
) -> str:
    """Log one finished run named `analysis` in `experiment` (created if absent); `histories` are
    per-step metrics (value k at step k). Returns the run id; a failure leaves the run FAILED."""
    tags = {**source_tags(f"spanlift analyze {analysis}"), ANALYSIS_TAG: analysis}
    experiment_ = experiment_id(client, experiment, create=True)
    run = client.create_run(experiment_, tags=tags, run_name=analysis)
    run_id = run.info.run_id
    try:
        now = int(1000 * time.time())
        client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
            params=[Param(k, str(v)[:6000]) for k, v in params.items()],
        )
        for name, values in (histories or {}).items():
            steps = [Metric(name, float(v), now, k) for k, v in enumerate(values)]
            client.log_batch(run_id, metrics=steps)
        for path in artifacts:
            client.log_artifact(run_id, str(path))
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    return run_id
