"""Every code path on a device: rollouts, fits, DDP and the FID detector, where the data lives.

- rollout: every registered solver (those built around a base, over every base that takes
  them) on the embedded `gmm`, `digits` and `nowcast` backbones, noise, conditioning and
  solver on the device; the endpoint must be finite, on the device, in the noise's dtype. The
  digits backbone again with float16 and bfloat16 weights (EDM's and SANA/FLUX's dtypes).
- fit: every learned solver fitted for a few iterations on the digits backbone on the device,
  from a teacher generated there; its parameters must stay on the device and finite.
- ddp: a SpanLift fit inside a one-process process group (NCCL on a GPU, gloo on the CPU), the
  path Ray Train's workers take.
- figures: FID feature throughput of torch-fidelity's Inception-v3 (random weights: the cost is
  the architecture's) and images/s per NFE of the digits backbone.
"""

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from spanlift.backbones import Backbone, load_backbone
from spanlift.errors import SpanliftError
from spanlift.nowcasting.synthetic import write_synthetic_sevir
from spanlift.platform.detectors.registry import Detector
from spanlift.platform.doctor.report import Outcome, checked
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.model_statistics import model_statistics
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.teacher import TeacherSet, generate_teacher, teacher_for
from spanlift.solvers import SOLVERS, SolverSpec, solver_settings
from spanlift.solvers.loading import build, is_learnable
from spanlift.solvers.model_statistics import ModelStatistics
from spanlift.solvers.on_base import statistics_request, use_statistics

TEACHER = SolverSpec("heun", 9)
FIT = FitSettings(iterations=4, batch_size=8, log_every=2, checkpoint_every=4, validate_every=2)
HALF = (torch.float16, torch.bfloat16)
Check = tuple[str, Callable[[], str | None]]


def buildable(spec: SolverSpec) -> bool:
    """Whether `spec` builds (its NFE is reachable, its base takes it)."""
    try:
        build(spec, load_backbone("gmm"))
    except SpanliftError:
        return False
    return True


SCHEDULES = ("edm", "edm_to_zero", "logsnr")
"""The schedules tried in turn: some solvers step only on a grid that ends at σ = 0 (diffusers'
Heun), or on their own (k-diffusion's DPM-Solver-fast, uniform in log σ)."""


def first_buildable(name: str, settings: dict) -> SolverSpec | None:
    """`name` with `settings` at the smallest NFE from 3 on that it can spend exactly, on the
    first of `SCHEDULES` it steps on; None where none builds (a peer solver whose library is
    not installed, a base the solver does not take)."""
    specs = (
        SolverSpec(name, nfe, schedule, settings) for schedule in SCHEDULES for nfe in range(3, 7)
    )
    return next((spec for spec in specs if buildable(spec)), None)


def takes_a_base(cls: type) -> bool:
    try:
        return "base" in solver_settings(cls)
    except SpanliftError:  # a peer solver whose library is not installed: it takes none
        return False


def solver_specs() -> list[SolverSpec]:
    """One spec per registered solver; a solver built around a base, once over each base."""
    specs = []
    for name, cls in SOLVERS:
        if not takes_a_base(cls):
            specs.append(first_buildable(name, {}))
            continue
        specs += [first_buildable(name, {"base": base}) for base in SOLVERS.names()]
    return [spec for spec in specs if spec is not None]


def on_device(spec: SolverSpec, backbone: Backbone, device: torch.device) -> torch.nn.Module:
    return build(spec, backbone).to(device)


def rollout_check(spec: SolverSpec, backbone: Backbone, device: torch.device, dtype: torch.dtype):
    def body() -> None:
        solver = on_device(spec, backbone, device)
        if statistics_request(solver) is not None:  # a fit estimates them (the fit check)
            sigmas = (backbone.sigma_min, backbone.sigma_max)
            use_statistics(solver, ModelStatistics.degenerate(*sigmas, tuple(backbone.shape)))
        noise = torch.randn(4, *backbone.shape, device=device, dtype=dtype)
        cond = backbone.conditioning(range(4))
        if cond is not None:
            cond = cond.to(device, dtype if cond.is_floating_point() else None)
        with torch.no_grad():
            out = rollout(solver, backbone, noise, cond)
        if out.device.type != device.type or out.dtype != dtype:
            raise AssertionError(f"endpoint on {out.device} in {out.dtype}")
        if not torch.isfinite(out).all():
            raise AssertionError("endpoint not finite")

    return body


DOCTOR_STATISTICS = {"timesteps": 64, "samples": 16}
"""The model statistics a fit check estimates where its solver asks for some: the same estimate
on the device as a fit's, at a size that takes a moment (a fit's own is 1 200 × 1 024)."""


