"""Every solver, embedded backbone and fit on a CUDA device, in the backbone's dtype, plus figures.

Checks (each prints `pass` or `FAIL` with the error's last line):

- rollout: every registered solver (SpanLift and LD3 over each base) on the embedded backbones
  (gmm, digits, nowcast) with noise, conditioning and solver on the device; the endpoint must
  be finite, on the device and in the noise's dtype. The digits backbone again in float16 and
  bfloat16 (weights and noise), the dtypes EDM and SANA/FLUX run in.
- fit: every learned solver fitted for a few iterations on the digits backbone on the device,
  from a teacher generated there; its parameters must stay on the device and finite.
- ddp: the same SpanLift fit inside a one-process NCCL group (the path Ray Train's workers take).

Figures, on networks with random weights (the cost is the architecture's):

- FID feature throughput of torch-fidelity's Inception-v3 on 10 000 images of 32×32, batch 500.
- EDM CIFAR-10-size U-Net (`backbone_latency.cifar10_size`), batch 512: images/s of whole
  rollouts at NFE 5 for Euler, iPNDM, DPM-Solver++(2M), DyWeight and SpanLift, in float32,
  bfloat16 and float16 weights; and FID of 50 000 samples end to end (sampling with DyWeight at
  NFE 5, Inception features, moments, the distance), with where the time went.

    python benchmarks/gpu_check.py [--device cuda] [--skip-fid] [--skip-edm] [--fid-samples N]
        [--batch 512]
"""

import argparse
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from spanlift.backbones import Backbone, load_backbone
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.unet import UNet
from spanlift.nowcasting.synthetic import write_synthetic_sevir
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.teacher import generate_teacher, teacher_for
from spanlift.solvers import SOLVERS, SolverSpec, build_solver

BASES = ("euler", "heun", "ipndm", "dyweight", "dpm_solver_pp", "unipc", "dlms")
TEACHER = SolverSpec("heun", 9)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FIT = FitSettings(iterations=4, batch_size=8, log_every=2, checkpoint_every=4, validate_every=2)


def solver_specs() -> Iterator[SolverSpec]:
    """One spec per registered solver, and SpanLift and LD3 over each base."""
    for name in SOLVERS.names():
        if name in ("spanlift", "ld3"):
            continue
        yield SolverSpec(name, 4 if name in ("amed", "amed_plugin", "epd", "epd_plugin") else 3)
    for base in BASES:
        for name in ("spanlift", "ld3"):
            yield SolverSpec(name, 5 if base == "heun" else 4, settings={"base": base})


def check(label: str, body: Callable[[], str | None], failures: list[str]) -> None:
    try:
        note = body()
        print(f"pass  {label}{'  ' + note if note else ''}", flush=True)
    except Exception as error:  # a check reports its failure and the run goes on
        failures.append(label)
        last = traceback.format_exception_only(error)[-1].strip()
        print(f"FAIL  {label}  {last}", flush=True)


def build(spec: SolverSpec, backbone: Backbone, device: torch.device) -> torch.nn.Module:
    solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    return solver.to(device)


def check_rollout(spec: SolverSpec, backbone: Backbone, device: torch.device, dtype: torch.dtype):
    def body() -> None:
        solver = build(spec, backbone, device)
        seeds = list(range(4))
        noise = torch.randn(4, *backbone.shape, device=device, dtype=dtype)
        cond = backbone.conditioning(seeds)
        cond = (
            None if cond is None else cond.to(device, dtype if cond.is_floating_point() else None)
        )
        with torch.no_grad():
            out = rollout(solver, backbone, noise, cond)
        if out.device.type != device.type or out.dtype != dtype:
            raise AssertionError(f"endpoint on {out.device} in {out.dtype}")
        if not torch.isfinite(out).all():
            raise AssertionError("endpoint not finite")

    return body


def check_fit(spec: SolverSpec, backbone: Backbone, teacher, device: torch.device):
    def body() -> str:
        solver = build(spec, backbone, device)
        if not any(p.requires_grad for p in solver.parameters()):
            return "(no parameters)"
        data = teacher_for(solver, teacher, backbone)
        result = fit(solver, backbone, data, FIT, progress=False)
        for name, p in solver.named_parameters():
            if p.device.type != device.type or not torch.isfinite(p).all():
                raise AssertionError(f"parameter {name} on {p.device}, finite={p.isfinite().all()}")
        return f"loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g}"

    return body


def check_ddp(backbone: Backbone, teacher, device: torch.device):
    def body() -> str:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
        try:
            solver = build(
                SolverSpec("spanlift", 4, settings={"base": "dyweight"}), backbone, device
            )
            result = fit(solver, backbone, teacher, FIT, progress=False)
        finally:
            torch.distributed.destroy_process_group()
        return f"loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g}"

    return body


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_inception(device: torch.device):
    """torch-fidelity's `inception-v3-compat` extractor with random weights, as a Detector."""
    from spanlift.platform.detectors.inception import DETECTOR, FEATURE, _Skeleton
    from spanlift.platform.detectors.registry import Detector

    folder = Path(tempfile.mkdtemp())
    empty = folder / "empty.pth"
    torch.save({}, empty)
    extractor = _Skeleton(DETECTOR, [FEATURE], feature_extractor_weights_path=str(empty))
    return Detector("inception", extractor.eval(), empty).to(device)


