"""Every code path on a CUDA device (`spanlift doctor`'s device checks), then GPU figures.

Checks: `spanlift.platform.doctor.device` (every solver on the embedded backbones in float32,
float16 and bfloat16, every learned fit, a fit in a one-process NCCL group, the FID detector).

Figures, on networks with random weights (the cost is the architecture's):

- EDM CIFAR-10-size U-Net (`backbone_latency.cifar10_size`), batch 512: images/s of whole
  rollouts at NFE 5 for Euler, iPNDM, DPM-Solver++(2M), DyWeight and SpanLift, in float32,
  bfloat16 and float16 weights; and FID of 50 000 samples end to end (sampling with DyWeight at
  NFE 5, Inception features, moments, the distance), with where the time went.

    python benchmarks/gpu_check.py [--device cuda] [--skip-checks] [--skip-edm]
        [--fid-samples 50000] [--batch 512]
"""

import argparse
import statistics
import time

import torch

from spanlift.backbones import Backbone
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.unet import UNet
from spanlift.cli.devices import device_option
from spanlift.platform.doctor.device import (
    on_device,
    random_inception,
    run_device_checks,
    synchronize,
)
from spanlift.platform.sampling.rollout import rollout
from spanlift.solvers import SolverSpec

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


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
            solver = on_device(spec, net, device)
            noise = torch.randn(batch, *net.shape, device=device, dtype=dtype)
            rollout(solver, net, noise)  # warm-up
            times = []
            for _ in range(repeats):
                synchronize(device)
                start = time.perf_counter()
                rollout(solver, net, noise)
                synchronize(device)
                times.append(time.perf_counter() - start)
            row += f"{batch / statistics.median(times):>16.0f}"
        print(row, flush=True)


@torch.no_grad()
def fid_end_to_end(device: torch.device, samples: int, batch: int = 512) -> str:
    """Wall time of an FID over `samples` DyWeight NFE-5 samples of the EDM CIFAR-10-size net."""
    from spanlift.platform.evaluation.metrics.frechet import (
        FeatureMoments,
        frechet_distance,
        merge_all,
    )

    net = edm_cifar10(device, torch.float32)
    solver = on_device(SolverSpec("dyweight", 5), net, device)
    detector = random_inception(device)
    parts, spent = [], {"sampling": 0.0, "features": 0.0, "moments": 0.0}
    start = time.perf_counter()
    for first in range(0, samples, batch):
        n = min(batch, samples - first)
        clock = time.perf_counter()
        images = rollout(solver, net, torch.randn(n, *net.shape, device=device))
        synchronize(device)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", type=device_option)
    p.add_argument("--skip-checks", action="store_true")
    p.add_argument("--skip-edm", action="store_true")
    p.add_argument("--fid-samples", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=512, help="EDM-size rollouts and FID sampling")
    args = p.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}", flush=True)
    failed = []
    if not args.skip_checks:
        for outcome in run_device_checks(device, batch=args.batch):
            print(outcome.line(), flush=True)
            failed += [outcome.name] if outcome.status == "FAIL" else []
    if not args.skip_edm:
        edm_throughput(device, args.batch)
        print(fid_end_to_end(device, args.fid_samples, args.batch))
    print(f"\n{len(failed)} checks failed" + (": " + "; ".join(failed) if failed else ""))


if __name__ == "__main__":
    main()
