"""`spanlift nowcast eval`: the paper's nowcasting table on a SEVIR-format data set.

    teacher   DDIM (= Euler in σ-form) with `teacher_nfe` steps, on the training windows
    solvers   each at `nfe`; a learnable one is fitted in this process by endpoint matching, with
              its fit variant: `name` (MSE against the teacher), `name+pooled` (the pooled-field
              loss, losses.py), `name+observed` (against the observed frames instead of the
              teacher), or both (`name+pooled+observed`)
    scoring   the forecasts of the held-out windows on Ray evaluator actors: contingency counts
              per threshold, pool and lead time (merged exactly over actors), LPIPS per frame
              against the observed frames where AlexNet's weights exist
    results   a table, the per-lead scores as NetCDF, CSI/HSS against lead time and a strip of
              observed and forecast frames as PNG, and one MLflow run per row

The teacher itself is scored as a row too, so the table reads like the paper's: a reference
row, then the few-step solvers.
"""

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import xarray as xr

from spanlift.backbones import Backbone, load_backbone
from spanlift.backbones.nowcast_windows import sample_to_vil
from spanlift.errors import DataError, SettingsError
from spanlift.nowcasting.plots import EventLabel, plot_frame_strip, plot_lead_time_scores
from spanlift.nowcasting.scores import THRESHOLDS
from spanlift.nowcasting.sevir import CATALOG_NAME
from spanlift.nowcasting.store import open_prepared
from spanlift.nowcasting.windows import DEFAULT_SPLIT, SplitSettings
from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics.reference import ReferenceSet
from spanlift.platform.evaluation.pool import evaluators_on_ray
from spanlift.platform.evaluation.sample_metrics import SampleReport, evaluate_samples
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.nowcast_reference_rows import (
    PERSISTENCE,
    PERSISTENCE_SPEC,
    ReferenceRow,
    cached_teacher,
    persistence,
    score_reference_row,
)
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.results.tracking import (
    command_tags,
    configuration_params,
    finished_run,
    open_experiment,
    record_once,
)
from spanlift.platform.sampling.rollout import rollout, seed_noise
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import TeacherSet, load_or_generate
from spanlift.platform.tracking.runs import REPLICATE_PARAM, ConfigurationRuns
from spanlift.seeds import TEST_SEED_OFFSET
from spanlift.solvers import Solver, SolverSpec
from spanlift.solvers.loading import build, is_learnable, load_solver

SOLVERS = {  # the suite's names → (registered solver, settings); `ddim` is Euler in σ-form
    "ddim": ("euler", {}),
    "dpm_solver_pp": ("dpm_solver_pp", {"order": 2}),
    "unipc": ("unipc", {"order": 2}),
    "ipndm": ("ipndm", {"order": 3}),
    "dyweight": ("dyweight", {"order": 3}),
    "spanlift": ("spanlift", {"base": "dyweight", "operator": "spatial"}),
}
PAPER = "ddim,dpm_solver_pp,unipc,ipndm,dyweight,spanlift,spanlift+pooled,spanlift+observed"
"""`--solvers paper`: the rows of the paper's nowcasting table (pooled stands for its feature
loss, which is Inception's there)."""
VARIANTS = {"pooled": {"loss": "pooled"}, "observed": {"target": "observed"}}
METRICS = ("skill", "lpips")


@dataclass(frozen=True)
class Row:
    """One solver of the table: its name in the suite, how it is built and fitted."""

    name: str
    spec: SolverSpec
    fit: FitSettings

    def label(self, solver: Solver) -> str:
        """`ddim`, or for a solver with parameters how it was fitted: `spanlift (mse, teacher)`."""
        return (
            f"{self.name} ({self.fit.loss}, {self.fit.target})"
            if is_learnable(solver)
            else self.name
        )


