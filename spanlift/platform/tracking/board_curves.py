"""The fits behind a leaderboard (`spanlift leaderboard --plot curves F.png`): would a longer fit
change the ranking?

One panel per backbone and NFE; in it, each learned row's validation loss (the run's `val_loss`
history) against the seconds since its fit started (`fit.seconds`, step-aligned with it: a
two-stage SpanLift's base fit first), one line per replicate, the replicates of a row in one
style (a colour of matplotlib's ten, dashed and then dotted past the tenth solver), the state each fit kept at the end (`fit_best_iteration`) marked with a dot. A curve still
falling at its right end was cut by its cap. Where a panel's values span more than a decade, its y
axis is logarithmic. Legends use the leaderboard's display names (`display.py`). With
`--at-cost T`, a dashed line marks T. Runs recorded before fits timed their validations have no
`fit.seconds`: their rows are not drawn, and one line per row says so. Analytic rows have no fit
and no curve.
"""

import math
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FormatStrFormatter
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.tracking.display import display_name
from spanlift.platform.tracking.entry import Entry
from spanlift.platform.tracking.histories import SECONDS_HISTORY, VALIDATION_HISTORY

TITLE = (
    "Validation loss of each learned solver's fit against fit seconds: a style per solver, "
    "a line per fit seed, ● the state the fit kept (a two-stage fit starts where its base fit "
    "ended)"
)
COLUMNS = 3
"""Panels per row of the figure."""
DECADE = 10.0
"""A panel whose largest value is more than this many times its smallest gets a log y axis."""
LINE_STYLES = ("-", "--", ":")
"""A solver's line style past each ten colours: thirty solvers drawn apart."""


def curve_of(client: MlflowClient, run_id: str) -> pd.DataFrame | None:
    """The run's validation curve: `seconds`, `value` by iteration; None for a run without the
    `fit.seconds` history."""
    seconds = {m.step: m.value for m in client.get_metric_history(run_id, SECONDS_HISTORY)}
    values = {m.step: m.value for m in client.get_metric_history(run_id, VALIDATION_HISTORY)}
    steps = sorted(set(seconds) & set(values))
    if not steps:
        return None
    frame = pd.DataFrame({"seconds": [seconds[s] for s in steps]}, index=steps)
    return frame.assign(value=[values[s] for s in steps])


def kept_iteration(client: MlflowClient, run_id: str) -> int | None:
    best = client.get_run(run_id).data.metrics.get("fit_best_iteration")
    return None if best is None else int(best)


def loss_name(client: MlflowClient, run_id: str) -> str:
    """The loss the fit validated on, as its run records it (`loss` or `fit.loss`; "" if not)."""
    params = client.get_run(run_id).data.params
    return params.get("loss") or params.get("fit.loss") or ""


def plot_curves(
    client: MlflowClient, entries: list[Entry], path: Path, at_cost: float | None = None
) -> tuple[Path, list[str]]:
    """`curves_figure` saved as a PNG at `path`; the lines naming rows it could not draw."""
    figure, notes = curves_figure(client, entries, at_cost)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path, notes


def curves_figure(
    client: MlflowClient, entries: list[Entry], at_cost: float | None = None
) -> tuple[Figure, list[str]]:
    """The figure of the module docstring, and one line per learned row it could not draw."""
    learned = [e for e in entries if e.fit is not None]
    if not learned:
        raise SettingsError("--plot curves: no ranked row was fitted (all are analytic): no curve")
    panels: dict[tuple[str, int], list[Entry]] = {}
    for e in sorted(learned, key=lambda e: (e.backbone, e.nfe, e.rank)):
        panels.setdefault((e.backbone, e.nfe), []).append(e)
    columns = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(6.4 * columns, 4.6 * rows + 0.6))
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    names = dict.fromkeys(display_name(e.solver, e.configuration) for e in learned)
    styles = {name: style(i) for i, name in enumerate(names)}  # one per solver, all panels
    notes: list[str] = []
    for ax, ((backbone, nfe), part) in zip(axes, panels.items(), strict=False):
        notes += draw_panel(client, ax, part, f"{backbone}, NFE {nfe}", styles, at_cost)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    figure.suptitle(textwrap.fill(TITLE, 75 * columns), fontsize=10)
    figure.tight_layout()
    return figure, notes


def style(index: int) -> dict[str, str]:
    """The colour and line style of the `index`-th solver."""
    return {"color": f"C{index % 10}", "ls": LINE_STYLES[index // 10 % len(LINE_STYLES)]}


def draw_panel(
    client: MlflowClient,
    ax: object,
    part: list[Entry],
    title: str,
    styles: dict[str, dict[str, str]],
    at_cost: float | None,
) -> list[str]:
    """One panel: a style per solver (`styles`, by display name), a line per replicate; the
    lines naming undrawn rows."""
    notes, drawn, loss = [], [], ""
    for e in part:
        drawn_as = styles[display_name(e.solver, e.configuration)]
        curves = {run: curve_of(client, run) for run in e.run_ids}
        missing = [run for run, curve in curves.items() if curve is None]
        if missing:
            notes.append(
                f"not drawn: {display_name(e.solver, e.configuration)} ({title}), run "
                f"{', '.join(missing)} recorded no {SECONDS_HISTORY} history (fitted before "
                "fits timed their validations)"
            )
        for n, (run, curve) in enumerate((r, c) for r, c in curves.items() if c is not None):
            loss = loss_name(client, run)
            label = display_name(e.solver, e.configuration) if n == 0 else None
            if label and len(e.run_ids) > 1:
                label += f" ({len(e.run_ids)} fits)"
            ax.plot(
                curve["seconds"], curve["value"], marker=".", ms=3, lw=1.2, label=label, **drawn_as
            )
            kept = kept_iteration(client, run)
            if kept in curve.index:
                kept_at = (curve.loc[kept, "seconds"], curve.loc[kept, "value"])
                ax.plot(*kept_at, "o", color=drawn_as["color"])
            drawn.append(curve["value"])
    ylabel = f"validation loss ({loss})" if loss else "validation loss"
    ax.set(title=title, xlabel="fit seconds", ylabel=ylabel)
    if not drawn:
        ax.text(0.5, 0.5, "no timed curve recorded", ha="center", transform=ax.transAxes)
        return notes
    values = pd.concat(drawn)
    if (values > 0).all() and values.max() > DECADE * values.min():
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    handles, labels = ax.get_legend_handles_labels()
    if at_cost is not None:
        ax.axvline(at_cost, color="0.3", ls="--", lw=1)
        handles.append(Line2D([], [], color="0.3", ls="--", lw=1))
        labels.append(f"--at-cost {at_cost:g} s")
    ax.legend(handles, labels, fontsize=8)
    ax.grid(alpha=0.3)
    return notes
