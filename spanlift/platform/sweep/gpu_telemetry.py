"""A fit's GPU use, sampled while it runs: memory peak (torch) and utilisation (NVML).

    gpu_memory_peak_mb   torch.cuda.max_memory_allocated of the fit's process, in MiB
    gpu_utilization      mean of NVML's busy percentage sampled every `interval` s (when pynvml
                         is importable); gpu_utilization_max its largest sample

On a device that is not CUDA nothing is sampled and `metrics()` is empty, so a CPU fit logs no
GPU metric rather than zeros.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

MIB = 2**20


def utilization_reader(device: torch.device) -> Callable[[], float] | None:
    """NVML's busy percentage of `device` (matched by PCI bus id, else by index); None without
    pynvml or NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        bus_id = getattr(torch.cuda.get_device_properties(device), "pci_bus_id", None)
        if bus_id:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
    except Exception:  # no pynvml, no driver library, a device NVML does not list
        return None
    return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def utilization_metrics(samples: list[float]) -> dict[str, float]:
    """The mean and largest utilisation sample; empty when nothing was sampled."""
    if not samples:
        return {}
    return {"gpu_utilization": sum(samples) / len(samples), "gpu_utilization_max": max(samples)}


@dataclass
class GpuTelemetry:
    """`with GpuTelemetry(device) as gpu: …; gpu.metrics()`: samples while the block runs."""

    device: torch.device
    interval: float = 0.5
    samples: list[float] = field(default_factory=list)
    active: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "GpuTelemetry":
        self.active = self.device.type == "cuda" and torch.cuda.is_available()
        if not self.active:
            return self
        torch.cuda.reset_peak_memory_stats(self.device)
        read = utilization_reader(self.device)
        if read is not None:
            self._thread = threading.Thread(target=self._sample, args=(read,), daemon=True)
            self._thread.start()
        return self

    def _sample(self, read: Callable[[], float]) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.samples.append(read())
            except Exception:  # a driver hiccup costs a sample, not the fit
                continue

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def metrics(self) -> dict[str, float]:
        """The memory peak and utilisation so far; empty off CUDA."""
        if not self.active:
            return {}
        peak = torch.cuda.max_memory_allocated(self.device) / MIB
        return {"gpu_memory_peak_mb": peak, **utilization_metrics(list(self.samples))}
