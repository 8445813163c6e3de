"""A sweep on a real two-node Ray cluster on this machine, stored in an S3 bucket, and its worker
node lost mid-sweep: the fixture of the multi-node tests and the lost-node row of
`benchmarks/fault_tolerance.py`.

    moto S3 server (127.0.0.1) ─ bucket
    ray.cluster_utils.Cluster: head node + worker node, each a raylet with its own CPUs
    spanlift sweep FILE --address <head> --storage s3://bucket/runs   (a process, as users run it)
    once a learned fit runs on the worker node and has published a saved state: that node is killed

Both nodes are processes of this machine, so they share its disk; what they share through the
bucket is checked by listing it (the Tune and Train state, the teacher entries, the fitted
checkpoints), and what crosses nodes is read back from the trials' MLflow tags.
"""

import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.ray_runtime import Reserved, TrialBundle, check_fits
from spanlift.platform.sweep.trial import HOST_TAG, NODE_TAG
from spanlift.platform.tracking.runs import KEY_TAG
from tests.cli_run import start_spanlift
from tests.s3_server import free_port, keys, make_bucket, moto_server, s3_environment

BUCKET, PREFIX = "spanlift", "runs"
NODE_CPUS = 2
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 3,
}
"""A lost node is noticed in ~3 s instead of Ray's default ~15 s."""
CLUSTER_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",  # as a local Ray started by spanlift
}

SWEEP = {
    "experiment": "two-nodes",
    "backbone": "gmm",
    "teacher": {
        "solver": "ipndm",
        "settings": {"order": 4},
        "nfe": 35,
        "train_samples": 128,
        "test_samples": 32,
    },
    "solvers": [
        {"name": "ipndm", "nfe": 3, "settings": {"order": 3}},
        {"name": "dyweight", "nfe": [3, 4, 5]},
    ],
    "search": {"algorithm": "grid", "metric": "rmse", "mode": "min"},
    # ~8 s a fit in its trial's process: the worker node is killed while one runs
    "fit": {"iterations": 2000, "batch_size": 16, "lr": 0.005, "seed": 0, "checkpoint_every": 100},
    "resources": {
        "trial_cpu": 0.1,
        "workers": 1,
        "worker_cpu": 0.9,
        "max_failures": 2,
        "evaluator_cpu": 0.1,
        "use_gpu": "auto",
    },
}
"""One analytic and three learned configurations: all four at once on the two nodes."""


@dataclass
class RunSeen:
    name: str
    status: str
    node: str
    host: str
    end_time: int | None
    resumed_from: float | None
    """The iteration its fit continued from (`fit_resumed_from`; None: not recorded yet)."""

    @classmethod
    def of(cls, run) -> "RunSeen":
        tags = run.data.tags
        return cls(
            run.info.run_name,
            run.info.status,
            tags.get(NODE_TAG, ""),
            tags.get(HOST_TAG, ""),
            run.info.end_time,
            run.data.metrics.get("fit_resumed_from"),
        )


@dataclass
class TwoNodeSweep:
    head: str
    worker: str
    exit_code: int = -1
    output: str = ""
    seconds: float = 0.0
    at_kill: dict[str, RunSeen] = field(default_factory=dict)
    """The configurations' runs (by id) when the worker node was killed."""
    runs: dict[str, RunSeen] = field(default_factory=dict)
    """The configurations' runs (by id) after the sweep."""
    duplicates: int = 0
    """Runs beyond the first per configuration key."""
    stored: list[str] = field(default_factory=list)
    """Objects in the bucket under the sweep's prefix."""
    local_storage: list[str] = field(default_factory=list)
    """What the sweep wrote into the working folder's default storage (must be nothing)."""
    gpu_refusals: list[str] = field(default_factory=list)
    """What GPU requests the CPU-only cluster refused (see `gpu_requests_refused`)."""

    def lost(self) -> list[str]:
        """Ids of the runs RUNNING on the worker node when it was killed."""
        return [
            run_id
            for run_id, r in self.at_kill.items()
            if r.node == self.worker and r.status == "RUNNING"
        ]

    def rerun(self) -> list[str]:
        """Ids of the runs FINISHED before the kill that were finished again after it."""
        return [
            run_id
            for run_id, r in self.at_kill.items()
            if r.status == "FINISHED" and self.runs[run_id].end_time != r.end_time
        ]


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def configuration_runs(tracking_uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id]) if found else []
    return [r for r in runs if r.data.tags.get("spanlift.command") != "sweep"]


