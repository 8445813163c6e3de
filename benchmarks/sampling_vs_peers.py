"""spanlift's solver loop against the loops users would run instead: k-diffusion and diffusers.

Each pair runs the same algorithm on the same denoiser, σ grid and noise:

    Euler            spanlift `euler`                           k-diffusion `sample_euler`
    Heun             spanlift `heun` (grid ending at σ = 0)     k-diffusion `sample_heun`
    DPM-Solver++(2M) spanlift `dpm_solver_pp` order 2           k-diffusion `sample_dpmpp_2m`
                     (lower_order_final off)
    DPM-Solver++(2M) the same, lower_order_final on             diffusers `DPMSolverMultistepScheduler`
    UniPC-bh2 (2)    spanlift `unipc` order 2                   diffusers `UniPCMultistepScheduler`

The σ grid is the spanlift solver's own (EDM, ρ = 7; `edm_to_zero` for Heun, which is where
k-diffusion's Heun takes its last step as Euler, like spanlift's). diffusers' schedulers are
handed that grid by overwriting `sigmas` after `set_timesteps` and step in their variance-
preserving state x_vp = x / sqrt(1 + σ²) with `prediction_type="sample"` (the denoiser's output);
the loop converts in and out, as a user's wrapper around an EDM denoiser would. Heun spends an
odd NFE, so its "10" is 9.

Per point (network, batch, NFE): the NFE each side spends, counted by wrapping the denoiser; the
largest difference between the two endpoints relative to the endpoint's scale (asserted below
`--tolerance`, float32 rounding); and spanlift's images/s over the peer's, per repeat (the two
rollouts interleaved), as the median and the range over `--repeats`. spanlift must reach
0.98× the fastest peer of each method.

`--loop-only` then times the loops alone on the EDM network's shape at `--loop-batch`, with a
denoiser that returns a fixed tensor: the milliseconds each loop adds per rollout. With one
measured call of the network at that batch it gives the ratio the full-size run would show.

    python benchmarks/sampling_vs_peers.py [--nets digits,edm] [--batches 1 64] [--nfe 5 10]
        [--repeats 5] [--edm-batches 1] [--loop-only] [--loop-batch 64] [--tolerance 1e-5]
        [--threads N]
"""

import argparse
import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from diffusers import DPMSolverMultistepScheduler, UniPCMultistepScheduler
from torch import Tensor

from spanlift.backbones import Backbone, load_backbone
from spanlift.solvers import NFECounter, SolverSpec, build_solver
from spanlift.solvers.base import Denoiser

TARGET = 0.98
"""spanlift's images/s over the fastest peer's, at every point."""

PeerLoop = Callable[[Denoiser, Tensor, Tensor], Tensor]
"""(denoiser, x at σ_0, σ grid) → the endpoint."""


def k_diffusion(sampler: str) -> PeerLoop:
    """k-diffusion's `sampler` on the two-argument denoiser (its model takes σ per sample);
    k-diffusion is imported when the loop first runs."""

    def run(denoiser: Denoiser, x: Tensor, sigmas: Tensor) -> Tensor:
        loop = getattr(importlib.import_module("k_diffusion.sampling"), sampler)
        return loop(denoiser, x, sigmas.to(x.dtype), disable=True)

    return run


def diffusers_loop(scheduler_class: type, **config: Any) -> PeerLoop:
    """A diffusers multistep scheduler's loop on an EDM denoiser.

    The scheduler keeps x_vp = α x with α = 1/sqrt(1 + σ²) and reads σ from its `sigmas`, which
    are set to the grid; the model output is the denoised estimate (`prediction_type="sample"`).
    """

    def run(denoiser: Denoiser, x: Tensor, sigmas: Tensor) -> Tensor:
        scheduler = scheduler_class(
            prediction_type="sample", final_sigmas_type="sigma_min", **config
        )
        steps = len(sigmas) - 1
        scheduler.set_timesteps(steps)
        scheduler.sigmas = sigmas.to(torch.float32)
        scheduler.timesteps = torch.arange(steps, 0, -1)
        alphas = (1 + sigmas.to(x.dtype) ** 2).rsqrt()
        sample = x * alphas[0]
        for i, timestep in enumerate(scheduler.timesteps):
            denoised = denoiser(sample / alphas[i], sigmas[i].to(x.dtype))
            sample = scheduler.step(denoised, timestep, sample).prev_sample
        return sample / alphas[-1]

    return run