def fit_check(spec: SolverSpec, backbone: Backbone, teacher: TeacherSet, device: torch.device):
    def body() -> str:
        solver = on_device(spec, backbone, device)
        request = statistics_request(solver)
        if request is not None:
            use_statistics(solver, model_statistics(backbone, teacher, request | DOCTOR_STATISTICS))
        result = fit(solver, backbone, teacher_for(solver, teacher, backbone), FIT, progress=False)
        for name, p in solver.named_parameters():
            if p.device.type != device.type or not torch.isfinite(p).all():
                raise AssertionError(f"parameter {name} on {p.device} or not finite")
        return f"loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g}"

    return body


def ddp_check(backbone: Backbone, teacher: TeacherSet, device: torch.device):
    def body() -> str:
        backend = "nccl" if device.type == "cuda" else "gloo"
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        torch.distributed.init_process_group(backend, rank=0, world_size=1)
        try:
            spec = first_buildable("spanlift", {})
            result = fit(on_device(spec, backbone, device), backbone, teacher, FIT, progress=False)
        finally:
            torch.distributed.destroy_process_group()
        return f"{backend}: loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g}"

    return body


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_inception(device: torch.device) -> Detector:
    """torch-fidelity's `inception-v3-compat` extractor with random weights, as a Detector."""
    from spanlift.platform.detectors.inception import DETECTOR, FEATURE, _Skeleton

    empty = Path(tempfile.mkdtemp()) / "empty.pth"
    torch.save({}, empty)
    extractor = _Skeleton(DETECTOR, [FEATURE], feature_extractor_weights_path=str(empty))
    return Detector("inception", extractor.eval(), empty).to(device)


def timed(call: Callable[[], object], device: torch.device, repeats: int = 3) -> float:
    """The fastest of `repeats` calls after one warm-up, in seconds."""
    call()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def fid_throughput(device: torch.device, images: int, batch: int) -> str:
    """Images/s of the Inception feature pass (uint8 in, 2048-d out) on 32×32 images."""
    detector = random_inception(device)
    data = torch.rand(batch, 3, 32, 32) * 2 - 1
    seconds = timed(lambda: detector.features(data), device, repeats=max(1, images // batch))
    return f"{batch / seconds:.0f} images/s (batch {batch} of 32x32)"


def nfe_throughput(backbone: Backbone, device: torch.device, batch: int) -> str:
    """Images/s per NFE of the backbone's denoiser at `batch`."""
    x = torch.randn(batch, *backbone.shape, device=device)
    sigma = torch.tensor(1.0, device=device)
    with torch.no_grad():
        seconds = timed(lambda: backbone.denoise(x, sigma), device)
    return f"{batch / seconds:.0f} images/s per NFE (digits, batch {batch})"


def embedded_backbones(device: torch.device) -> dict[str, Backbone]:
    storms = write_synthetic_sevir(Path(tempfile.mkdtemp()) / "sevir", events=8, seed=0)
    backbones = {
        "gmm": load_backbone("gmm"),
        "digits": load_backbone("digits"),
        "nowcast": load_backbone("nowcast", data=str(storms)),
    }
    return {name: b.freeze().to(device) for name, b in backbones.items()}


def device_checks(
    device: torch.device, fid_images: int = 2000, batch: int = 500
) -> Iterator[Check]:
    """The checks of the module docstring, in order, as (name, body) pairs."""
    specs = solver_specs()
    backbones = embedded_backbones(device)
    for name, backbone in backbones.items():
        for spec in specs:
            yield (
                f"rollout {name} {spec.label()}",
                rollout_check(spec, backbone, device, torch.float32),
            )
    for dtype in HALF:
        half = load_backbone("digits").freeze().to(device, dtype)
        for spec in specs:
            yield (
                f"rollout digits/{str(dtype).removeprefix('torch.')} {spec.label()}",
                rollout_check(spec, half, device, dtype),
            )
    digits = backbones["digits"]
    teacher = generate_teacher(digits, range(48), TEACHER, progress=False)
    for spec in specs:
        if is_learnable(build(spec, digits)):
            yield f"fit digits {spec.label()}", fit_check(spec, digits, teacher, device)
    yield "fit in a one-process DDP group", ddp_check(digits, teacher, device)
    yield "FID features (Inception-v3)", lambda: fid_throughput(device, fid_images, batch)
    yield "denoiser throughput", lambda: nfe_throughput(digits, device, batch)


def run_device_checks(device: torch.device, **options: int) -> Iterator[Outcome]:
    for name, body in device_checks(device, **options):
        yield checked(name, body)
