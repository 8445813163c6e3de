"""Per-seed errors as a run stores them: `errors.parquet`, one row per test seed.

    seed   int64    the test seed
    error  float64  e_s = sqrt(mean over pixels (Φ_S(x_s) − Φ*(x_s))²)

Two runs scored on the same seeds are compared seed by seed (the leaderboard's paired intervals,
`comparison.py`); a run's RMSE is sqrt(mean_s e_s²).
"""

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from mlflow.tracking import MlflowClient

ERRORS_FILE = "errors.parquet"


def write_errors(folder: Path, seeds: np.ndarray, errors: np.ndarray) -> Path:
    """`folder/errors.parquet` with the seeds and their errors."""
    path = Path(folder) / ERRORS_FILE
    table = pa.table(
        {"seed": np.asarray(seeds, dtype=np.int64), "error": np.asarray(errors, dtype=np.float64)}
    )
    pq.write_table(table, path)
    return path


def read_errors(client: MlflowClient, run_id: str) -> pd.Series | None:
    """The run's errors by seed; None for a run that stored none (recorded before they were)."""
    if ERRORS_FILE not in {a.path for a in client.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory() as folder:
        path = client.download_artifacts(run_id, ERRORS_FILE, folder)
        table = pq.read_table(path).to_pandas()
    return pd.Series(table["error"].to_numpy(), index=table["seed"].to_numpy(), name=run_id)