def fid_throughput(device: torch.device, images: int = 10_000, batch: int = 500) -> str:
    """Images/s of torch-fidelity's Inception feature pass (uint8 in, 2048-d out), random weights."""
    detector = random_inception(device)
    data = torch.rand(images, 3, 32, 32) * 2 - 1
    detector.features(data[:batch])  # warm-up
    sync(device)
    start = time.perf_counter()
    for i in range(0, images, batch):
        detector.features(data[i : i + batch])
    sync(device)
    seconds = time.perf_counter() - start
    return f"{images / seconds:.0f} images/s ({images} images of 32x32, batch {batch})"


def edm_cifar10(device: torch.device, dtype: torch.dtype) -> Backbone:
    from backbone_latency import RandomEDM, cifar10_size  # benchmarks/ is on sys.path

    torch.manual_seed(0)
    net = EDMPrecond(UNet(cifar10_size()))
    return RandomEDM(net, (3, 32, 32)).to(device, dtype)


EDM_SOLVERS = (
    SolverSpec("euler", 5),
    SolverSpec("ipndm", 5),
    SolverSpec("dpm_solver_pp", 5),
    SolverSpec("dyweight", 5),
    SolverSpec("spanlift", 5, settings={"base": "dyweight"}),
)


@torch.no_grad()
def edm_throughput(device: torch.device, batch: int = 512, repeats: int = 3) -> None:
    """Images/s of whole NFE-5 rollouts on the EDM CIFAR-10-size net, per solver and dtype."""
    print(f"\nEDM CIFAR-10-size U-Net, batch {batch}, NFE 5: images/s of whole rollouts")
    print(f"{'solver':<28}" + "".join(f"{d!s:>16}" for d in DTYPES))
    nets = {dtype: edm_cifar10(device, dtype) for dtype in DTYPES}
    for spec in EDM_SOLVERS:
        row = f"{spec.label():<28}"
        for dtype, net in nets.items():
            solver = build(spec, net, device)
            noise = torch.randn(batch, *net.shape, device=device, dtype=dtype)
            rollout(solver, net, noise)  # warm-up
            times = []
            for _ in range(repeats):
                sync(device)
                start = time.perf_counter()
                rollout(solver, net, noise)
                sync(device)
                times.append(time.perf_counter() - start)
            row += f"{batch / statistics.median(times):>16.0f}"
        print(row, flush=True)


@torch.no_grad()
def fid_end_to_end(device: torch.device, samples: int, batch: int = 512) -> str:
    """Wall time of an FID over `samples` DyWeight NFE-5 samples of the EDM CIFAR-10-size net."""
    from spanlift.platform.evaluation.frechet import FeatureMoments, frechet_distance, merge_all

    net = edm_cifar10(device, torch.float32)
    solver = build(SolverSpec("dyweight", 5), net, device)
    detector = random_inception(device)
    parts, spent = [], {"sampling": 0.0, "features": 0.0, "moments": 0.0}
    start = time.perf_counter()
    for first in range(0, samples, batch):
        n = min(batch, samples - first)
        clock = time.perf_counter()
        images = rollout(solver, net, torch.randn(n, *net.shape, device=device))
        sync(device)
        spent["sampling"] += time.perf_counter() - clock
        clock = time.perf_counter()
        features = detector.features(images)
        spent["features"] += time.perf_counter() - clock
        clock = time.perf_counter()
        parts.append(FeatureMoments.of(features))
        spent["moments"] += time.perf_counter() - clock
    clock = time.perf_counter()
    merged = merge_all(parts)
    frechet_distance(merged, merged)
    spent["distance"] = time.perf_counter() - clock
    total = time.perf_counter() - start
    shares = ", ".join(f"{k} {v:.1f} s" for k, v in spent.items())
    return f"{samples} samples in {total:.1f} s ({samples / total:.0f} images/s): {shares}"


def correctness(device: torch.device, failures: list[str]) -> None:
    """Rollouts of every solver on every embedded backbone and dtype, fits, DDP (module doc)."""
    storms = write_synthetic_sevir(Path(tempfile.mkdtemp()) / "sevir", events=16, seed=0)
    backbones = {
        "gmm": load_backbone("gmm"),
        "digits": load_backbone("digits"),
        "nowcast": load_backbone("nowcast", data=str(storms)),
    }
    backbones = {name: b.freeze().to(device) for name, b in backbones.items()}
    for name, backbone in backbones.items():
        for spec in solver_specs():
            body = check_rollout(spec, backbone, device, torch.float32)
            check(f"rollout {name} {spec.label()}", body, failures)
    for dtype in (torch.float16, torch.bfloat16):
        half = load_backbone("digits").freeze().to(device, dtype)
        for spec in solver_specs():
            body = check_rollout(spec, half, device, dtype)
            check(f"rollout digits/{dtype} {spec.label()}", body, failures)
    digits = backbones["digits"]
    teacher = generate_teacher(digits, range(48), TEACHER, progress=False, device=device)
    for spec in solver_specs():
        check(f"fit digits {spec.label()}", check_fit(spec, digits, teacher, device), failures)
    body = check_ddp(digits, teacher, device)
    check("fit digits spanlift[dyweight] in a one-process NCCL group", body, failures)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--skip-fid", action="store_true")
    p.add_argument("--skip-edm", action="store_true")
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--fid-samples", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=512, help="EDM-size rollouts and FID sampling")
    args = p.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}", flush=True)
    failures: list[str] = []
    if not args.skip_checks:
        correctness(device, failures)
    if not args.skip_fid:
        check("FID features, inception on the device", lambda: fid_throughput(device), failures)
    if not args.skip_edm:
        check("EDM-size rollouts", lambda: edm_throughput(device, args.batch), failures)
        check(
            "FID end to end", lambda: fid_end_to_end(device, args.fid_samples, args.batch), failures
        )
    print(f"\n{len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))


if __name__ == "__main__":
    main()
