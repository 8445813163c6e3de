"""The leaderboard: a query over an experiment's finished MLflow runs.

Per backbone and NFE, each solver appears once, with its best configuration by the metric, and
solvers are ranked by that value. A value is ranked only against values measured the same way:
runs are grouped by the params the metric is measured against (`metrics.METRICS[metric].against`,
e.g. the teacher and its test seeds for RMSE, the detector and reference for FID; for a metric not
in the catalogue, its own `<metric>.*` params), and with `by_fit` also by the fit budget
(`metrics.FIT_BUDGET`). A param a run did not log counts as empty. Written as a text table with a
line before each group saying what it was measured against, optionally as CSV and as a plot of the
metric per solver: a line over NFE, or bars at a single NFE.

The `ends` column says where a row's sampling ended: at σ_min (the platform's protocol, as
DyWeight and diff-sampler) or at σ = 0 (EDM's own `generate.py`, schedule `edm_to_zero`), since
EDM's published teacher FIDs use the latter.
"""

import textwrap
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.tracking.metrics import FIT_BUDGET, METRICS
from spanlift.platform.tracking.runs import experiment_id


@dataclass(frozen=True)
class Entry:
    backbone: str
    scale: str  # what the value is measured against: "teacher=..., teacher.test_seeds=..." or ""
    nfe: int
    rank: int
    solver: str
    configuration: str
    value: float
    runs: int
    run_id: str
    ends: str = "σ_min"  # where sampling ended: "σ_min", or "σ=0" (EDM's protocol)


def sampling_end(schedule: str) -> str:
    """Where a run's sampling ended, from its schedule param."""
    return "σ=0" if schedule == "edm_to_zero" else "σ_min"


def comparison_params(metric: str, logged: Iterable[str], by_fit: bool = False) -> tuple[str, ...]:
    """The params that must be equal for two values of `metric` to be compared.

    The catalogue's `against` for the metric, or for a metric it does not list, every `logged`
    param named `<metric>.*`; with `by_fit`, the fit budget too."""
    if metric in METRICS:
        against = METRICS[metric].against
    else:
        against = tuple(sorted(name for name in set(logged) if name.startswith(f"{metric}.")))
    return against + (FIT_BUDGET if by_fit else ())


def measured_against(params: dict[str, str], names: tuple[str, ...]) -> str:
    """`name=value` of each of `names` a run logged non-empty, e.g. `fid.detector=digits:81da`."""
    return ", ".join(f"{name}={params[name]}" for name in names if params.get(name, ""))


def runs_table(runs: list[Run], metric: str, by_fit: bool = False) -> pd.DataFrame:
    """One row per run of `runs` that logged `metric`: backbone, what the value is measured
    against (`scale`), nfe, solver, configuration, value, run_id."""
    runs = [r for r in runs if metric in r.data.metrics]
    names = comparison_params(metric, (name for r in runs for name in r.data.params), by_fit)
    return pd.DataFrame([_row(run, metric, names) for run in runs])


def _row(run: Run, metric: str, names: tuple[str, ...]) -> dict:
    params, metrics = run.data.params, run.data.metrics
    return {
        "backbone": params.get("backbone", "?"),
        "scale": measured_against(params, names),
        "nfe": int(params.get("nfe", metrics.get("nfe", 0))),
        "solver": params.get("solver", "?"),
        "configuration": params.get("configuration", run.info.run_name),
        "ends": sampling_end(params.get("schedule", "edm")),
        "value": metrics[metric],
        "run_id": run.info.run_id,
    }


def _all_runs(client: MlflowClient, experiment: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment], "attributes.status = 'FINISHED'", max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def rank(runs: pd.DataFrame, mode: str = "min") -> list[Entry]:
    """Best configuration per (backbone, scale, NFE, solver), ranked within each (backbone, scale,
    NFE): `scale` says what the values are measured against."""
    if mode not in ("min", "max"):
        raise SettingsError(f"--mode must be min or max, got {mode!r}")
    ascending = mode == "min"
    runs = runs.assign(ends=runs.get("ends", "σ_min"))  # rows from before the column: σ_min
    entries = []
    for (backbone, scale, nfe), group in runs.groupby(["backbone", "scale", "nfe"], sort=True):
        ordered = group.sort_values("value", ascending=ascending, kind="stable")
        best = ordered.drop_duplicates("solver", keep="first")
        counts = group.groupby("solver").size()
        for position, row in enumerate(best.itertuples(), start=1):
            entries.append(
                Entry(
                    str(backbone),
                    str(scale),
                    int(nfe),
                    position,
                    row.solver,
                    row.configuration,
                    float(row.value),
                    int(counts[row.solver]),
                    row.run_id,
                    row.ends,
                )
            )
    return entries


