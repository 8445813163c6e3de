"""The leaderboard: a query over an experiment's finished MLflow runs.

Per backbone and NFE, each solver appears once, with its best configuration by the metric, and
solvers are ranked by that value. A metric measured on a scale of its own (FID: a detector and a
reference set, logged as `fid.detector` and `fid.reference`) is ranked only within one scale:
FIDs from different detectors are never compared. Written as a text table, optionally as CSV and as a plot of the
metric against NFE, one line per solver.
"""

from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.tracking.runs import experiment_id

HIGHER_IS_BETTER = {"image_reward", "hss", "csi", "csi4", "csi16"}


def default_mode(metric: str) -> str:
    return "max" if metric in HIGHER_IS_BETTER else "min"


@dataclass(frozen=True)
class Entry:
    backbone: str
    scale: str  # "" or, for FID, "<detector identity> vs <reference>"
    nfe: int
    rank: int
    solver: str
    configuration: str
    value: float
    runs: int
    run_id: str


def measurement_scale(params: dict[str, str], metric: str) -> str:
    """What a metric's value is relative to, e.g. `digits:81da08e9e337 vs dataset` for FID."""
    parts = [params.get(f"{metric}.detector"), params.get(f"{metric}.reference")]
    return " vs ".join(p for p in parts if p)


def finished_runs(client: MlflowClient, experiment: str, metric: str) -> pd.DataFrame:
    """One row per finished run that logged `metric`: backbone, nfe, solver, configuration, value."""
    rows = []
    for run in _all_runs(client, experiment_id(client, experiment)):
        params, metrics = run.data.params, run.data.metrics
        if metric not in metrics:
            continue
        rows.append(
            {
                "backbone": params.get("backbone", "?"),
                "scale": measurement_scale(params, metric),
                "nfe": int(params.get("nfe", metrics.get("nfe", 0))),
                "solver": params.get("solver", "?"),
                "configuration": params.get("configuration", run.info.run_name),
                "value": metrics[metric],
                "run_id": run.info.run_id,
            }
        )
    return pd.DataFrame(rows)


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
    NFE)."""
    if mode not in ("min", "max"):
        raise SettingsError(f"--mode must be min or max, got {mode!r}")
    ascending = mode == "min"
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
                )
            )
    return entries


def leaderboard(
    client: MlflowClient, experiment: str, metric: str = "rmse", mode: str = "min"
) -> list[Entry]:
    runs = finished_runs(client, experiment, metric)
    if runs.empty:
        raise SettingsError(
            f"experiment {experiment!r} has no finished run with metric {metric!r} "
            f"at {client.tracking_uri}"
        )
    return rank(runs, mode)


def format_leaderboard(entries: list[Entry], metric: str) -> str:
    width = max(len("configuration"), *(len(e.configuration) for e in entries))
    header = f"{'backbone':<9} {'NFE':>3} {'#':>2} {'solver':<14} {'configuration':<{width}} {metric:>10} {'runs':>4}"
    lines = [header, "-" * len(header)]
    scale = ""
    for e in entries:
        if e.scale and e.scale != scale:
            lines.append(f"{metric} by detector {e.scale}:")
        scale = e.scale
        lines.append(
            f"{e.backbone:<9} {e.nfe:>3} {e.rank:>2} {e.solver:<14} {e.configuration:<{width}} "
            f"{e.value:>10.4f} {e.runs:>4}"
        )
    return "\n".join(lines)


def write_csv(entries: list[Entry], path: Path) -> Path:
    pd.DataFrame([asdict(e) for e in entries]).to_csv(path, index=False)
    return path


def plot_leaderboard(entries: list[Entry], metric: str, path: Path) -> Path:
    """The best value of each solver against NFE, one panel per backbone (and scale).

    Positive metrics (errors, FID, LPIPS) get a log axis, so one poor solver does not flatten
    the differences between the good ones."""
    frame = pd.DataFrame([asdict(e) for e in entries])
    panels = sorted(frame.groupby(["backbone", "scale"]).groups)
    fig = Figure(figsize=(7 * len(panels), 4))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (backbone, scale) in zip(axes[0], panels, strict=True):
        part = frame[(frame["backbone"] == backbone) & (frame["scale"] == scale)]
        for solver, line in part.groupby("solver"):
            line = line.sort_values("nfe")
            ax.plot(line["nfe"], line["value"], marker="o", label=solver)
        title = f"{backbone}\n{metric} by {scale}" if scale else backbone
        ax.set(title=title, xlabel="NFE", ylabel=metric)
        if (part["value"] > 0).all():
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.set_xticks(sorted(part["nfe"].unique()))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
