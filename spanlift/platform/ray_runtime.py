"""Starting or joining Ray the same way on a laptop and on a cluster.

Locally (no address) spanlift starts Ray itself: token auth off (`RAY_AUTH_MODE=disabled`, the
cluster is private to this process), temp files linked from the run folder, and the dashboard on
http://127.0.0.1:8265 only where Ray Train runs (its controller's monitor queries Ray's state API,
which the dashboard serves): its ten processes cost a 2-core laptop 1.5 s of every start. With an
address (`auto` or `ray://...`) it joins that cluster as it is configured.
"""

import logging
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ray

from spanlift.errors import SettingsError

LOCAL_AUTH = {"RAY_AUTH_MODE": "disabled"}
LOCAL_WORKER_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25"}
"""Ray Train's controller collects reports when it polls its workers (default every 2 s); a
short fit on a laptop would spend seconds waiting, so local Ray polls every 0.25 s."""
LOCAL_SYSTEM_CONFIG = {"worker_maximum_startup_concurrency": 8}
"""A sweep starts a process per trial, Train controller and worker, evaluator and teacher task;
with Ray's default (one per CPU) a 2-core laptop passes 5 × 2 = 10 of them in a sweep, and the
raylet prints a warning about it on the console. 8: the warning comes at 40 processes."""


@dataclass(frozen=True)
class TrialBundle:
    """What one trial holds while it runs: with one worker, its own process holds the worker's
    share and fits in it; with more, its own CPU share plus its Ray Train workers."""

    trial_cpu: float
    workers: int
    worker_cpu: float
    use_gpu: bool
    worker_gpu: float = 1.0

    @property
    def in_process(self) -> bool:
        return self.workers == 1

    @property
    def cpus(self) -> float:
        own = 0.0 if self.in_process else self.trial_cpu
        return own + self.workers * self.worker_cpu

    @property
    def gpus(self) -> float:
        return self.workers * self.worker_gpu if self.use_gpu else 0

    def trial_resources(self) -> dict[str, float]:
        """The resources of the trial's own process (Tune's `with_resources`)."""
        if not self.in_process:
            return {"cpu": self.trial_cpu}
        return {"cpu": self.worker_cpu, **({"gpu": self.worker_gpu} if self.use_gpu else {})}


@dataclass(frozen=True)
class Reserved:
    """What a sweep holds for as long as it runs: `count` evaluator actors, each with `cpus`
    CPUs and `gpus` GPUs."""

    count: int
    cpus: float
    gpus: float

    def describe(self) -> str:
        return f"{self.count} evaluator(s) × {self.cpus:g} CPU" + (
            f" + {self.gpus:g} GPU" if self.gpus else ""
        )


def ray_address(address: str | None) -> str | None:
    """The cluster to join: `--address`, else `$RAY_ADDRESS`, else None (a private local Ray)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def start_ray(
    address: str | None,
    workdir: Path,
    num_cpus: int | None = None,
    verbose: bool = True,
    dashboard: bool = False,
) -> None:
    """Join the cluster at `address`, or start a private local one whose files live in `workdir`.

    `num_cpus` and `dashboard` shape a local Ray only; a cluster has what it has. Not `verbose`: the
    workers' output stays in Ray's session logs instead of being forwarded to this console, and
    Ray's own logging here shows warnings and errors only."""
    if ray.is_initialized():
        return
    console = {
        "log_to_driver": verbose,
        "logging_level": logging.INFO if verbose else logging.WARNING,
    }
    address = ray_address(address)
    if address:
        if num_cpus is not None:
            print(f"spanlift: joining the Ray cluster at {address}; --num-cpus is for a local Ray")
        check_reachable(address)
        try:
            ray.init(address=address, **console)
        except ConnectionError as exc:  # `auto` with no cluster on this machine, say
            raise SettingsError(f"Ray cluster {address}: {str(exc).splitlines()[0]}") from None
        return
    os.environ.update(LOCAL_AUTH)
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=dashboard,
        _temp_dir=str(ray_temp_dir(workdir)),
        runtime_env={"env_vars": LOCAL_WORKER_ENV},
        _system_config=LOCAL_SYSTEM_CONFIG,
        **console,
    )


