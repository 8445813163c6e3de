"""What `SpanLiftScheduler`'s replay costs: a sampling run through the scheduler against the same
solver's own rollout, both with a zero-cost stand-in model (D = 0 in the denoiser form), so the
difference is the scheduler's whole overhead (the replayed solver arithmetic, O(NFE²) steps of
it, and the conversions). A FLUX-1024 latent (16×128×128) by default; the replayed samples are
checked equal to the rollout's.

    python benchmarks/scheduler_replay.py [--shape 16 128 128] [--nfe 5 10] [--repeats 3]
        [--device cpu|cuda]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from spanlift.backbones.base import PipelineForm
from spanlift.export.scheduler import SpanLiftScheduler, export_diffusers
from spanlift.solvers import SolverSpec, build_solver

SOLVERS = ("ipndm", "dyweight", "spanlift")


def stand_in_backbone(shape: tuple[int, ...]) -> SimpleNamespace:
    """What export reads of a backbone, for a denoiser-form model of `shape`."""
    return SimpleNamespace(
        name="stand-in",
        sigma_min=0.002,
        sigma_max=80.0,
        shape=shape,
        identity=lambda: "stand-in",
        pipeline_form=lambda: PipelineForm("denoiser", shape),
    )


def through_scheduler(scheduler: SpanLiftScheduler, noise: torch.Tensor) -> torch.Tensor:
    scheduler.set_timesteps(scheduler.nfe)
    x = noise * scheduler.init_noise_sigma
    for t in scheduler.timesteps:
        x = scheduler.step(torch.zeros_like(x), t, x).prev_sample
    return x


def rollout(solver, x_T: torch.Tensor):
    """The solver's own rollout from x_T with the stand-in model, as a function of nothing."""
    return lambda: solver(lambda x, sigma: torch.zeros_like(x), x_T)


def seconds(run, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[16, 128, 128])
    parser.add_argument("--nfe", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    shape = tuple(args.shape)
    backbone = stand_in_backbone(shape)
    noise = torch.randn(1, *shape, generator=torch.Generator().manual_seed(0)).to(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"latent {'×'.join(map(str, shape))}, batch 1, {where}, {torch.get_num_threads()} threads"
    )
    print(f"{'solver':<10}{'nfe':>4}{'rollout s':>11}{'scheduler s':>13}{'overhead s':>12}")
    for name in SOLVERS:
        for nfe in args.nfe:
            solver = build_solver(SolverSpec(name, nfe), 0.002, 80.0, shape[0]).eval().to(device)
            with tempfile.TemporaryDirectory() as folder, torch.no_grad():
                export_diffusers(solver, backbone, Path(folder))
                scheduler = SpanLiftScheduler.from_pretrained(folder)
                through_scheduler(scheduler, noise)  # warm-up: the scheduler's solver on `device`
                x_T = noise * backbone.sigma_max
                own = solver(lambda x, sigma: torch.zeros_like(x), x_T)
                assert torch.allclose(through_scheduler(scheduler, noise), own, atol=1e-5)
                plain = seconds(rollout(solver, x_T), args.repeats, device)
                replayed = seconds(
                    lambda s=scheduler: through_scheduler(s, noise), args.repeats, device
                )
            print(f"{name:<10}{nfe:>4}{plain:>11.4f}{replayed:>13.4f}{replayed - plain:>12.4f}")


if __name__ == "__main__":
    main()