def parse_solvers(text: str, nfe: int, fit: FitSettings) -> list[Row]:
    """`ddim,spanlift+pooled,...` (or `paper`) into rows; an unknown name or variant is refused."""
    rows = []
    for token in (PAPER if text.strip() == "paper" else text).split(","):
        name, *variants = token.strip().split("+")
        if name not in SOLVERS:
            raise SettingsError(
                f"--solvers: unknown solver {name!r}; expected some of {', '.join(SOLVERS)}"
                " (or 'paper'), each optionally +pooled and/or +observed"
            )
        settings = dict(fit.to_dict())
        for variant in variants:
            if variant not in VARIANTS:
                raise SettingsError(
                    f"--solvers: unknown variant +{variant} of {name}; expected +pooled or +observed"
                )
            settings.update(VARIANTS[variant])
        solver, solver_settings = SOLVERS[name]
        rows.append(
            Row(name, SolverSpec(solver, nfe, "edm", solver_settings), FitSettings(**settings))
        )
    if not rows:
        raise SettingsError("--solvers: expected at least one solver")
    return rows


@dataclass(frozen=True)
class SuiteRequest:
    data: Path
    rows: tuple[Row, ...]
    teacher: SolverSpec
    train_samples: int
    test_samples: int  # 0: every held-out window once
    evaluators: int
    cache: Path
    out: Path
    weights: Path | None = None
    backbone: str = "nowcast"
    backbone_options: dict[str, Any] = field(default_factory=dict)
    lpips_weights: Path | None = None
    tracking_uri: str | None = None
    experiment: str = ""
    split: SplitSettings = DEFAULT_SPLIT
    convention: str = "exact"  # how skill is counted: "exact" or "earthformer" (scores.py)


@dataclass
class SuiteResult:
    rows: list[str] = field(default_factory=list)
    reports: dict[str, SampleReport] = field(default_factory=dict)
    rmse: dict[str, float] = field(default_factory=dict)
    fits: dict[str, dict[str, float]] = field(default_factory=dict)  # `Fitted.metrics()` by row
    files: list[Path] = field(default_factory=list)
    run_ids: dict[str, str] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)  # rows found recorded, not recorded again


def backbone_options(request: SuiteRequest) -> dict[str, Any]:
    options: dict[str, Any] = {"data": str(request.data), "split": request.split.split}
    bounds = {"start": request.split.start, "end": request.split.end}
    options |= {name: date for name, date in bounds.items() if date is not None}
    options |= request.backbone_options
    if request.weights:
        options["weights"] = str(request.weights)
    return options


def run_suite(
    request: SuiteRequest, address: str | None = None, num_cpus: int | None = None
) -> SuiteResult:
    """Fit, score and record every row; see the module docstring."""
    options = backbone_options(request)
    backbone = load_backbone(request.backbone, **options)
    # every spec is checked before any work starts
    labels = [row.label(build(row.spec, backbone)) for row in request.rows]
    runs = open_runs(request)
    held_out = request.test_samples or len(backbone.windows.test)
    test_seeds = list(range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + held_out))
    setup = EvaluatorSetup(
        request.backbone,
        "",
        request.cache / "eval",
        options,
        teacher=request.teacher,
        options={"lpips_weights": request.lpips_weights, "skill_convention": request.convention},
    )
    start_ray(address, request.out, num_cpus)
    # the actors load the backbone while this process builds the teacher sets and fits
    with evaluators_on_ray(setup, request.evaluators) as pool:
        test = load_or_generate(request.cache, backbone, test_seeds, request.teacher)
        result, rows = fit_rows(request, backbone, labels, test)
        teacher_label = f"teacher ddim {request.teacher.nfe}"
        references = [
            persistence(backbone, test_seeds),
            cached_teacher(backbone, test, teacher_label),
        ]
        for reference in references:
            result.reports[reference.label] = score_reference_row(
                reference, backbone, test_seeds, setup, METRICS
            )
            result.rows.append(reference.label)
        rows = {
            PERSISTENCE: Scored(PERSISTENCE_SPEC),
            teacher_label: Scored(request.teacher),
            **rows,
        }
        for label, row in list(rows.items())[len(references) :]:
            result.reports[label] = evaluate_samples(
                pool, row.spec, row.checkpoint, held_out, METRICS, ReferenceSet(), TEST_SEED_OFFSET
            )
            result.rows.append(label)
    strip = forecast_strip(backbone, rows, references, test_seeds[0])
    event = window_event(request.data, test_seeds[0])
    result.files = write_outputs(result, strip, event, request.out)
    if runs is not None:
        result.run_ids = record_runs(runs, request, result, rows, options)
    return result


