"""The leaderboard as a picture: the chosen value of each solver, one panel per backbone and group
of comparable runs: a line per solver over NFE, or a bar per solver (best first) at one NFE;
with replicates, their 95 % interval as error bars."""

import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from spanlift.platform.tracking.entry import Entry


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


def errors(part: pd.DataFrame) -> list[float]:
    """The 95 % half-widths of the rows (0 for a single replicate)."""
    return [0.0 if pd.isna(h) else float(h) for h in part["half_width"]]


def _bars(ax: Any, part: pd.DataFrame, metric: str, title: str) -> None:
    """One bar per solver, in rank order, its value written on it."""
    spread = errors(part)
    yerr = {"yerr": spread, "capsize": 3} if any(spread) else {}
    bars = ax.bar(part["solver"], part["value"], color="tab:blue", **yerr)
    ax.bar_label(bars, labels=[f"{v:.4g}" for v in part["value"]], fontsize=8)
    ax.set(title=title, ylabel=metric)
    ax.tick_params(axis="x", labelrotation=30)


def _lines(ax: Any, part: pd.DataFrame, metric: str, title: str, nfes: list[int]) -> None:
    """One line per solver over NFE."""
    for solver, line in part.groupby("solver"):
        line = line.sort_values("nfe")
        (drawn,) = ax.plot(line["nfe"], line["value"], marker="o", label=solver)
        spread = errors(line)
        if any(spread):  # the replicates' 95 % interval as a band
            low = [v - s for v, s in zip(line["value"], spread, strict=True)]
            high = [v + s for v, s in zip(line["value"], spread, strict=True)]
            ax.fill_between(line["nfe"], low, high, color=drawn.get_color(), alpha=0.2)
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