@contextmanager
def two_node_cluster(folder: Path) -> Iterator[tuple]:
    """A head and a worker node (NODE_CPUS each), and the S3 endpoint with the bucket; the
    environment set for them and for the processes started inside the block."""
    from ray.cluster_utils import Cluster

    with moto_server() as endpoint:
        bucket = make_bucket(endpoint, BUCKET)
        env = {
            **s3_environment(endpoint),
            **CLUSTER_ENV,
            "SPANLIFT_STORAGE_CACHE": str(folder / "node-cache"),
        }
        with environment(env):
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": NODE_CPUS,
                    "dashboard_port": free_port(),  # another Ray on this machine may hold 8265
                    "_system_config": FAST_FAILURE_DETECTION,
                },
            )
            try:
                worker = cluster.add_node(num_cpus=NODE_CPUS)
                cluster.wait_for_nodes()
                yield cluster, worker, bucket
            finally:
                cluster.shutdown()


def run_two_node_sweep(
    folder: Path, kill_worker: bool = True, timeout: float = 480
) -> TwoNodeSweep:
    """SWEEP on two nodes, the worker node killed once a learned configuration runs there."""
    path = folder / "two-nodes.yaml"
    path.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    tracking = f"sqlite:///{folder / 'mlflow.db'}"
    start = time.monotonic()
    with two_node_cluster(folder) as (cluster, worker, bucket):
        result = TwoNodeSweep(cluster.head_node.node_id, worker.node_id)
        process = start_spanlift(
            folder,
            "sweep",
            str(path),
            "--address",
            cluster.address,
            "--storage",
            f"s3://{BUCKET}/{PREFIX}",
            "--tracking-uri",
            tracking,
        )
        try:
            if kill_worker:
                result.at_kill = wait_for_learned_run_on(
                    result.worker, process, tracking, lambda: published_states(bucket), timeout
                )
                cluster.remove_node(worker, allow_graceful=False)
            result.output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise TimeoutError(
                f"the sweep did not end:\n{process.communicate()[0][-5000:]}"
            ) from None
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        result.exit_code = process.returncode
        result.stored = keys(bucket, f"{BUCKET}/{PREFIX}/{SWEEP['experiment']}")
        result.gpu_refusals = gpu_requests_refused(cluster.address)
    result.seconds = time.monotonic() - start
    runs = configuration_runs(tracking, SWEEP["experiment"])
    result.runs = {r.info.run_id: RunSeen.of(r) for r in runs}
    result.duplicates = sum(n - 1 for n in Counter(r.data.tags[KEY_TAG] for r in runs).values())
    default_storage = folder / "runs"
    result.local_storage = sorted(str(p) for p in default_storage.rglob("*"))
    return result


GPU_REQUESTS = {
    "worker_gpu": (TrialBundle(0.1, 1, 0.9, use_gpu=True, worker_gpu=0.25), Reserved(1, 0.1, 0)),
    "evaluator_gpu": (TrialBundle(0.1, 1, 0.9, use_gpu=False), Reserved(2, 0.1, 0.5)),
}
"""A quarter GPU per Train worker, and half a GPU per evaluator: neither can be placed where Ray
reports no GPU."""


def gpu_requests_refused(address: str) -> list[str]:
    """The refusal of each of GPU_REQUESTS by the placement check, on the cluster at `address`
    (whose nodes have no GPU)."""
    import ray

    refusals = []
    ray.init(address=address, log_to_driver=False)
    try:
        for bundle, reserved in GPU_REQUESTS.values():
            try:
                check_fits(bundle, reserved, local=True)
            except SettingsError as exc:
                refusals.append(str(exc))
    finally:
        ray.shutdown()
    return refusals


def published_states(bucket) -> int:
    """The fit states in the bucket (each running fit publishes one every `checkpoint_every`
    iterations and removes it once its fitted solver is kept)."""
    found = keys(bucket, f"{BUCKET}/{PREFIX}/{SWEEP['experiment']}/train")
    return sum(key.endswith(".state.pt") for key in found)


def wait_for_learned_run_on(
    node: str, process, tracking: str, published: Callable[[], int], timeout: float
) -> dict:
    """The runs once a DyWeight configuration's run is RUNNING on `node`, every running fit has
    published a saved state (`published()` counts them in the bucket: the lost fit must continue
    from its state there, not from 0), and another configuration has FINISHED (to show that a
    finished one is not run again)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the sweep ended first:\n{process.communicate()[0][-3000:]}")
        try:
            runs = {r.info.run_id: RunSeen.of(r) for r in configuration_runs(tracking, "two-nodes")}
        except Exception:  # the store is not created yet
            runs = {}
        learning_there = any(
            r.node == node and r.status == "RUNNING" and "dyweight" in r.name for r in runs.values()
        )
        fitting = sum(r.status == "RUNNING" and "dyweight" in r.name for r in runs.values())
        finished = any(r.status == "FINISHED" for r in runs.values())
        if learning_there and finished and published() >= fitting:
            return runs
        time.sleep(0.25)
    raise TimeoutError(
        f"no learned configuration ran on the worker node with a saved state after another "
        f"finished, within "
        f"{timeout:.0f} s"
    )
