"""diagnostics: where a solver's learned correction points, and how large it is, per step.

With the derivative buffer D_i = [d_i, d_{i−1}, …, d_{i−K+1}] (flattened per sample, K = 3) and
P_i the orthogonal projector onto span(D_i),

    out-of-span ratio  ρ_i = ‖(I − P_i) Δ_i^op‖ / ‖Δ_i^op‖      (0: inside the span, 1: orthogonal)
    relative magnitude μ_i = ‖β_i Δ_i^op‖ / ‖α_i Δ_i^base‖

averaged over samples. Multistep solvers can only combine buffered derivatives (ρ = 0); SpanLift's
operator adds what lies outside their span (the paper's argument), and μ says how much. As a
metric it applies to a solver whose step has parts (`capabilities.HasParts`: SpanLift): the
per-step table and plot over the first FID seeds as files, and the mean of ρ_i over steps as
`out_of_span_ratio`.

`rollout` is the one loop every per-step analysis reads (these diagnostics and
`spanlift.platform.analysis`): the solver's own `Solver.steps`, with each step's last K on-grid
derivatives and, for a solver with parts, its two parts.
"""

import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import SettingsError
from spanlift.platform.evaluation.metrics.base import METRICS, Finished, Row, SolverMetric
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers.base import Solver, Step
from spanlift.solvers.capabilities import HasParts

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
class RolloutStep:
    """One step of a solver's own rollout, as the per-step analyses read it.

    `derivatives` are d_i, d_{i−1}, …, d_{i−K+1} (newest first, fewer at the first steps): the
    derivative each step evaluated at its grid state x_j (`history[0]`), kept here for K steps
    whatever the solver's own buffer size, so every solver is measured against the same span V_i.
    `parts` is (Δ_i^base, Δ_i^op) before the α_i, β_i scaling for a solver that has them
    (`capabilities.HasParts`: SpanLift); None for other solvers.
    """

    step: Step
    sigma: float
    derivatives: list[Tensor]
    parts: tuple[Tensor, Tensor] | None = None


def rollout(
    solver: Solver,
    backbone: Backbone,
    noise: Tensor,
    cond: Tensor | None = None,
    buffer: int = BUFFER,
) -> Iterator[RolloutStep]:
    """`solver.steps` from the prior sample of `noise`, with the last `buffer` grid derivatives of
    each step and the parts of a solver that has them (read by its `parts` on the step's own state
    and history;
    a base that calls the model inside its direction, as Heun does, calls it again there)."""
    denoiser = conditioned(backbone, cond)
    derivatives: list[Tensor] = []
    for step in solver.steps(denoiser, backbone.prior(noise)):
        derivatives = [step.history[0].derivative, *derivatives][:buffer]
        parts = None
        if isinstance(solver, HasParts):
            parts = solver.parts(step.i, step.x, step.history, denoiser)
        yield RolloutStep(step, float(solver.sigmas[step.i]), derivatives, parts)


Measure = Callable[[RolloutStep, slice], dict[str, Tensor]]
"""Per-sample values (name → tensor of shape (N,)) of one step of a rollout of a batch; the slice
says which rows of the whole `noise` the batch holds."""


@torch.no_grad()
def step_means(
    solver: Solver,
    backbone: Backbone,
    noise: Tensor,
    measure: Measure,
    cond: Tensor | None = None,
    batch_size: int = 256,
) -> list[dict[str, float]]:
    """Roll `solver` out from `noise` in batches and average each of `measure`'s values over the
    samples, per step (NaN values, e.g. 0/0 ratios, are left out): one dict per step with
    `step`, `sigma` and the means."""
    values: list[dict[str, list[Tensor]]] = []
    sigmas: list[float] = []
    for start in range(0, len(noise), batch_size):
        rows = slice(start, start + batch_size)
        batch_cond = None if cond is None else cond[rows]
        for record in rollout(solver, backbone, noise[rows], batch_cond):
            if record.step.i == len(values):
                values.append({})
                sigmas.append(record.sigma)
            for name, value in measure(record, rows).items():
                values[record.step.i].setdefault(name, []).append(value.detach().double().cpu())
    return [
        {"step": i, "sigma": sigmas[i], **{k: torch.cat(v).nanmean().item() for k, v in m.items()}}
        for i, m in enumerate(values)
    ]


@dataclass(frozen=True)
class StepDiagnostics:
    step: int
    sigma: float
    out_of_span: float
    relative_magnitude: float


@torch.no_grad()
def spanlift_diagnostics(
    solver: Solver, backbone: Backbone, noise: Tensor, cond: Tensor | None = None
) -> list[StepDiagnostics]:
    """Roll SpanLift (a solver with parts, `capabilities.HasParts`) out from `noise`, recording ρ_i
    and μ_i at each step (the rollout is the solver's own: x_{i+1} = x_i + h_i (α_i Δ_i^base +
    β_i Δ_i^op))."""
    if not isinstance(solver, HasParts):
        raise SettingsError(f"diagnostics need a SpanLift solver, got {solver.name}")
    steps = []
    for record in rollout(solver, backbone, noise, cond):
        i, (base, op) = record.step.i, record.parts
        alpha, beta = solver.part_weights(i)
        scaled_base, scaled_op = alpha * base, beta * op
        rho = out_of_span_ratio(op, record.derivatives)
        mu = scaled_op.flatten(1).norm(dim=1) / scaled_base.flatten(1).norm(dim=1)
        steps.append(StepDiagnostics(i, record.sigma, rho.nanmean().item(), mu.mean().item()))
    return steps


def diagnostics_table(steps: list[StepDiagnostics]) -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in steps])


def plot_diagnostics(steps: list[StepDiagnostics], path: Path, title: str = "") -> Path:
    """ρ_i and μ_i against the step index, one panel each."""
    from matplotlib.figure import Figure  # matplotlib: only where a plot is drawn

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
    solver: Solver, backbone: Backbone, folder: Path, name: str
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


RATIO = "out_of_span_ratio"


@METRICS.register("diagnostics")
class Diagnostics(SolverMetric):
    rows = (Row(RATIO, "min", "mean ‖P⊥ Δ_op‖/‖Δ_op‖ over steps (SpanLift)"),)
    needs = "a SpanLift solver"

    def applies_to(self, solver: Solver) -> bool:
        return isinstance(solver, HasParts)

    def of_solver(self, solver: Solver, backbone: Backbone, folder: Path, name: str) -> Finished:
        """The per-step table and plot as `<name>-diagnostics.csv` and `.png` in `folder`."""
        table, files = write_diagnostics(solver, backbone, folder, name)
        ratio = float(table["out_of_span"].mean())
        shown = table.to_string(index=False, float_format=lambda v: f"{v:.4f}")
        lines = (shown, "wrote " + ", ".join(str(f) for f in files))
        return Finished({RATIO: ratio} if math.isfinite(ratio) else {}, {}, tuple(files), lines)
