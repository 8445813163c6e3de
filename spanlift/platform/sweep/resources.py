"""What a sweep's trials, Ray Train workers and evaluators hold: the `resources:` section."""

from dataclasses import dataclass

from spanlift.platform.sweep.schema import GpuShare, PositiveInt, PositiveNumber, Switch


@dataclass(frozen=True)
class Resources:
    """What a trial holds. With one worker (`workers: 1`) a trial fits in its own process, which
    holds `worker_cpu` (and `worker_gpu`); with more, the trial's process holds `trial_cpu` and
    its fit runs on Ray Train workers of `worker_cpu` (and `worker_gpu`) each, in DDP."""

    trial_cpu: PositiveNumber = 0.1
    """CPUs of a trial's own process while Ray Train workers fit (`workers` > 1)."""
    workers: PositiveInt = 1
    worker_cpu: PositiveNumber = 0.9
    use_gpu: Switch = "auto"
    """True, False, or "auto": GPUs when the cluster has `worker_gpu` per worker and
    `evaluator_gpu` per evaluator at sweep start."""
    worker_gpu: GpuShare = 1.0
    """GPUs each Train worker holds when the sweep uses GPUs: a fraction (0.25) lets several
    small-solver fits share one GPU."""
    max_failures: int = 2
    evaluator_cpu: PositiveNumber | None = None
    """CPUs each of the sweep's evaluator actors holds for the whole sweep; None: as a worker."""
    evaluator_gpu: GpuShare = 1.0
    """GPUs each evaluator actor holds when the sweep uses GPUs (a fraction shares one)."""

    @property
    def evaluator_cpus(self) -> float:
        return self.evaluator_cpu or self.worker_cpu

    @property
    def fits_in_trial(self) -> bool:
        """A single-worker fit runs in the trial's own process: no Ray Train controller and
        worker group to start for it (they buy nothing for one worker)."""
        return self.workers == 1

    @property
    def fit_threads(self) -> int:
        """torch's threads for a fit in the trial's process: its whole CPUs, at least one."""
        return max(1, int(self.worker_cpu + 1e-9))

    def uses_gpus(self, gpus: float, evaluators: int) -> bool:
        """`use_gpu` resolved on a cluster with `gpus` GPUs: "auto" packs the Train workers'
        and the evaluators' shares when they all fit (workers × worker_gpu + evaluators ×
        evaluator_gpu ≤ gpus)."""
        if self.use_gpu != "auto":
            return bool(self.use_gpu)
        wanted = self.workers * self.worker_gpu + evaluators * self.evaluator_gpu
        return gpus > 0 and gpus >= wanted - 1e-9

    def per_worker(self) -> dict[str, float]:
        """Ray resources of one Train worker (ScalingConfig.resources_per_worker)."""
        return {"CPU": self.worker_cpu, **({"GPU": self.worker_gpu} if self.use_gpu else {})}
