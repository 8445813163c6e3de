"""Parameters, FLOPs and latency per image of SpanLift against its base solver (DyWeight).

Measured on the digits backbone and on a randomly initialised U-Net with the widths, depth and
attention of EDM's ImageNet-64 network, so the overhead ratio compares with the paper's
(+0.04 % parameters, +0.24 % FLOPs, +3.1 % latency on an A6000). Parameters and FLOPs are the
`overhead` metric's (`spanlift eval --metrics overhead`, a sweep's `evaluation.metrics`).

    python benchmarks/overhead.py [--nfe 5] [--batch 4] [--repeats 7] [--skip-large]
"""

import argparse
import statistics
import time
from typing import Any

import torch
from torch import Tensor

from spanlift.backbones import Backbone, load_backbone
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.unet import UNet, imagenet64_size
from spanlift.platform.evaluation.metrics.overhead import parameter_count, rollout_flops
from spanlift.solvers import SolverSpec, build_solver


class RandomImageNet64(Backbone):
    """A randomly initialised ImageNet-64-sized U-Net: a stand-in with the real network's cost."""

    sigma_min, sigma_max, shape = 0.002, 80.0, (3, 64, 64)

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = EDMPrecond(UNet(imagenet64_size()))
        self.freeze()

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        return self.model(x, sigma)

    def identity(self) -> str:
        return "random-imagenet64"


def rollout_time(solver: torch.nn.Module, backbone: Backbone, x: Tensor) -> float:
    start = time.perf_counter()
    solver(backbone.denoise, x)
    return time.perf_counter() - start


@torch.no_grad()
def measure(
    backbone: Backbone, specs: list[SolverSpec], batch: int, repeats: int
) -> list[dict[str, float]]:
    """Parameters and FLOPs per image of each spec as the `overhead` metric counts them, and its
    median latency per image over rollouts of `batch` images, interleaved after a warm-up."""
    solvers = [
        build_solver(s, backbone.sigma_min, backbone.sigma_max, backbone.shape[0]) for s in specs
    ]
    x = backbone.prior(
        torch.randn(batch, *backbone.shape, generator=torch.Generator().manual_seed(0))
    )
    results = []
    for solver in solvers:
        flops, _ = rollout_flops(solver, backbone)
        params = parameter_count(backbone) + parameter_count(solver)
        results.append({"params": params, "gflops": flops / 1e9})
        rollout_time(solver, backbone, x)  # the warm-up
    times: list[list[float]] = [[] for _ in solvers]
    for _ in range(repeats):
        for solver, record in zip(solvers, times, strict=True):
            record.append(rollout_time(solver, backbone, x))
    for result, record in zip(results, times, strict=True):
        result["ms"] = 1000 * statistics.median(record) / batch
    return results


def report(name: str, base: dict[str, float], lifted: dict[str, float]) -> None:
    print(f"\n{name}")
    print(f"{'':<22}{'DyWeight':>14}{'SpanLift':>14}{'overhead':>11}")
    for key, label, scale in (
        ("params", "params (M)", 1e-6),
        ("gflops", "GFLOPs / image", 1),
        ("ms", "latency ms / image", 1),
    ):
        b, s = base[key] * scale, lifted[key] * scale
        print(f"{label:<22}{b:>14.3f}{s:>14.3f}{100 * (s - b) / b:>+10.2f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nfe", type=int, default=5)
    p.add_argument("--batch", type=int, default=4, help="images per rollout for the large network")
    p.add_argument("--repeats", type=int, default=7, help="timed rollouts per solver (median)")
    p.add_argument("--skip-large", action="store_true", help="only the digits backbone")
    args = p.parse_args()
    print(f"device: cpu, {torch.get_num_threads()} threads, NFE {args.nfe}")
    base = SolverSpec("dyweight", args.nfe)
    lifted = SolverSpec("spanlift", args.nfe, settings={"base": "dyweight"})
    backbones = [("digits U-Net, 1×16×16, batch 64", load_backbone("digits"), 64)]
    if not args.skip_large:
        backbones.append(
            (f"ImageNet-64-size U-Net, 3×64×64, batch {args.batch}", RandomImageNet64(), args.batch)
        )
    for name, backbone, batch in backbones:
        report(name, *measure(backbone, [base, lifted], batch, args.repeats))


if __name__ == "__main__":
    main()
