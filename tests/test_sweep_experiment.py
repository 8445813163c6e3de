"""The sweep's MLflow experiment, opened beside Ray's start where the store is local."""

import pytest

from spanlift.errors import SettingsError
from spanlift.platform.sweep.driver import sweep_experiment
from spanlift.platform.tracking.runs import connect, experiment_id


def test_a_local_stores_experiment_is_made_on_a_thread_and_found_again(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    made = sweep_experiment(uri, "beside")
    assert made.result(timeout=120) == experiment_id(connect(uri), "beside")


def test_a_local_store_in_a_missing_folder_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(SettingsError, match="missing"):
        sweep_experiment(f"sqlite:///{tmp_path / 'missing' / 'mlflow.db'}", "beside")
