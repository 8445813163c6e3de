"""The cluster-launcher files against Ray's own schema: ray_cluster.yaml (a shared EFS) and
ray_cluster_bucket.yaml (nodes that share an S3 bucket only)."""

import copy

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.commands import prepare_config
from ray.autoscaler._private.util import validate_config

from tests.cli_run import ROOT

CLUSTER_FILES = ("ray_cluster.yaml", "ray_cluster_bucket.yaml")


@pytest.fixture(params=CLUSTER_FILES)
def cluster(request: pytest.FixtureRequest) -> dict:
    return yaml.safe_load((ROOT / request.param).read_text())


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


def test_the_bucket_cluster_mounts_no_shared_disk_and_keeps_artifacts_in_the_bucket() -> None:
    text = (ROOT / "ray_cluster_bucket.yaml").read_text()
    cluster = yaml.safe_load(text)
    commands = [*cluster["setup_commands"], *cluster["head_start_ray_commands"]]
    assert not any("mount" in c or "efs" in c.lower() for c in commands)
    server = next(c for c in cluster["head_start_ray_commands"] if "mlflow server" in c)
    assert "--artifacts-destination s3://" in server and "--serve-artifacts" in server
    for node in cluster["available_node_types"].values():
        assert "IamInstanceProfile" in node["node_config"]


def test_the_tracking_server_keeps_runs_in_postgresql(cluster: dict) -> None:
    """The head creates the database and the MLflow server's store is PostgreSQL through
    psycopg (the `cluster` extra every node installs), not SQLite."""
    server = next(c for c in cluster["head_start_ray_commands"] if "mlflow server" in c)
    assert "--backend-store-uri 'postgresql+psycopg://" in server and "sqlite" not in server
    assert any("createdb" in c for c in cluster["head_setup_commands"])
    assert any("spanlift[cluster]" in c for c in cluster["setup_commands"])