def leaderboard(
    client: MlflowClient,
    experiment: str,
    metric: str = "rmse",
    mode: str = "min",
    by_fit: bool = False,
) -> list[Entry]:
    """The ranked entries of the experiment's finished runs; with `by_fit`, fits of different
    budgets are ranked apart."""
    finished = _all_runs(client, experiment_id(client, experiment))
    runs = runs_table(finished, metric, by_fit)
    if runs.empty:
        recorded = sorted({name for run in finished for name in run.data.metrics})
        raise SettingsError(
            f"experiment {experiment!r} has no finished run with metric {metric!r} at "
            f"{client.tracking_uri}; its finished runs record: "
            + (", ".join(recorded) or "no metric (no run finished yet)")
        )
    return rank(runs, mode)


def format_leaderboard(entries: list[Entry], metric: str) -> str:
    """The table; each group of rows is headed by what its values are measured against (when any
    run recorded that)."""
    width = max(len("configuration"), *(len(e.configuration) for e in entries))
    header = f"{'backbone':<9} {'NFE':>3} {'#':>2} {'solver':<14} {'configuration':<{width}} {'ends':<5} {metric:>10} {'runs':>4}"
    lines = [header, "-" * len(header)]
    headed = any(e.scale for e in entries)
    group = None
    for e in entries:
        if headed and (e.backbone, e.scale) != group:
            lines.append(group_header(metric, e.scale))
        group = (e.backbone, e.scale)
        lines.append(
            f"{e.backbone:<9} {e.nfe:>3} {e.rank:>2} {e.solver:<14} {e.configuration:<{width}} "
            f"{e.ends:<5} {e.value:>10.4f} {e.runs:>4}"
        )
    return "\n".join(lines)


def group_header(metric: str, scale: str) -> str:
    """E.g. `rmse against teacher=ipndm[order=4] nfe=35, teacher.test_seeds=0..255:`."""
    return f"{metric} against {scale or '(not recorded)'}:"


def write_csv(entries: list[Entry], path: Path) -> Path:
    pd.DataFrame([asdict(e) for e in entries]).to_csv(path, index=False)
    return path


def plot_leaderboard(entries: list[Entry], metric: str, path: Path) -> Path:
    """`leaderboard_figure` saved as a PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    leaderboard_figure(entries, metric).savefig(path, dpi=120)
    return path


def leaderboard_figure(entries: list[Entry], metric: str) -> Figure:
    """The best value of each solver, one panel per backbone and group: a line per solver over
    NFE, or a bar per solver (best first) when the panel has one NFE.

    Positive metrics (errors, FID, LPIPS) get a log axis on line plots, so one poor solver does
    not flatten the differences between the good ones."""
    frame = pd.DataFrame([asdict(e) for e in entries])
    panels = sorted(frame.groupby(["backbone", "scale"]).groups)
    fig = Figure(figsize=(7 * len(panels), 4))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (backbone, scale) in zip(axes[0], panels, strict=True):
        part = frame[(frame["backbone"] == backbone) & (frame["scale"] == scale)]
        nfes = sorted(part["nfe"].unique())
        title = _panel_title(backbone, metric, scale)
        if len(nfes) == 1:
            _bars(ax, part.sort_values("rank"), metric, f"{title}\nNFE {nfes[0]}")
        else:
            _lines(ax, part, metric, title, nfes)
        ax.grid(alpha=0.3, axis="y" if len(nfes) == 1 else "both")
    fig.tight_layout()
    return fig


def _bars(ax: Any, part: pd.DataFrame, metric: str, title: str) -> None:
    """One bar per solver, in rank order, its value written on it."""
    bars = ax.bar(part["solver"], part["value"], color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:.4g}" for v in part["value"]], fontsize=8)
    ax.set(title=title, ylabel=metric)
    ax.tick_params(axis="x", labelrotation=30)


def _lines(ax: Any, part: pd.DataFrame, metric: str, title: str, nfes: list[int]) -> None:
    """One line per solver over NFE."""
    for solver, line in part.groupby("solver"):
        line = line.sort_values("nfe")
        ax.plot(line["nfe"], line["value"], marker="o", label=solver)
    ax.set(title=title, xlabel="NFE", ylabel=metric)
    if (part["value"] > 0).all():
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xticks(nfes)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _panel_title(backbone: str, metric: str, scale: str) -> str:
    """The backbone and, wrapped to the panel's width, what its values are measured against."""
    return "\n".join([backbone, *(textwrap.wrap(f"{metric} against {scale}", 60) if scale else [])])
