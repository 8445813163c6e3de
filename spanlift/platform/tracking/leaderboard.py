"""The leaderboard: a query over an experiment's finished MLflow runs.

Per backbone and NFE, each solver appears once, with one configuration, and solvers are ranked by
its value. How rankings are made (docs/evaluation.md, "How rankings are made"):

- **Comparable values.** A value is ranked only against values measured the same way: runs are
  grouped by the params the metric is measured against (`metrics.METRICS[metric].against`, e.g.
  the teacher and its test seeds for RMSE, the detector and reference for FID; for a metric not
  in the catalogue, its own `<metric>.*` params), and with `by_fit` also by the fit budget
  (`metrics.FIT_BUDGET`). A param a run did not log counts as empty.
- **Replicates.** Runs of one configuration fitted from different seeds (param
  `configuration.key`) are one row: the mean of their test values, their standard deviation, n,
  and a 95 % Student t interval (`platform/statistics.py`).
- **Choice on validation seeds.** Each solver's configuration is the one with the best mean
  validation value (`val_<metric>`; for a metric measured on test samples only, that of the
  metric its sweep searched on, `selection.metric`); test values never choose. Runs recorded
  before validation seeds existed have none: such a solver's row is chosen on test values and
  marked †, unless it is the solver's only configuration (the nowcast suite records one per
  solver): then nothing was chosen.
- **Self-measured values.** A run records the pretrained networks its fit loss used
  (`fit.loss_networks`) and each metric's plug-in says which it measures with: a row whose ranked
  or shown metric was measured with one of them, by a run that fitted something, is marked §
  (partly optimised against itself). Runs recorded before the param existed get no mark.
- **Ties.** Each row is compared with the row ranked below it on the same test seeds: for RMSE a
  two-level bootstrap interval of their ratio over test seeds and fit seeds (`comparison.py`), for
  other metrics a Welch interval over the replicates. Within noise, the row is marked ≈.

The `ends` column says where a row's sampling ended: at σ_min (the platform's protocol, as
DyWeight and diff-sampler) or at σ = 0 (EDM's own `generate.py`, schedule `edm_to_zero`), since
EDM's published teacher FIDs use the latter. Formats (text, Markdown, LaTeX, CSV) are in
`board_format.py`, the plot in `board_plot.py`.
"""

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from spanlift.errors import SettingsError
from spanlift.platform.statistics import replicate_interval
from spanlift.platform.tracking.comparison import compare_neighbours
from spanlift.platform.tracking.entry import ROW_COLUMNS, Entry
from spanlift.platform.tracking.fit_cost import row_cost, run_cost
from spanlift.platform.tracking.metrics import FIT_BUDGET, METRICS, default_mode, measured_with
from spanlift.platform.tracking.runs import REPLICATE_PARAM, experiment_id

PROTOCOL_PARAMS = (
    "teacher",
    "schedule",
    "teacher.train_seeds",
    "teacher.validation_seeds",
    "teacher.test_seeds",
    "teacher.test_samples",
    "fid.detector",
    "fid.reference",
    "fid.samples",
    "fid.validation_seeds",
    "eval.samples",
    "fit.iterations",
    "fit.seed",
    "env.dtype",
    "env.device",
    "env.gpus",
    "env.threads",
    "env.commit",
    "env.modified",
    "code.version",
)
"""What a table's protocol footer reports, read from the params of the runs it ranks."""


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


def validation_name(metric: str) -> str:
    """The metric's value on validation seeds, as runs log it."""
    return metric if metric.startswith("val_") else f"val_{metric}"


def chosen_by(metric: str, params: dict[str, str], metrics: dict[str, float]) -> str:
    """The validation value that chooses among a run's configurations: the metric's own
    (`val_fid`), else that of the metric its sweep searched on (`selection.metric`, e.g.
    `val_rmse` for a FID measured on test samples only); "" for runs from before either."""
    for name in (validation_name(metric), params.get("selection.metric", "")):
        if name in metrics:
            return name
    return ""


def self_measured(params: dict[str, str], metrics: Iterable[str], fitted: bool) -> tuple[str, ...]:
    """Those of `metrics` a run measured with a pretrained network its fit loss used (param
    `fit.loss_networks`); none where nothing was fitted or the run predates the param."""
    used = {name for name in params.get("fit.loss_networks", "").split(",") if name}
    if not used or not fitted:
        return ()
    return tuple(m for m in metrics if measured_with(m, params) & used)


def runs_table(
    runs: list[Run], metric: str, by_fit: bool = False, columns: tuple[str, ...] = ()
) -> pd.DataFrame:
    """One row per run of `runs` that logged `metric`: backbone, what the value is measured
    against (`scale`), nfe, solver, configuration, its replicate group, value, validation value
    (NaN when not logged), run_id, the `columns` asked for, its fit cost (`fit_cost.run_cost`)
    and the protocol params."""
    runs = [r for r in runs if metric in r.data.metrics]
    names = comparison_params(metric, (name for r in runs for name in r.data.params), by_fit)
    return pd.DataFrame([_row(run, metric, names, columns) for run in runs])


