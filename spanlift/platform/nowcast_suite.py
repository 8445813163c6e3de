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

import torch
import xarray as xr

from spanlift.backbones import Backbone, load_backbone
from spanlift.backbones.nowcast_windows import sample_to_vil
from spanlift.errors import SettingsError
from spanlift.nowcasting.plots import plot_frame_strip, plot_lead_time_scores
from spanlift.nowcasting.scores import THRESHOLDS
from spanlift.nowcasting.windows import DEFAULT_SPLIT, SplitSettings
from spanlift.platform.configuration import Configuration, teacher_identity
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.pool import evaluators_on_ray
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.platform.evaluation.sample_metrics import SampleReport, evaluate_samples
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.results.tracking import (
    command_tags,
    configuration_params,
    open_experiment,
    record_result,
)
from spanlift.platform.sampling.rollout import rollout, seed_noise
from spanlift.platform.sampling.score import endpoint_rmse
from spanlift.platform.sampling.teacher import load_or_generate
from spanlift.platform.tracking.runs import (
    ConfigurationRuns,
)
from spanlift.seeds import FID_FIRST_SEED, TEST_SEED_OFFSET
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
    lpips_weights: Path | None = None
    tracking_uri: str | None = None
    experiment: str = ""
    split: SplitSettings = DEFAULT_SPLIT


@dataclass
class SuiteResult:
    rows: list[str] = field(default_factory=list)
    reports: dict[str, SampleReport] = field(default_factory=dict)
    rmse: dict[str, float] = field(default_factory=dict)
    fit_seconds: dict[str, float] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    run_ids: dict[str, str] = field(default_factory=dict)


def backbone_options(request: SuiteRequest) -> dict[str, Any]:
    options: dict[str, Any] = {"data": str(request.data), "split": request.split.split}
    bounds = {"start": request.split.start, "end": request.split.end}
    options |= {name: date for name, date in bounds.items() if date is not None}
    if request.weights:
        options["weights"] = str(request.weights)
    return options


def run_suite(
    request: SuiteRequest, address: str | None = None, num_cpus: int | None = None
) -> SuiteResult:
    """Fit, score and record every row; see the module docstring."""
    options = backbone_options(request)
    backbone = load_backbone("nowcast", **options)
    # every spec is checked before any work starts
    labels = [row.label(build(row.spec, backbone)) for row in request.rows]
    runs = open_runs(request)
    held_out = request.test_samples or len(backbone.windows.test)
    train = load_or_generate(request.cache, backbone, range(request.train_samples), request.teacher)
    test_seeds = range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + held_out)
    test = load_or_generate(request.cache, backbone, test_seeds, request.teacher)
    result = SuiteResult()
    rows = {f"teacher ddim {request.teacher.nfe}": Scored(request.teacher)}
    # each fit variant has its own fit key, and its base is fitted the same way
    for label, row in zip(labels, request.rows, strict=True):
        fitted = fit_spec(row.spec, backbone, train, row.fit, request.out / "fitted")
        rows[label] = Scored(row.spec, fitted.path, row.fit)
        result.rmse[label] = endpoint_rmse(fitted.solver, backbone, test)
        result.fit_seconds[label] = fitted.seconds
    setup = EvaluatorSetup(
        "nowcast",
        "",
        request.cache / "eval",
        options,
        lpips_weights=request.lpips_weights,
        teacher=request.teacher,
    )
    start_ray(address, request.out, num_cpus)
    with evaluators_on_ray(setup, request.evaluators) as pool:
        for label, row in rows.items():
            result.reports[label] = evaluate_samples(
                pool, row.spec, row.checkpoint, held_out, METRICS, ReferenceSet()
            )
            result.rows.append(label)
    result.files = write_outputs(result, backbone, rows, request.out)
    if runs is not None:
        result.run_ids = record_runs(runs, request, result, rows, options)
    return result


@dataclass(frozen=True)
class Scored:
    """What a row of the table scores: the spec, its fitted checkpoint, how it was fitted."""

    spec: SolverSpec
    checkpoint: Path | None = None
    fit: FitSettings | None = None


def per_lead(result: SuiteResult) -> dict[str, xr.Dataset]:
    return {label: result.reports[label].skill.to_dataset() for label in result.rows}


def write_outputs(
    result: SuiteResult,
    backbone: Backbone,
    rows: dict[str, Scored],
    out: Path,
) -> list[Path]:
    """The per-lead scores of every row as one NetCDF (dim `solver`), the lead-time plot and the
    frame strip of the first held-out window."""
    out.mkdir(parents=True, exist_ok=True)
    scores = per_lead(result)
    netcdf = out / "nowcast-scores.nc"
    combined = xr.concat(list(scores.values()), dim="solver").assign_coords(solver=list(scores))
    combined.to_netcdf(netcdf, engine="h5netcdf")
    lead_plot = plot_lead_time_scores(scores, out / "nowcast-lead-time.png")
    strip = plot_frame_strip(*forecast_strip(backbone, rows), out / "nowcast-frames.png")
    return [netcdf, lead_plot, strip]


@torch.no_grad()
def forecast_strip(backbone: Backbone, rows: dict[str, Scored]) -> tuple[Any, Any, dict[str, Any]]:
    """Past and observed frames of the first scored window, and each row's forecast of it, on
    the VIL scale."""
    seeds = [FID_FIRST_SEED]
    cond, noise = backbone.conditioning(seeds), seed_noise(seeds, backbone.shape)
    forecasts = {
        label: sample_to_vil(
            backbone.decode(
                rollout(load_solver(row.spec, row.checkpoint, backbone), backbone, noise, cond)
            )
        )[0].numpy()
        for label, row in rows.items()
    }
    past = sample_to_vil(cond)[0].numpy()
    observed = sample_to_vil(backbone.observations(seeds))[0].numpy()
    return past, observed, forecasts


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
    """One MLflow run per row: params, the table's metrics, its per-lead NetCDF and the PNGs."""
    ids = {}
    for label in result.rows:
        row, report = rows[label], result.reports[label]
        configuration = Configuration(
            "nowcast",
            options,
            row.spec,
            teacher_identity(request.teacher, request.train_samples),
            fit=row.fit.to_dict() if row.fit else {},
            evaluation={"samples": report.samples, "metrics": list(METRICS)},
        )
        params = {
            **configuration_params(configuration),
            "solver": label,
            "teacher.train_samples": request.train_samples,
            "scores.convention": report.skill.convention if report.skill else "",
        }
        metrics = {**report.metrics(), "nfe": float(row.spec.nfe)}
        if label in result.rmse:
            metrics |= {"rmse": result.rmse[label], "fit_seconds": result.fit_seconds[label]}
        with tempfile.TemporaryDirectory() as folder:
            netcdf = Path(folder) / "skill-scores.nc"
            report.skill.to_dataset().to_netcdf(netcdf, engine="h5netcdf")
            files = [netcdf, *result.files[1:], *([row.checkpoint] if row.checkpoint else [])]
            ids[label] = record_result(
                runs,
                configuration,
                f"{label} nfe={row.spec.nfe}",
                params,
                command_tags("nowcast eval"),
                metrics,
                files,
                report.params(),
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
