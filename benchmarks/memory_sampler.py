"""Peak resident memory of a process tree by role, sampled with psutil from a background thread.

Every `interval` seconds the sampler walks this process and all its descendants (a local Ray's
GCS, raylet and workers are children of the driver that started it) and keeps, per role, the
largest resident set size one process of that role had. A Ray worker's role is read off its
process title, which Ray sets to what it runs (`ray::EvaluatorActor.run`, `ray::RayTrainWorker`,
`ray::IDLE`); a process that changes role counts under each role it had when sampled.

    with MemorySampler() as memory:
        run_something()
    print(memory.peaks)   # {"driver": bytes, "evaluator actor": bytes, ...}
"""

import threading
from types import TracebackType

import psutil

ROLES = (
    ("EvaluatorActor", "evaluator actor"),
    ("RayTrainWorker", "Train worker"),
    ("teacher_chunk", "teacher task"),
    ("ImplicitFunc", "trial"),
    ("_Inner", "trial"),
    ("trial", "trial"),
    ("raylet", "Ray raylet"),
    ("gcs_server", "Ray GCS"),
)
"""(substring of the command line, role), first match wins; other Ray workers are 'Ray other'."""


def role(process: psutil.Process, driver: int) -> str:
    if process.pid == driver:
        return "driver"
    line = " ".join(process.cmdline())
    for needle, name in ROLES:
        if needle in line:
            return name
    return "Ray other" if "ray::" in line or "/ray/" in line else "other"


class MemorySampler:
    """Peak RSS (bytes) per role of the current process tree while the `with` block runs."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, root: psutil.Process) -> None:
        for process in [root, *root.children(recursive=True)]:
            try:
                name, rss = role(process, root.pid), process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.peaks[name] = max(self.peaks.get(name, 0), rss)

    def _run(self) -> None:
        root = psutil.Process()
        while not self._stop.is_set():
            self._sample(root)
            self._stop.wait(self.interval)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def lines(self) -> list[str]:
        """`role: peak MB` for each role seen, largest first."""
        ordered = sorted(self.peaks.items(), key=lambda item: -item[1])
        return [f"{name}: {peak / 2**20:.0f} MB" for name, peak in ordered]
