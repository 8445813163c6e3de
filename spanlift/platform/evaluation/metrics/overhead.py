"""overhead: what sampling with the solver costs in parameters and arithmetic, the backbone and the
solver each (the paper's overhead table: SpanLift on DyWeight adds 0.04 % parameters, 0.24 % FLOPs
to a frozen ImageNet-64 EDM network).

    overhead.params_m       (P_backbone + P_solver) / 10⁶, every parameter of both modules (a
                            solver on a frozen fitted base counts the base's too)
    overhead.solver_params  P_solver
    overhead.gflops         F / 10⁹ for one image: F = F_backbone + F_solver over one rollout
    overhead.solver_mflops  F_solver / 10⁶ for one image: F minus every backbone call's F

F is counted by `torch.utils.flop_counter.FlopCounterMode` on a rollout of one sample (the first
FID seed, with its conditioning): 2 FLOPs per multiply-add of the matrix products, convolutions
and attention it knows; element-wise arithmetic, normalisation and decoding to images are not
counted. The backbone's calls are counted apart (a counter around each), so F_solver is what the
solver computes between them: 0 for a solver whose steps are element-wise (Euler, DyWeight), the
residual operator's convolutions for SpanLift. It applies to every solver; nothing is timed
(latency: `latency`).
"""

from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.platform.evaluation.metrics.base import METRICS, Finished, Row, SolverMetric
from spanlift.platform.sampling.rollout import on_device, seed_noise, solver_device
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers.base import Solver

NAME = "overhead"


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def counted(function: Callable[[], Tensor]) -> tuple[Tensor, int]:
    """`function()` and the FLOPs it computed."""
    with FlopCounterMode(display=False) as counter:
        result = function()
    return result, counter.get_total_flops()


@torch.no_grad()
def rollout_flops(solver: Solver, backbone: Backbone) -> tuple[int, int]:
    """(F, F_backbone) of a rollout of one sample (module docstring)."""
    seeds, device = [FID_FIRST_SEED], solver_device(solver)
    noise = seed_noise(seeds, backbone.shape).to(device)
    denoise = conditioned(backbone, on_device(backbone.conditioning(seeds), device))
    in_backbone = 0

    def counted_denoise(x: Tensor, sigma: Tensor) -> Tensor:
        nonlocal in_backbone
        out, flops = counted(lambda: denoise(x, sigma))
        in_backbone += flops
        return out

    _, total = counted(lambda: solver(counted_denoise, backbone.prior(noise)))
    return total, in_backbone


@METRICS.register(NAME)
class Overhead(SolverMetric):
    rows = (
        Row(f"{NAME}.params_m", "min", "parameters of backbone and solver, millions"),
        Row(f"{NAME}.solver_params", "min", "the solver's parameters"),
        Row(f"{NAME}.gflops", "min", "GFLOPs to draw one image: backbone calls and solver"),
        Row(f"{NAME}.solver_mflops", "min", "MFLOPs of the solver's own steps, one image"),
    )

    def of_solver(self, solver: Solver, backbone: Backbone, folder: Path, name: str) -> Finished:
        total, in_backbone = rollout_flops(solver, backbone)
        own = parameter_count(solver)
        metrics = {
            f"{NAME}.params_m": (parameter_count(backbone) + own) / 1e6,
            f"{NAME}.solver_params": float(own),
            f"{NAME}.gflops": total / 1e9,
            f"{NAME}.solver_mflops": (total - in_backbone) / 1e6,
        }
        line = (
            f"{name}: {metrics[f'{NAME}.params_m']:.3f} M parameters ({own} the solver's), "
            f"{metrics[f'{NAME}.gflops']:.4g} GFLOPs per image "
            f"({metrics[f'{NAME}.solver_mflops']:.4g} MFLOPs the solver's)"
        )
        return Finished(metrics, {}, (), (line,))