@dataclass(frozen=True)
class Scored:
    """What a row of the table scores: the spec, its fitted checkpoint, how it was fitted."""

    spec: SolverSpec
    checkpoint: Path | None = None
    fit: FitSettings | None = None


def fit_rows(
    request: SuiteRequest, backbone: Backbone, labels: list[str], test: TeacherSet
) -> tuple[SuiteResult, dict[str, "Scored"]]:
    """Fit every row on the training teacher set (freed when this returns) and measure its
    endpoint RMSE against the held-out one; each fit variant has its own fit key, and its base
    is fitted the same way."""
    train = load_or_generate(request.cache, backbone, range(request.train_samples), request.teacher)
    result, rows = SuiteResult(), {}
    for label, row in zip(labels, request.rows, strict=True):
        fitted = fit_spec(row.spec, backbone, train, row.fit, request.out / "fitted")
        rows[label] = Scored(row.spec, fitted.path, row.fit)
        result.rmse[label] = endpoint_rmse(fitted.solver, backbone, test)
        result.fits[label] = fitted.metrics()
    return result, rows


def per_lead(result: SuiteResult) -> dict[str, xr.Dataset]:
    return {label: result.reports[label].states["skill"].to_dataset() for label in result.rows}


def write_outputs(
    result: SuiteResult, strip: "Strip", event: EventLabel | None, out: Path
) -> list[Path]:
    """The per-lead scores of every row as one NetCDF (dim `solver`), the lead-time plot and the
    frame strip of the first held-out window."""
    out.mkdir(parents=True, exist_ok=True)
    scores = per_lead(result)
    netcdf = out / "nowcast-scores.nc"
    combined = xr.concat(list(scores.values()), dim="solver").assign_coords(solver=list(scores))
    combined.to_netcdf(netcdf, engine="h5netcdf")
    lead_plot = plot_lead_time_scores(scores, out / "nowcast-lead-time.png")
    strip_png = plot_frame_strip(*strip, out / "nowcast-frames.png", event=event)
    return [netcdf, lead_plot, strip_png]


Strip = tuple[Any, Any, dict[str, Any]]
"""Past frames, observed frames and each row's forecast of one window, on the VIL scale."""


@torch.no_grad()
def forecast_strip(
    backbone: Backbone, rows: dict[str, Scored], references: list[ReferenceRow], seed: int
) -> Strip:
    """The window of `seed`: its past and observed frames and each row's forecast (reference
    rows from what they scored, solvers by one rollout from the seed's noise)."""
    cond, noise = backbone.conditioning([seed]), seed_noise([seed], backbone.shape)
    forecasts = {reference.label: reference.forecast(slice(0, 1)) for reference in references}
    for label, row in rows.items():
        if label not in forecasts:
            solver = load_solver(row.spec, row.checkpoint, backbone)
            forecasts[label] = backbone.decode(rollout(solver, backbone, noise, cond)).clamp(-1, 1)
    vil = {label: sample_to_vil(frames)[0].numpy() for label, frames in forecasts.items()}
    past = sample_to_vil(backbone.windows.past([seed]))[0].numpy()
    observed = sample_to_vil(backbone.observations([seed]))[0].numpy()
    return past, observed, vil


def window_event(data: Path, seed: int) -> EventLabel | None:
    """The SEVIR event of a held-out seed's window: id and first frame's time from the prepared
    windows, the centre of the catalog's corner box when `data` is a SEVIR folder; None when the
    data holds no event metadata."""
    try:
        store = open_prepared(Path(data))
    except DataError:
        return None
    if not {"event", "start_utc", "split"} <= set(store.coords):
        return None
    test = np.flatnonzero(store.split.values == "test")
    index = test[seed % TEST_SEED_OFFSET % len(test)]
    event = str(store.event.values[index])
    start = pd.Timestamp(store.start_utc.values[index]).strftime("%Y-%m-%d %H:%M")
    return EventLabel(event, start, *catalog_centre(Path(data), event))


