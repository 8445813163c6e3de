"""One GPU shared: GPU telemetry that stays silent without CUDA, and cluster addresses that
nothing answers at refused at once."""

import time
from pathlib import Path

import pytest
import torch
import yaml

from spanlift.errors import SettingsError
from spanlift.platform.sweep.gpu_telemetry import GpuTelemetry, utilization_metrics
from tests.s3_server import free_port

GMM_SWEEP = {
    "experiment": "unreachable",
    "backbone": "gmm",
    "solvers": [{"name": "ipndm", "nfe": 3, "settings": {"order": 3}}],
}


def test_without_cuda_the_telemetry_logs_nothing_and_starts_no_thread() -> None:
    with GpuTelemetry(torch.device("cpu"), interval=0.01) as gpu:
        time.sleep(0.05)
    assert gpu.metrics() == {} and gpu._thread is None
    if not torch.cuda.is_available():  # asked for CUDA where there is none: still silent
        with GpuTelemetry(torch.device("cuda", 0), interval=0.01) as gpu:
            time.sleep(0.05)
        assert gpu.metrics() == {} and gpu._thread is None


def test_utilization_is_the_mean_and_largest_sample() -> None:
    assert utilization_metrics([]) == {}
    assert utilization_metrics([20.0, 80.0, 50.0]) == {
        "gpu_utilization": 50.0,
        "gpu_utilization_max": 80.0,
    }


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_a_cluster_nothing_answers_at_is_refused_before_anything_is_written(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanlift.platform.sweep.driver import run_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(GMM_SWEEP))
    monkeypatch.chdir(tmp_path)
    address = address.format(port=free_port())
    start = time.monotonic()
    with pytest.raises(SettingsError, match=f"no Ray cluster answers at {address}"):
        run_sweep(path, address=address, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    assert time.monotonic() - start < 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]


def test_a_malformed_address_is_refused() -> None:
    from spanlift.platform.ray_runtime import check_reachable

    with pytest.raises(SettingsError, match="expected host:port"):
        check_reachable("head-node")