REACH_TIMEOUT_S = 5.0


def check_reachable(address: str) -> None:
    """Refuse at once a cluster address (`host:port`, `ray://host:port`) that nothing answers
    at: Ray itself would wait minutes for its head. `auto` is left to Ray, which finds the
    cluster this machine belongs to or says there is none."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise SettingsError(
            f"Ray cluster address {address!r}: expected host:port, ray://host:port or auto"
        )
    try:
        socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise SettingsError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start its head "
            "(`ray start --head`) or pass the address it printed"
        ) from None


def ray_temp_dir(workdir: Path) -> Path:
    """A fresh Ray temp folder, linked from `workdir/ray-logs`.

    Ray's socket paths must stay under 107 bytes and its session folder adds about 70, so the
    folder itself lives under a short system temp path; the link keeps the logs beside the run.
    """
    root = Path(tempfile.gettempdir()) / "spanlift-ray"
    root.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix="r", dir=root))
    workdir.mkdir(parents=True, exist_ok=True)
    link = workdir / "ray-logs"
    if link.is_symlink():
        link.unlink()
    if not link.exists():
        link.symlink_to(temp, target_is_directory=True)
    return temp


def check_fits(bundle: TrialBundle, reserved: Reserved, local: bool) -> int:
    """How many trials run at once beside the sweep's evaluators; an error if the evaluators and
    one trial can never be placed together on this cluster.

    On a cluster that autoscales, nodes may not exist yet, so only a local cluster is strict.
    """
    available = ray.cluster_resources()
    cpus = available.get("CPU", 0.0) - reserved.count * reserved.cpus
    gpus = available.get("GPU", 0.0) - reserved.count * reserved.gpus
    held = f"the cluster has {cpus:g} beside the sweep's {reserved.describe()}"
    problems = []
    if gpus < -1e-9:
        problems.append(
            f"the sweep's {reserved.describe()} need {reserved.count * reserved.gpus:g} GPUs but "
            f"the cluster has {available.get('GPU', 0.0):g}"
        )
    elif bundle.cpus > cpus + 1e-9:
        parts = (
            f"worker_cpu {bundle.worker_cpu:g}"
            if bundle.in_process
            else (
                f"trial_cpu {bundle.trial_cpu:g} + {bundle.workers} workers × worker_cpu "
                f"{bundle.worker_cpu:g}"
            )
        )
        problems.append(f"{bundle.cpus:g} CPUs per trial ({parts}) but {held}")
    if bundle.gpus > max(gpus, 0) + 1e-9:
        problems.append(
            f"{bundle.gpus:g} GPUs per trial ({bundle.workers} workers × worker_gpu "
            f"{bundle.worker_gpu:g}) but "
            f"the cluster has {gpus:g} beside the sweep's {reserved.describe()}"
        )
    if problems and local:
        raise SettingsError(
            "resources: a trial cannot be placed: " + "; ".join(problems) + ". Lower "
            "resources.workers, resources.worker_cpu, resources.worker_gpu, "
            "resources.evaluator_cpu, resources.evaluator_gpu or evaluation.evaluators, or set "
            "use_gpu: false"
        )
    if problems:
        print(f"spanlift: waiting for the autoscaler: {'; '.join(problems)}")
        return 1
    return concurrent_trials(bundle, cpus, gpus)


def concurrent_trials(bundle: TrialBundle, cpus: float, gpus: float) -> int:
    """Trials whose fits run at once on `cpus` and `gpus`; with Ray Train workers, one more when
    its own small bundle fits in what is left: it scores on the evaluators (an analytic solver)
    or waits for the workers of the next fit, which never deadlocks since one fit's workers
    always fit."""
    by_cpu = int((cpus + 1e-9) // bundle.cpus)
    by_gpu = int((gpus + 1e-9) // bundle.gpus) if bundle.gpus else by_cpu
    fits = max(1, min(by_cpu, by_gpu))
    if bundle.in_process:
        return fits
    return fits + (1 if cpus - fits * bundle.cpus >= bundle.trial_cpu - 1e-9 else 0)
