"""Solver diagnostics of SpanLift, per step: where its learned correction points, and how large it is.

With the derivative buffer D_i = [d_i, d_{i−1}, …, d_{i−K+1}] (flattened per sample, K = 3) and
P_i the orthogonal projector onto span(D_i),

    out-of-span ratio  ρ_i = ‖(I − P_i) Δ_i^op‖ / ‖Δ_i^op‖      (0: inside the span, 1: orthogonal)
    relative magnitude μ_i = ‖β_i Δ_i^op‖ / ‖α_i Δ_i^base‖

averaged over samples. Multistep solvers can only combine buffered derivatives (ρ = 0); SpanLift's
operator adds what lies outside their span (the paper's argument), and μ says how much.
"""

from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import SettingsError
from spanlift.platform.fitting.teacher import seed_noise
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers.spanlift import SpanLift

BUFFER = 3
RANK_TOLERANCE = 1e-6  # singular values below this × the largest do not span a direction


def out_of_span_ratio(vectors: Tensor, spanning: list[Tensor]) -> Tensor:
    """Per sample ‖(I − P) v‖ / ‖v‖, P projecting onto the span of the `spanning` tensors.

    Rank-deficient sets (an early step with one derivative, zeros, repeats) span only what their
    non-negligible singular directions span. A zero `v` gives NaN.
    """
    v = vectors.flatten(1).double()
    basis = torch.stack([s.flatten(1).double() for s in spanning], dim=2)  # [N, D, K]
    u, singular, _ = torch.linalg.svd(basis, full_matrices=False)
    keep = singular > RANK_TOLERANCE * singular.amax(dim=1, keepdim=True).clamp_min(1e-300)
    u = u * keep[:, None, :]
    inside = u @ (u.transpose(1, 2) @ v[:, :, None])
    return (v - inside[:, :, 0]).norm(dim=1) / v.norm(dim=1)


@dataclass(frozen=True)
class StepDiagnostics:
    step: int
    sigma: float
    out_of_span: float
    relative_magnitude: float


@torch.no_grad()
def spanlift_diagnostics(
    solver: SpanLift, backbone: Backbone, noise: Tensor, cond: Tensor | None = None
) -> list[StepDiagnostics]:
    """Roll SpanLift out from `noise`, recording ρ_i and μ_i at each step (the rollout is the
    solver's own: x_{i+1} = x_i + h_i (α_i Δ_i^base + β_i Δ_i^op))."""
    if not isinstance(solver, SpanLift):
        raise SettingsError(f"diagnostics need a SpanLift solver, got {solver.name}")
    x, history, steps = backbone.prior(noise), [], []
    denoiser = conditioned(backbone, cond)
    for i in range(solver.num_steps):
        history = [solver.evaluate(denoiser, x, i), *history][: solver.buffer_size]
        base, op = solver.parts(i, x, history, denoiser)
        scaled_base, scaled_op = solver.alpha[i] * base, solver.beta[i] * op
        rho = out_of_span_ratio(op, [p.derivative for p in history[:BUFFER]])
        mu = scaled_op.flatten(1).norm(dim=1) / scaled_base.flatten(1).norm(dim=1)
        sigma = float(solver.sigmas[i])
        steps.append(StepDiagnostics(i, sigma, rho.nanmean().item(), mu.mean().item()))
        x = x + solver.step_size(i, x) * (scaled_base + scaled_op)
    return steps


def diagnostics_table(steps: list[StepDiagnostics]) -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in steps])


def plot_diagnostics(steps: list[StepDiagnostics], path: Path, title: str = "") -> Path:
    """ρ_i and μ_i against the step index, one panel each."""
    frame = diagnostics_table(steps)
    fig = Figure(figsize=(9, 3.5))
    left, right = fig.subplots(1, 2)
    left.plot(frame["step"], frame["out_of_span"], marker="o")
    left.set(xlabel="step i", ylabel="‖P⊥Δop‖ / ‖Δop‖", ylim=(0, 1.05), title="out-of-span ratio")
    right.plot(frame["step"], frame["relative_magnitude"], marker="o", color="tab:orange")
    right.set(xlabel="step i", ylabel="‖βΔop‖ / ‖αΔbase‖", title="relative magnitude")
    for ax in (left, right):
        ax.set_xticks(frame["step"].tolist())
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


DIAGNOSTIC_SAMPLES = 256


def write_diagnostics(
    solver: SpanLift, backbone: Backbone, folder: Path, name: str
) -> tuple[pd.DataFrame, list[Path]]:
    """Per-step table (CSV) and plot (PNG) of `solver` over DIAGNOSTIC_SAMPLES samples (the first
    FID seeds), written to `folder` as `name`-diagnostics.*."""
    seeds = range(FID_FIRST_SEED, FID_FIRST_SEED + DIAGNOSTIC_SAMPLES)
    noise, cond = seed_noise(seeds, backbone.shape), backbone.conditioning(seeds)
    steps = spanlift_diagnostics(solver, backbone, noise, cond)
    table = diagnostics_table(steps)
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / f"{name}-diagnostics.csv"
    table.to_csv(csv, index=False)
    return table, [csv, plot_diagnostics(steps, folder / f"{name}-diagnostics.png", name)]
