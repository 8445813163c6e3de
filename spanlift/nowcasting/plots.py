"""Figures of SEVIR nowcasts: skill against lead time, and frame strips in the SEVIR VIL colours.

Figures are drawn on a bare matplotlib `Figure` (Agg canvas, no pyplot state) and written as PNG;
each function creates the parent folders and returns the written path.

VIL is stored on SEVIR's digital 0–255 scale; the colour bar reads in kg m⁻² through SEVIR's
decoding (Veillette, Samsi and Mattioli, "SEVIR", NeurIPS 2020, supplementary material; the same
piecewise rule as `get_right_units_vil` in the SEVIR authors' tutorial code):

    VIL(X) = 0                      X ≤ 5
             (X − 2) / 90.66        5 < X ≤ 18
             exp((X − 83.9) / 38.9) X > 18
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from spanlift.errors import SettingsError

# The VIL colour scale of the SEVIR authors' tutorial (also Earthformer's): one colour per
# interval [level_i, level_i+1) of VIL on the 0–255 scale, as 8-bit RGB.
VIL_LEVELS = (0, 16, 31, 59, 74, 100, 133, 160, 181, 219, 255)
_VIL_RGB = (
    (77, 77, 77),  # 0–16: dark grey, no precipitation to speak of
    (40, 190, 40),  # 16–31: greens, light to heavier
    (25, 150, 25),
    (10, 105, 10),
    (10, 75, 10),
    (245, 245, 0),  # 100–133: yellow
    (237, 172, 0),  # 133–160: amber
    (240, 110, 0),  # 160–181: orange
    (160, 0, 0),  # 181–219: dark red
    (231, 0, 255),  # 219–255: magenta
)
VIL_COLORMAP = ListedColormap(np.array(_VIL_RGB) / 255, name="sevir_vil").with_extremes(
    under=np.array(_VIL_RGB[0]) / 255,
    over=np.array(_VIL_RGB[-1]) / 255,  # VIL 255 itself, the top level, is "over"
    bad="black",  # missing data (NaN)
)
VIL_NORM = BoundaryNorm(VIL_LEVELS, ncolors=VIL_COLORMAP.N)

Frames = np.ndarray | torch.Tensor  # (frames, H, W) on the VIL scale 0–255


def vil_kg_per_m2(digital: np.ndarray | float) -> np.ndarray:
    """SEVIR's digital VIL X (0–255) in kg m⁻² (the piecewise rule in the module docstring)."""
    x = np.asarray(digital, dtype=np.float64)
    linear = (x - 2) / 90.66
    exponential = np.exp((x - 83.9) / 38.9)
    return np.where(x <= 5, 0.0, np.where(x <= 18, linear, exponential))


@dataclass(frozen=True)
class EventLabel:
    """What names a window in a figure: SEVIR event id, its first frame's time, and where."""

    event: str
    start_utc: str
    latitude: float | None = None  # the centre of the catalog's corner box, when known
    longitude: float | None = None

    def title(self) -> str:
        """`event S728503 · 2019-06-23 21:05 UTC · 35.1°N 97.4°W` (the place when known)."""
        parts = [f"event {self.event}", f"{self.start_utc} UTC"]
        if self.latitude is not None and self.longitude is not None:
            north = f"{abs(self.latitude):.1f}°{'N' if self.latitude >= 0 else 'S'}"
            east = f"{abs(self.longitude):.1f}°{'E' if self.longitude >= 0 else 'W'}"
            parts.append(f"{north} {east}")
        return " · ".join(parts)


LEAD_MINUTES = (10, 20, 30, 40, 50, 60)
PAST_MINUTES = (-60, -50, -40, -30, -20, -10, 0)


def plot_lead_time_scores(
    per_lead: Mapping[str, xr.Dataset], path: str | Path, pool: int = 1
) -> Path:
    """CSI-M and HSS (means over thresholds at `pool`) against lead time in minutes, one line
    per solver label, from per-lead `skill_scores` datasets."""
    if not per_lead:
        raise SettingsError("plot_lead_time_scores needs at least one solver's per-lead scores")
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    csi_axes, hss_axes = fig.subplots(1, 2)
    for label, scores in per_lead.items():
        scores = _at_pool(scores, pool, label)
        minutes = _minutes(scores.lead_time)
        csi_axes.plot(minutes, scores.csi.mean("threshold", skipna=False), marker="o", label=label)
        hss_axes.plot(minutes, scores.hss.mean("threshold", skipna=False), marker="o", label=label)
    for axes, name in ((csi_axes, "CSI-M"), (hss_axes, "HSS")):
        title = name if pool == 1 else f"{name} (pool {pool})"
        axes.set(title=title, xlabel="lead time (min)", ylabel=f"{name}, mean over thresholds")
        axes.grid(alpha=0.3)
    fig.legend(*csi_axes.get_legend_handles_labels(), loc="outside right upper")
    return _saved(fig, path)


