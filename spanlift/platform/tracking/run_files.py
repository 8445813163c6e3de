"""Files a run stored that commands read back: its resolved configuration and its fitted solver."""

from pathlib import Path

from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.resolved import RESOLVED_FILE, ResolvedConfiguration, read_resolved


def resolved_of(client: MlflowClient, run_id: str, folder: Path) -> ResolvedConfiguration:
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    if RESOLVED_FILE not in artifacts:
        raise SettingsError(
            f"run {run_id} stored no {RESOLVED_FILE} (it was recorded before runs kept their "
            "configuration); run its sweep again to draw it"
        )
    return read_resolved(Path(client.download_artifacts(run_id, RESOLVED_FILE, str(folder))))


def checkpoint_of(client: MlflowClient, run_id: str, folder: Path) -> Path | None:
    """The fitted solver the run stored, if it fitted one."""
    names = [a.path for a in client.list_artifacts(run_id) if a.path.endswith(".pt")]
    return Path(client.download_artifacts(run_id, names[0], str(folder))) if names else None
