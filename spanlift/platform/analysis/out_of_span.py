"""How much of each step's update lies outside the span of the buffered derivatives, for any solver.

With V_i = span(d_i, d_{i−1}, d_{i−2}) (K = 3 derivatives at the grid states x_i, x_{i−1}, x_{i−2},
fewer at the first steps; the same K for every solver, whatever its own buffer) and P⊥_i = I − Π_{V_i},

    ρ_i = ‖P⊥_i v_i‖ / ‖v_i‖,   v_i = Δ_i^op for SpanLift (the paper's Table "out-of-span ratio"),
                                 v_i = Δ_i, the full update x_{i+1} = x_i + h_i Δ_i, otherwise,

per sample (flattened), averaged over samples. Scalar-coefficient solvers (Euler, iPNDM, DyWeight)
give ρ = 0 by construction; solvers that evaluate the model off the grid inside a step (Heun, AMED,
EPD) or whose update reads more than the derivatives give ρ > 0.
"""

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from torch import Tensor

from spanlift.backbones import Backbone
from spanlift.platform.evaluation.metrics.diagnostics import (
    RolloutStep,
    out_of_span_ratio,
    step_means,
)
from spanlift.solvers.base import Solver


def measured_update(record: RolloutStep) -> Tensor:
    """v_i of the module docstring: SpanLift's Δ_op, or the full update of any other solver."""
    return record.step.direction if record.parts is None else record.parts[1]


def update_out_of_span(
    solver: Solver,
    backbone: Backbone,
    noise: Tensor,
    cond: Tensor | None = None,
    batch_size: int = 256,
) -> pd.DataFrame:
    """ρ_i per step of `solver`'s own rollout from `noise`: columns step, sigma, ratio."""

    def measure(record: RolloutStep, rows: slice) -> dict[str, Tensor]:
        return {"ratio": out_of_span_ratio(measured_update(record), record.derivatives)}

    return pd.DataFrame(step_means(solver, backbone, noise, measure, cond, batch_size))


def out_of_span_table(ratios: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (solver, step): solver, step, sigma, ratio."""
    return pd.concat(
        [frame.assign(solver=label) for label, frame in ratios.items()], ignore_index=True
    )[["solver", "step", "sigma", "ratio"]]


def format_out_of_span(table: pd.DataFrame) -> str:
    """Steps as rows, solvers as columns (the paper's table layout)."""
    wide = table.pivot(index="step", columns="solver", values="ratio")
    wide = wide[list(dict.fromkeys(table["solver"]))]
    return wide.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-")


def plot_out_of_span(table: pd.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for label, frame in table.groupby("solver", sort=False):
        ax.plot(frame["step"], frame["ratio"], marker="o", label=label)
    ax.set(
        xlabel="step i",
        ylabel="‖P⊥_i v_i‖ / ‖v_i‖",
        ylim=(-0.02, 1.05),
        title="out-of-span ratio (v = Δop for SpanLift, else Δ; K = 3)",
    )
    ax.set_xticks(sorted(table["step"].unique().tolist()))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
