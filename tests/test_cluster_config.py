"""ray_cluster.yaml against Ray's own cluster-launcher schema."""

import copy

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.commands import prepare_config
from ray.autoscaler._private.util import validate_config

from tests.cli_run import ROOT

CONFIG = ROOT / "ray_cluster.yaml"


@pytest.fixture(scope="module")
def cluster() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def test_cluster_config_follows_rays_schema(cluster: dict) -> None:
    """What `ray up` does first: fill in the provider's defaults, then check the JSON schema."""
    validate_config(prepare_config(copy.deepcopy(cluster)))


def test_cluster_has_autoscaling_gpu_workers_and_installs_the_package(cluster: dict) -> None:
    workers = [
        node
        for name, node in cluster["available_node_types"].items()
        if name != cluster["head_node_type"]
    ]
    assert any(
        node["resources"].get("GPU", 0) >= 1 and node["max_workers"] > node["min_workers"]
        for node in workers
    )
    assert "." in cluster["file_mounts"].values()
    assert any("pip install" in c and "spanlift" in c for c in cluster["setup_commands"])


def test_the_schema_check_can_fail(cluster: dict) -> None:
    broken = copy.deepcopy(cluster)
    broken["available_node_types"]["gpu_worker"]["max_workers"] = "many"
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(broken))