def plot_frame_strip(
    past: Frames,
    observed: Frames,
    predicted: Mapping[str, Frames],
    path: str | Path,
    lead_minutes: Sequence[float] = LEAD_MINUTES,
    past_minutes: Sequence[float] = PAST_MINUTES,
    past_shown: int = 3,
    event: EventLabel | None = None,
) -> Path:
    """`frame_strip_figure` written as PNG to `path`."""
    figure = frame_strip_figure(
        past, observed, predicted, lead_minutes, past_minutes, past_shown, event
    )
    return _saved(figure, path)


def frame_strip_figure(
    past: Frames,
    observed: Frames,
    predicted: Mapping[str, Frames],
    lead_minutes: Sequence[float] = LEAD_MINUTES,
    past_minutes: Sequence[float] = PAST_MINUTES,
    past_shown: int = 3,
    event: EventLabel | None = None,
) -> Figure:
    """A grid of VIL frames (0–255) in the SEVIR colours with one shared colour bar in kg m⁻²:
    the first row, "observed", holds the last `past_shown` past frames then the observed
    future; below it one row per solver with its predicted frames under the same lead-time
    columns; `event` names the window above the grid."""
    past, observed = _frames(past, "past"), _frames(observed, "observed")
    predicted = {label: _frames(frames, label) for label, frames in predicted.items()}
    _check_strip(past, observed, predicted, lead_minutes, past_minutes)
    past_shown = max(0, min(past_shown, len(past)))
    rows = [("observed", [*past[len(past) - past_shown :], *observed])]
    rows += [(label, [None] * past_shown + list(frames)) for label, frames in predicted.items()]
    titles = [f"{m:g} min" for m in past_minutes[len(past) - past_shown :]]
    titles += [f"+{m:g} min" for m in lead_minutes]
    fig = Figure(figsize=(1.6 * len(titles) + 1.2, 1.7 * len(rows)), layout="constrained")
    grid = fig.subplots(len(rows), len(titles), squeeze=False)
    for axes_row, (label, frames) in zip(grid, rows, strict=True):
        for axes, frame in zip(axes_row, frames, strict=True):
            _draw_frame(axes, frame)
        axes_row[0].set_ylabel(label)
    for axes, title in zip(grid[0], titles, strict=True):
        axes.set_title(title, fontsize=9)
    mappable = ScalarMappable(norm=VIL_NORM, cmap=VIL_COLORMAP)
    colorbar = fig.colorbar(mappable, ax=grid.ravel().tolist(), ticks=VIL_LEVELS, shrink=0.9)
    colorbar.set_ticklabels([f"{value:.2g}" for value in vil_kg_per_m2(VIL_LEVELS)])
    colorbar.set_label("VIL (kg m⁻²)")
    if event is not None:
        fig.suptitle(event.title())
    return fig


def _at_pool(scores: xr.Dataset, pool: int, label: str) -> xr.Dataset:
    if "lead_time" not in scores.dims:
        raise SettingsError(
            f"{label}: scores have no lead_time dim; use skill_scores(per_lead=True)"
        )
    if pool not in scores.pool.values:
        raise SettingsError(f"{label}: no pool {pool} in pools {tuple(scores.pool.values)}")
    return scores.sel(pool=pool)


def _minutes(lead_time: xr.DataArray) -> np.ndarray:
    """Lead times in minutes: timedelta coordinates converted, numbers taken as minutes."""
    values = lead_time.values
    if np.issubdtype(values.dtype, np.timedelta64):
        return values / np.timedelta64(1, "m")
    return values.astype(np.float64)


def _frames(values: Frames, name: str) -> np.ndarray:
    """Frames (frames, H, W) as a float numpy array."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().float()
    frames = np.asarray(values, dtype=np.float32)
    if frames.ndim != 3:
        raise SettingsError(f"{name} must be frames (frames, H, W); got shape {frames.shape}")
    return frames


def _check_strip(
    past: np.ndarray,
    observed: np.ndarray,
    predicted: Mapping[str, np.ndarray],
    lead_minutes: Sequence[float],
    past_minutes: Sequence[float],
) -> None:
    if len(past) != len(past_minutes) or len(observed) != len(lead_minutes):
        raise SettingsError(
            f"{len(past)} past and {len(observed)} observed frames need as many past_minutes "
            f"and lead_minutes; got {len(past_minutes)} and {len(lead_minutes)}"
        )
    for label, frames in predicted.items():
        if frames.shape != observed.shape:
            raise SettingsError(
                f"{label}: predicted frames {frames.shape} differ from observed {observed.shape}"
            )
    if past.shape[1:] != observed.shape[1:]:
        raise SettingsError(
            f"past frames {past.shape} and observed {observed.shape} differ in size"
        )


def _draw_frame(axes: Axes, frame: np.ndarray | None) -> None:
    """One frame in the VIL colours without ticks; None leaves a blank cell (keeping its label)."""
    axes.set_xticks([])
    axes.set_yticks([])
    if frame is None:
        axes.set_frame_on(False)
        return
    axes.imshow(frame, cmap=VIL_COLORMAP, norm=VIL_NORM, interpolation="nearest")


def _saved(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