@dataclass(frozen=True)
class Pair:
    """One algorithm: spanlift's solver (name, schedule, settings) and a peer's loop."""

    method: str
    peer: str
    solver: str
    schedule: str
    settings: dict[str, Any] = field(default_factory=dict)
    loop: PeerLoop = field(default=None, repr=False)  # type: ignore[assignment]

    def spec(self, nfe: int) -> SolverSpec:
        """spanlift's spec at `nfe` (Heun: the odd NFE at or below it)."""
        if self.solver == "heun" and nfe % 2 == 0:
            nfe -= 1
        return SolverSpec(self.solver, nfe, self.schedule, dict(self.settings))


PAIRS = (
    Pair("Euler", "k-diffusion sample_euler", "euler", "edm", loop=k_diffusion("sample_euler")),
    Pair("Heun", "k-diffusion sample_heun", "heun", "edm_to_zero", loop=k_diffusion("sample_heun")),
    Pair(
        "DPM-Solver++(2M)",
        "k-diffusion sample_dpmpp_2m",
        "dpm_solver_pp",
        "edm",
        {"order": 2, "lower_order_final": False},
        loop=k_diffusion("sample_dpmpp_2m"),
    ),
    Pair(
        "DPM-Solver++(2M)",
        "diffusers DPMSolverMultistep",
        "dpm_solver_pp",
        "edm",
        {"order": 2, "lower_order_final": True},
        loop=diffusers_loop(DPMSolverMultistepScheduler, solver_order=2, lower_order_final=True),
    ),
    Pair(
        "UniPC-bh2(2)",
        "diffusers UniPCMultistep",
        "unipc",
        "edm",
        {"order": 2, "lower_order_final": True},
        loop=diffusers_loop(UniPCMultistepScheduler, solver_order=2, lower_order_final=True),
    ),
)


def edm_cifar10() -> Backbone:
    """EDM's CIFAR-10 DDPM++ network size with random weights, as benchmarks/gpu_check.py builds it."""
    from gpu_check import edm_cifar10 as build  # benchmarks/ is on sys.path as a script

    return build(torch.device("cpu"), torch.float32)


NETWORKS: dict[str, Callable[[], Backbone]] = {
    "digits": lambda: load_backbone("digits"),
    "edm": edm_cifar10,
}


@dataclass
class Outcome:
    """One point: both sides' NFE, their endpoints' difference and the per-repeat time ratios."""

    network: str
    pair: Pair
    nfe: int
    batch: int
    nfe_spanlift: int
    nfe_peer: int
    difference: float
    ratios: list[float]
    seconds_spanlift: float
    seconds_peer: float

    @property
    def ratio(self) -> float:
        """spanlift images/s over the peer's (median over repeats)."""
        return statistics.median(self.ratios)


