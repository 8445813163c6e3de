"""How large SpanLift's correction is against its base step, off the teacher chord (paper, Fig. "ratio").

For each sample, c = x_1^teacher − x_0 is the chord from the start state x_0 (the prior sample of
the seed's noise) to the teacher's endpoint for the same noise, and P⊥_c v = v − (⟨v, c⟩/⟨c, c⟩) c
removes the chord's direction (vectors flattened per sample). Per step of SpanLift's own rollout,

    ratio_i = ‖P⊥_c(β_i Δ_i^op)‖ / ‖P⊥_c(α_i Δ_i^base)‖,

averaged over samples (0/0 left out); `unprojected` is the same ratio without P⊥_c (the
diagnostics' relative magnitude μ_i). The chord is where every solver's steps must go on average;
projecting it out compares the parts of the two updates that bend the path. At the first step the
base update d_0 ≈ x_0/σ_max is nearly parallel to c ≈ −x_0, so its projected norm is small and the
ratio large by construction.
"""

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.errors import SettingsError
from spanlift.platform.evaluation.metrics.diagnostics import RolloutStep, step_means
from spanlift.solvers.base import Solver
from spanlift.solvers.capabilities import HasParts


def project_out(vectors: Tensor, chord: Tensor) -> Tensor:
    """P⊥_c v per sample: `vectors` (N, …) and `chord` (N, …) flattened, in float64, (N, D)."""
    v, c = vectors.flatten(1).double(), chord.flatten(1).double()
    along = (v * c).sum(dim=1, keepdim=True) / (c * c).sum(dim=1, keepdim=True)
    return v - along * c


def chord_ratio(
    solver: Solver,
    backbone: Backbone,
    noise: Tensor,
    endpoints: Tensor,
    cond: Tensor | None = None,
    batch_size: int = 256,
) -> pd.DataFrame:
    """ratio_i and unprojected μ_i per step of `solver` rolled out from `noise`, against the
    teacher `endpoints` of the same noise: columns step, sigma, ratio, unprojected."""
    if not isinstance(solver, HasParts):
        raise SettingsError(f"the chord ratio needs a SpanLift solver, got {solver.name}")
    chords = endpoints.to(noise.device, noise.dtype) - backbone.prior(noise)

    def measure(record: RolloutStep, rows: slice) -> dict[str, Tensor]:
        chord = chords[rows]
        base, op = record.parts
        alpha, beta = solver.part_weights(record.step.i)
        scaled_base, scaled_op = alpha * base, beta * op
        projected = project_out(scaled_op, chord).norm(dim=1)
        projected_base = project_out(scaled_base, chord).norm(dim=1)
        plain = scaled_op.flatten(1).norm(dim=1) / scaled_base.flatten(1).norm(dim=1)
        return {"ratio": projected / projected_base, "unprojected": plain}

    return pd.DataFrame(step_means(solver, backbone, noise, measure, cond, batch_size))


def chord_table(ratios: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (solver, step): solver, step, sigma, ratio, unprojected."""
    return pd.concat(
        [frame.assign(solver=label) for label, frame in ratios.items()], ignore_index=True
    )[["solver", "step", "sigma", "ratio", "unprojected"]]


def plot_chord_ratio(table: pd.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for label, frame in table.groupby("solver", sort=False):
        ax.plot(frame["step"], 100 * frame["ratio"], marker="o", label=label)
    positive = table["ratio"][table["ratio"] > 0]
    if len(positive) and positive.max() / positive.min() > 100:
        ax.set_yscale("log")
    ax.set(
        xlabel="step i",
        ylabel="‖P⊥_c βΔop‖ / ‖P⊥_c αΔbase‖ (%)",
        title="SpanLift correction vs base step, off the teacher chord",
    )
    ax.set_xticks(sorted(table["step"].unique().tolist()))
    ax.grid(alpha=0.3)
    ax.legend(title="base solver", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