def _row(run: Run, metric: str, names: tuple[str, ...], columns: tuple[str, ...]) -> dict:
    params, metrics = run.data.params, run.data.metrics
    protocol = {name: params[name] for name in PROTOCOL_PARAMS if params.get(name, "")}
    if "teacher.test_seeds" in protocol and params.get("teacher.test_samples"):
        protocol["teacher.test_seeds"] += f" ({params['teacher.test_samples']})"
    version = run.data.tags.get("spanlift.code_version")
    return {
        "backbone": params.get("backbone", "?"),
        "scale": measured_against(params, names),
        "nfe": int(params.get("nfe", metrics.get("nfe", 0))),
        "solver": params.get("solver", "?"),
        "configuration": params.get("configuration", run.info.run_name),
        "group": params.get(REPLICATE_PARAM) or run.info.run_id,
        "ends": sampling_end(params.get("schedule", "edm")),
        "value": metrics[metric],
        "validation": metrics.get(chooser := chosen_by(metric, params, metrics), np.nan),
        "chosen_by": "validation" if chooser == validation_name(metric) else chooser,
        "run_id": run.info.run_id,
        "started": run.info.start_time or 0,
        "code_version": version or "",
        "fit_seed": params.get("fit.seed", ""),
        "columns": {name: metrics[name] for name in columns if name in metrics},
        "fit_cost": (cost := run_cost(params, metrics)),
        "overlap": self_measured(params, (metric, *columns), cost.fitted),
        "protocol": {**protocol, **({"code.version": version} if version else {})},
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


@dataclass(frozen=True)
class Configuration:
    """One configuration of a solver in a group: its replicates' runs and values."""

    solver: str
    configuration: str
    runs: pd.DataFrame
    superseded: int = 0  # runs left out: another code version's, or a fit seed's older run

    @property
    def test(self) -> float:
        return float(self.runs["value"].mean())

    @property
    def chosen_by(self) -> str:
        return str(self.runs["chosen_by"].iloc[0])

    @property
    def validation(self) -> float | None:
        """The mean validation value; None unless every replicate logged one."""
        values = self.runs["validation"]
        return None if values.isna().any() else float(values.mean())


def configurations(group: pd.DataFrame) -> list[Configuration]:
    """The group's configurations: runs sharing solver and replicate group, in first-run order,
    each configuration's runs in fit-seed order (so replicates of two rows pair up), the newest
    code version's newest run of each fit seed (`newest_runs`)."""
    if "fit_seed" in group:
        group = group.assign(order=pd.to_numeric(group["fit_seed"], errors="coerce"))
        group = group.sort_values("order", kind="stable").drop(columns="order")
    return [
        Configuration(solver, str(part["configuration"].iloc[0]), *newest_runs(part))
        for (solver, _), part in group.groupby(["solver", "group"], sort=False)
    ]


def newest_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """A configuration's runs that count, and how many are left out. Runs of several result
    code versions (a solver changed and the sweep ran again) are different results, not
    replicates: the version whose latest run started last counts. Within it, a fit seed run
    twice (`spanlift sweep --restart`, `spanlift fit` again into the experiment) counts once,
    by its newest run. Runs recorded without a version or fit
    seed all count."""
    if "started" not in runs or len(runs) < 2:
        return runs, 0
    newest = runs.loc[runs["started"].idxmax(), "code_version"]
    kept = runs[runs["code_version"] == newest] if newest else runs
    seeded = kept[kept["fit_seed"] != ""].sort_values("started", kind="stable")
    kept = kept.drop(seeded.index[seeded.duplicated("fit_seed", keep="last")])
    return kept, len(runs) - len(kept)


def choose(candidates: list[Configuration], mode: str) -> tuple[Configuration, str]:
    """A solver's configuration and what chose it: the best mean validation value of the metric
    itself ("validation"), else of the metric its sweep searched on (e.g. "val_rmse", in that
    metric's own direction), else, for runs recorded before validation seeds, the best mean test
    value ("test"), or the only configuration, unchosen ("only")."""
    validated = [c for c in candidates if c.validation is not None]
    if validated:
        own = any(c.chosen_by == "validation" for c in validated)
        by = "validation" if own else validated[0].chosen_by
        direction = mode if own else default_mode(by.removeprefix("val_"))
        best = min if direction == "min" else max
        return best([c for c in validated if c.chosen_by == by], key=lambda c: c.validation), by
    if len(candidates) == 1:
        return candidates[0], "only"
    best = min if mode == "min" else max
    return best(candidates, key=lambda c: c.test), "test"


def rank(runs: pd.DataFrame, mode: str = "min") -> list[Entry]:
    """One configuration per (backbone, scale, NFE, solver), chosen on validation values (module
    docstring), solvers ranked within each (backbone, scale, NFE) by its mean test value."""
    if mode not in ("min", "max"):
        raise SettingsError(f"--mode must be min or max, got {mode!r}")
    runs = runs.assign(ends=runs.get("ends", "σ_min"))  # rows from before the column: σ_min
    for name, default in (("group", None), ("validation", np.nan)):
        if name not in runs:
            runs = runs.assign(**{name: runs["run_id"] if default is None else default})
    if "chosen_by" not in runs:
        runs = runs.assign(chosen_by="validation")
    entries = []
    for (backbone, scale, nfe), group in runs.groupby(["backbone", "scale", "nfe"], sort=True):
        by_solver: dict[str, list[Configuration]] = {}
        for candidate in configurations(group):
            by_solver.setdefault(candidate.solver, []).append(candidate)
        chosen = [choose(candidates, mode) for candidates in by_solver.values()]
        chosen.sort(key=lambda pick: pick[0].test, reverse=mode == "max")
        counts = group.groupby("solver").size()
        for position, (pick, chosen_on) in enumerate(chosen, start=1):
            entries.append(entry(backbone, scale, nfe, position, pick, chosen_on, counts))
    return entries


def entry(
    backbone: str,
    scale: str,
    nfe: int,
    position: int,
    pick: Configuration,
    chosen_on: str,
    counts: pd.Series,
) -> Entry:
    """The row of a chosen configuration."""
    runs = pick.runs
    interval = replicate_interval(runs["value"].to_numpy())
    columns = pd.DataFrame(list(runs["columns"])) if "columns" in runs else pd.DataFrame()
    first = runs.iloc[0]
    return Entry(
        str(backbone),
        str(scale),
        int(nfe),
        position,
        pick.solver,
        pick.configuration,
        interval.mean,
        int(counts[pick.solver]),
        str(first["run_id"]),
        str(first["ends"]),
        n=interval.n,
        sd=interval.sd,
        half_width=interval.half_width,
        validation=pick.validation,
        chosen_on=chosen_on,
        run_ids=tuple(runs["run_id"]),
        fit_seeds=tuple(runs["fit_seed"]) if "fit_seed" in runs else (),
        values=tuple(float(v) for v in runs["value"]),
        columns={name: float(columns[name].mean()) for name in columns},
        protocol=protocol_of(runs),
        fit=row_cost(list(runs["fit_cost"])) if "fit_cost" in runs else None,
        overlap=overlap_of(runs),
        superseded=pick.superseded,
    )


def overlap_of(runs: pd.DataFrame) -> tuple[str, ...]:
    """The metrics any replicate measured with a network its fit loss used (`self_measured`)."""
    if "overlap" not in runs:
        return ()
    return tuple(dict.fromkeys(name for names in runs["overlap"] for name in names))


def protocol_of(runs: pd.DataFrame) -> dict[str, str]:
    """The first replicate's protocol params, with the fit seeds of all replicates."""
    if "protocol" not in runs:
        return {}
    protocols = list(runs["protocol"])
    seeds = sorted({p["fit.seed"] for p in protocols if "fit.seed" in p}, key=int)
    return {**protocols[0], **({"fit.seed": ", ".join(seeds)} if seeds else {})}


def leaderboard(
    client: MlflowClient,
    experiment: str,
    metric: str = "rmse",
    mode: str = "min",
    by_fit: bool = False,
    columns: tuple[str, ...] = (),
) -> list[Entry]:
    """The ranked entries of the experiment's finished runs, each compared with the row below it
    (`comparison.compare_neighbours`); with `by_fit`, fits of different budgets are ranked apart;
    `columns`: other metrics to show, as their replicates' means."""
    finished = _all_runs(client, experiment_id(client, experiment))
    runs = runs_table(finished, metric, by_fit, columns)
    if runs.empty:
        recorded = sorted({name for run in finished for name in run.data.metrics})
        raise SettingsError(
            f"experiment {experiment!r} has no finished run with metric {metric!r} at "
            f"{client.tracking_uri}; its finished runs record: "
            + (", ".join(recorded) or "no metric (no run finished yet)")
        )
    recorded = {name for run in finished for name in run.data.metrics}
    missing = [name for name in columns if name not in {*recorded, *ROW_COLUMNS}]
    if missing:
        raise SettingsError(
            f"--columns: no finished run of {experiment!r} records {', '.join(missing)}; they "
            f"record: {', '.join(sorted(recorded))} (and a row shows its {', '.join(ROW_COLUMNS)})"
        )
    return compare_neighbours(rank(runs, mode), client, metric, mode)