def seconds(run: Callable[[], Tensor]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def relative_difference(a: Tensor, b: Tensor) -> float:
    """max |a − b| / max |b|: the endpoints' disagreement on the endpoint's scale."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@torch.no_grad()
def compare(
    network: str,
    pair: Pair,
    backbone: Backbone,
    nfe: int,
    batch: int,
    repeats: int,
    denoiser: Denoiser,
) -> Outcome:
    """Both loops on the same noise: NFE counted, endpoints compared, then timed interleaved."""
    spec = pair.spec(nfe)
    solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    sigmas = solver.sigmas
    noise = torch.randn(batch, *backbone.shape, generator=torch.Generator().manual_seed(0))
    x = backbone.prior(noise)
    counted = {"spanlift": NFECounter(denoiser), "peer": NFECounter(denoiser)}
    ours = solver(counted["spanlift"], x)
    theirs = pair.loop(counted["peer"], x, sigmas)
    runs = {"spanlift": lambda: solver(denoiser, x), "peer": lambda: pair.loop(denoiser, x, sigmas)}
    times: dict[str, list[float]] = {"spanlift": [], "peer": []}
    for _ in range(repeats):
        for side, run in runs.items():
            times[side].append(seconds(run))
    return Outcome(
        network,
        pair,
        spec.nfe,
        batch,
        counted["spanlift"].calls,
        counted["peer"].calls,
        relative_difference(ours, theirs),
        [p / s for s, p in zip(times["spanlift"], times["peer"], strict=True)],
        statistics.median(times["spanlift"]),
        statistics.median(times["peer"]),
    )


HEADER = (
    f"{'method':<18}{'peer':<30}{'NFE':>4}{'batch':>6}{'NFE s/p':>9}{'rel. diff':>11}"
    f"{'spanlift s':>12}{'peer s':>10}{'ratio':>8}{'range':>15}"
)


def line(o: Outcome) -> str:
    spread = f"{min(o.ratios):.3f}–{max(o.ratios):.3f}"
    return (
        f"{o.pair.method:<18}{o.pair.peer:<30}{o.nfe:>4}{o.batch:>6}"
        f"{f'{o.nfe_spanlift}/{o.nfe_peer}':>9}{o.difference:>11.1e}"
        f"{o.seconds_spanlift:>12.4f}{o.seconds_peer:>10.4f}{o.ratio:>8.3f}{spread:>15}"
    )


def fastest_peer_ratios(outcomes: list[Outcome]) -> dict[tuple[str, str, int, int], float]:
    """Per (network, method, NFE, batch): spanlift's median ratio against its fastest peer."""
    worst: dict[tuple[str, str, int, int], float] = {}
    for o in outcomes:
        key = (o.network, o.pair.method, o.nfe, o.batch)
        worst[key] = min(worst.get(key, float("inf")), o.ratio)
    return worst


def run_points(
    name: str, backbone: Backbone, batches: list[int], nfes: list[int], repeats: int
) -> list[Outcome]:
    print(f"\n{name}: {backbone.shape}, {torch.get_num_threads()} CPU threads, {repeats} repeats")
    print(HEADER)
    outcomes = []
    for batch in batches:
        for nfe in nfes:
            for pair in PAIRS:
                outcome = compare(name, pair, backbone, nfe, batch, repeats, backbone.denoise)
                print(line(outcome), flush=True)
                outcomes.append(outcome)
    return outcomes


def check(outcomes: list[Outcome], tolerance: float) -> list[str]:
    """The NFEs equal and the endpoints equal to `tolerance`; failures as lines."""
    failures = []
    for o in outcomes:
        where = f"{o.network}: {o.pair.method} vs {o.pair.peer}, NFE {o.nfe}, batch {o.batch}"
        if o.nfe_spanlift != o.nfe or o.nfe_peer != o.nfe:
            failures.append(f"{where}: NFE {o.nfe_spanlift} and {o.nfe_peer}, built for {o.nfe}")
        if o.difference > tolerance:
            failures.append(f"{where}: endpoints differ by {o.difference:.1e} > {tolerance:.0e}")
    return failures


@torch.no_grad()
def loop_only(backbone: Backbone, batch: int, nfes: list[int], repeats: int) -> None:
    """Milliseconds each loop adds per rollout (a denoiser returning a fixed tensor), and the
    ratio they imply with one measured network call at `batch`."""
    fixed = torch.randn(batch, *backbone.shape, generator=torch.Generator().manual_seed(1))
    x = backbone.prior(torch.randn_like(fixed))
    sigma = torch.full((batch,), 1.0)
    backbone.denoise(x, sigma)  # warm-up
    call = statistics.median(seconds(lambda: backbone.denoise(x, sigma)) for _ in range(2))
    print(f"\nloops alone, {backbone.shape} batch {batch}: one network call {call:.3f} s")
    print(
        f"{'method':<18}{'peer':<30}{'NFE':>4}{'spanlift ms':>13}{'peer ms':>10}{'at full size':>14}"
    )
    for nfe in nfes:
        for pair in PAIRS:
            outcome = compare("loops", pair, backbone, nfe, batch, repeats, lambda x, sigma: fixed)
            ours, theirs = outcome.seconds_spanlift, outcome.seconds_peer
            implied = (nfe * call + theirs) / (nfe * call + ours)
            print(
                f"{pair.method:<18}{pair.peer:<30}{outcome.nfe:>4}{1000 * ours:>13.2f}"
                f"{1000 * theirs:>10.2f}{implied:>14.4f}"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nets", default="digits,edm", help="digits, edm or both (comma-separated)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    p.add_argument(
        "--edm-batches",
        type=int,
        nargs="+",
        default=None,
        help="batches for edm (default: --batches)",
    )
    p.add_argument("--nfe", type=int, nargs="+", default=[5, 10])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--loop-only", action="store_true", help="also time the loops alone")
    p.add_argument("--loop-batch", type=int, default=64)
    p.add_argument("--tolerance", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    outcomes = []
    for name in args.nets.split(","):
        batches = args.edm_batches if name == "edm" and args.edm_batches else args.batches
        outcomes += run_points(name, NETWORKS[name](), batches, args.nfe, args.repeats)
    if args.loop_only:
        loop_only(NETWORKS["edm"](), args.loop_batch, args.nfe, args.repeats)
    print(f"\nspanlift against the fastest peer (target ≥ {TARGET}):")
    for (network, method, nfe, batch), ratio in fastest_peer_ratios(outcomes).items():
        verdict = "ok" if ratio >= TARGET else "MISSED"
        print(f"  {network:<7} {method:<18} NFE {nfe:>2} batch {batch:>3}: {ratio:.3f}  {verdict}")
    failures = check(outcomes, args.tolerance)
    for failure in failures:
        print(f"FAILED {failure}")
    if failures:
        raise SystemExit(1)
    print(f"every NFE counted equal, every endpoint equal to {args.tolerance:.0e}")


if __name__ == "__main__":
    main()