def catalog_centre(root: Path, event: str) -> tuple[float | None, float | None]:
    """(latitude, longitude) of the centre of the event's corner box in `<root>/CATALOG.csv`."""
    catalog = root / CATALOG_NAME
    if not catalog.is_file():
        return None, None
    corners = ["llcrnrlat", "urcrnrlat", "llcrnrlon", "urcrnrlon"]
    rows = pd.read_csv(catalog, usecols=lambda c: c in {"id", *corners}, low_memory=False)
    if not set(corners) <= set(rows.columns) or "id" not in rows.columns:
        return None, None
    match = rows[rows["id"].astype(str) == event]
    if match.empty:
        return None, None
    first = match.iloc[0]
    return (
        float((first.llcrnrlat + first.urcrnrlat) / 2),
        float((first.llcrnrlon + first.urcrnrlon) / 2),
    )


def open_runs(request: SuiteRequest) -> ConfigurationRuns | None:
    if request.tracking_uri is None:
        return None
    return open_experiment(request.tracking_uri, request.experiment)


def record_runs(
    runs: ConfigurationRuns,
    request: SuiteRequest,
    result: SuiteResult,
    rows: dict[str, Scored],
    options: dict[str, Any],
) -> dict[str, str]:
    """One MLflow run per row: params, the table's metrics, its per-lead NetCDF and the PNGs. A
    row this version of the code already recorded with the same configuration in the experiment
    (an earlier `nowcast eval` with the same settings) is found by its key, not recorded twice
    (`results/tracking.py`, as `spanlift fit` and a sweep find theirs): its label joins
    `result.found`."""
    ids = {}
    for label in result.rows:
        row, report = rows[label], result.reports[label]
        configuration = Configuration(
            request.backbone,
            options,
            row.spec,
            {}
            if label == PERSISTENCE
            else teacher_identity(request.teacher, request.train_samples),
            fit=row.fit.identity() if row.fit else {},
            evaluation={"samples": report.samples, "metrics": list(METRICS)},
        )
        earlier = finished_run(runs, configuration)
        if earlier is not None:
            ids[label] = earlier
            result.found.append(label)
            continue
        params = {
            **configuration_params(configuration),
            "solver": label,
            REPLICATE_PARAM: configuration.replicate_key(),
            "teacher.train_samples": request.train_samples,
            **report.params(),
        }
        metrics = {**report.metrics(), "nfe": float(row.spec.nfe)}  # reference rows: no timing
        if label in result.rmse:
            metrics |= {"rmse": result.rmse[label], **result.fits[label]}
        with tempfile.TemporaryDirectory() as folder:
            netcdf = Path(folder) / "skill-scores.nc"
            report.states["skill"].to_dataset().to_netcdf(netcdf, engine="h5netcdf")
            files = [netcdf, *result.files[1:], *([row.checkpoint] if row.checkpoint else [])]
            ids[label] = record_once(
                runs,
                configuration,
                f"{label} nfe={row.spec.nfe}",
                params,
                command_tags("nowcast eval"),
                metrics,
                files,
            )
    return ids


def format_table(result: SuiteResult, thresholds: Sequence[int] = THRESHOLDS) -> str:
    """The paper's columns (HSS, LPIPS, CSI-M, CSI-4, CSI-16), CSI per threshold, and the
    endpoint RMSE against the teacher; – where a value does not exist (0/0, LPIPS unavailable)."""
    columns = ["HSS", "LPIPS", "CSI-M", "CSI-4", "CSI-16", *(f"CSI≥{t}" for t in thresholds)]
    keys = ["hss", "lpips", "csi_m", "csi4", "csi16", *(f"csi_{t}" for t in thresholds)]
    width = max(len("solver"), *(len(label) for label in result.rows))
    head = f"{'solver':<{width}}" + "".join(f" {c:>8}" for c in [*columns, "RMSE"])
    lines = [head, "-" * len(head)]
    for label in result.rows:
        metrics = result.reports[label].metrics()
        values = [metrics.get(k, math.nan) for k in keys] + [result.rmse.get(label, math.nan)]
        lines.append(f"{label:<{width}}" + "".join(f" {cell(v):>8}" for v in values))
    return "\n".join(lines)


def cell(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.4f}"
