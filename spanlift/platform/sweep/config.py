"""The sweep YAML schema, validated into typed objects before Ray starts.

A bad file is rejected with the key path, the value and what was expected, e.g.
`sweeps/x.yaml: solvers[2].search.kernel_size: expected a list of values, got 3`.
See `sweeps/digits_nfe.yaml` for a commented example of every section.
"""

import itertools
import json
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NoReturn

import yaml

from spanlift.backbones import BACKBONES
from spanlift.errors import OptionError, SettingsError, SpanliftError
from spanlift.platform.evaluation.metrics import METRICS, EvaluationMetric, option_values
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.fitting.losses import LOSSES
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
from spanlift.platform.storage import check_storage, is_uri
from spanlift.platform.sweep.searchers import (
    SEARCHERS,
    SearchAlgorithm,
    default_search,
    stored_searcher,
)
from spanlift.platform.tracking.metrics import check_search_metric
from spanlift.solvers import SOLVERS, SolverSpec, build_solver
from spanlift.solvers.schedules import EDM_SIGMA_MAX, EDM_SIGMA_MIN, SCHEDULES
from spanlift.solvers.spec import check_settings, steps_for_nfe


class SweepConfigError(SettingsError):
    """A sweep file that does not follow the schema."""


DEFAULT_STORAGE = "runs/sweeps"
"""Results folder when the file names none: relative to the working directory, like MLflow's
default store. A relative path written in the file is relative to the file's folder."""


@dataclass(frozen=True)
class SolverEntry:
    """One solver to compare: fixed settings, NFE budgets and the settings to search over."""

    name: str
    nfe: tuple[int, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    search: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)
    """Fit settings of this entry that differ from the sweep's `fit` (loss, target, …, and
    `seeds`, its replicates)."""
    label: str = ""
    """The name its runs carry on the leaderboard (default: the solver's name), so one solver
    fitted two ways is ranked as two rows, e.g. `spanlift (pooled, teacher)`."""
    schedule: str = "edm"
    """The σ grid (see `spanlift.solvers.schedules`); `edm_to_zero` is EDM's own protocol."""

    @property
    def fit_settings(self) -> dict[str, Any]:
        """The entry's own fit settings (its `fit:` without the replicates' `seeds`)."""
        return {k: v for k, v in self.fit.items() if k != "seeds"}

    def grid(self) -> list[SolverSpec]:
        keys = list(self.search)
        specs = []
        for nfe in self.nfe:
            for values in itertools.product(*(self.search[k] for k in keys)):
                specs.append(
                    SolverSpec(
                        self.name,
                        nfe,
                        self.schedule,
                        {**self.settings, **dict(zip(keys, values, strict=True))},
                    )
                )
        return specs


@dataclass(frozen=True)
class Resources:
    """What a trial holds. With one worker (`workers: 1`) a trial fits in its own process, which
    holds `worker_cpu` (and `worker_gpu`); with more, the trial's process holds `trial_cpu` and
    its fit runs on Ray Train workers of `worker_cpu` (and `worker_gpu`) each, in DDP."""

    trial_cpu: float = 0.1
    """CPUs of a trial's own process while Ray Train workers fit (`workers` > 1)."""
    workers: int = 1
    worker_cpu: float = 0.9
    use_gpu: bool | str = "auto"
    """True, False, or "auto": GPUs when the cluster has `worker_gpu` per worker and
    `evaluator_gpu` per evaluator at sweep start."""
    worker_gpu: float = 1.0
    """GPUs each Train worker holds when the sweep uses GPUs: a fraction (0.25) lets several
    small-solver fits share one GPU."""
    max_failures: int = 2
    evaluator_cpu: float | None = None
    """CPUs each of the sweep's evaluator actors holds for the whole sweep; None: as a worker."""
    evaluator_gpu: float = 1.0
    """GPUs each evaluator actor holds when the sweep uses GPUs (a fraction shares one)."""

    @property
    def evaluator_cpus(self) -> float:
        return self.evaluator_cpu or self.worker_cpu

    @property
    def fits_in_trial(self) -> bool:
        """A single-worker fit runs in the trial's own process: no Ray Train controller and
        worker group to start for it (they buy nothing for one worker)."""
        return self.workers == 1

    @property
    def fit_threads(self) -> int:
        """torch's threads for a fit in the trial's process: its whole CPUs, at least one."""
        return max(1, int(self.worker_cpu + 1e-9))

    def uses_gpus(self, gpus: float, evaluators: int) -> bool:
        """`use_gpu` resolved on a cluster with `gpus` GPUs: "auto" packs the Train workers'
        and the evaluators' shares when they all fit (workers × worker_gpu + evaluators ×
        evaluator_gpu ≤ gpus)."""
        if self.use_gpu != "auto":
            return bool(self.use_gpu)
        wanted = self.workers * self.worker_gpu + evaluators * self.evaluator_gpu
        return gpus > 0 and gpus >= wanted - 1e-9

    def per_worker(self) -> dict[str, float]:
        """Ray resources of one Train worker (ScalingConfig.resources_per_worker)."""
        return {"CPU": self.worker_cpu, **({"GPU": self.worker_gpu} if self.use_gpu else {})}


@dataclass(frozen=True)
class EvaluationConfig:
    """Metrics beyond the endpoint error, computed by the sweep's evaluator actors after each
    trial's fit (`platform/evaluation/metrics/`: what each is, and its options)."""

    metrics: tuple[str, ...] = ()
    samples: int = 1000
    """Samples scored per configuration (test seeds)."""
    validation_samples: int | None = None
    """Samples on validation seeds for a sample metric the sweep searches on (FID, say); None:
    as many as `samples`."""
    evaluators: int = 1
    """Evaluator actors, each holding the backbone and the metrics' networks."""
    detector: str | None = None
    """Feature detector of the metrics that compare features (FID); None: the backbone's own."""
    reference: str = "dataset"
    """FID reference: dataset (the backbone's training images), teacher (teacher samples), or a
    statistics .npz such as NVlabs' cifar10-32x32.npz (the usual choice for EDM networks)."""
    reference_samples: int = 10_000
    """Teacher samples in a teacher reference."""
    batch_size: int | str = "auto"
    """Samples drawn, decoded and scored at once: a number, or auto (the most, up to 256, that
    a pass is predicted to hold in the device's free memory)."""
    options: dict[str, Any] = field(default_factory=option_values)
    """Every metric's options by key (`lpips_weights`, `skill_convention`, …): the other keys of
    the section, each declared by its metric."""

    def settings(self) -> dict[str, Any]:
        """The section as the file writes it, every metric's options filled in: what the stored
        sweep and a run key hold."""
        data = asdict(self)
        options = data.pop("options")
        return {**data, **options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled from a Tune state saved with each metric's options as fields of their own."""
        own = {f.name for f in fields(EvaluationConfig)}
        moved = {key: state.pop(key) for key in list(state) if key not in own}
        state.setdefault("options", option_values(moved))
        self.__dict__.update(state)


@dataclass(frozen=True)
class TeacherConfig:
    solver: SolverSpec = DEFAULT_TEACHER
    """The solver whose endpoints the fits match."""
    train_samples: int = 1024
    """Teacher endpoints to fit on (training seeds)."""
    validation_samples: int = 256
    """Teacher endpoints every choice is made on (validation seeds: the fit's kept state, the
    searcher, the leaderboard's configuration per solver)."""
    test_samples: int = 256
    """Held-out teacher endpoints the reported values are measured on (test seeds)."""


@dataclass(frozen=True)
class SweepConfig:
    experiment: str
    backbone: str
    backbone_options: dict[str, Any]
    teacher: TeacherConfig
    solvers: tuple[SolverEntry, ...]
    search: SearchAlgorithm = field(default_factory=default_search)
    """The searcher `search.algorithm` names, with its options (`platform/sweep/searchers/`)."""
    metric: str = "rmse"
    mode: str = "min"
    fit: FitSettings = field(default_factory=FitSettings)
    resources: Resources = field(default_factory=Resources)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    tracking_uri: str | None = None  # None: --tracking-uri, MLFLOW_TRACKING_URI, or the default
    storage: str = DEFAULT_STORAGE
    source: str = ""
    seeds: tuple[int, ...] = ()
    """The fit seeds of every learned configuration (`fit: {seeds: [0, 1, 2]}`): one replicate,
    its own run, per seed; (): `fit.seed` alone."""

    @property
    def algorithm(self) -> str:
        """The searcher's name."""
        return self.search.name

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled from a Tune state: one saved with the searcher in `algorithm` and
        `num_samples` fields, as the stored sweep still writes it, gets its searcher back."""
        if "search" not in state:
            stored = {k: state.pop(k) for k in ("algorithm", "num_samples") if k in state}
            state["search"] = stored_searcher(stored)
        self.__dict__.update(state)

    @property
    def search_metric(self) -> str:
        """What the searcher, the progress view's best and the sweep's best read: the search
        metric on validation seeds."""
        return f"val_{self.metric}"

    def evaluator_actors(self) -> tuple[int, float, float, int]:
        """(actors, CPUs, GPUs and torch threads each) of the sweep's evaluators: none when it
        needs none; on GPUs one actor per `evaluation.evaluators` with `evaluator_gpu`; on CPUs
        each evaluator's share of c CPUs as max(1, ⌊c⌋) actors of one thread (measured: two
        one-thread actors sample and score a digits FID 1.22× as fast as one two-thread actor;
        `benchmarks/evaluator_threads.py`)."""
        r = self.resources
        count = self.evaluation.evaluators if self.needs_evaluators else 0
        if r.use_gpu is True:  # resolved on the cluster ("auto": `Resources.uses_gpus`)
            return count, r.evaluator_cpus, r.evaluator_gpu, max(1, int(r.evaluator_cpus))
        split = max(1, int(r.evaluator_cpus + 1e-9))
        return count * split, r.evaluator_cpus / split, 0.0, 1

    @property
    def needs_evaluators(self) -> bool:
        """Whether the sweep starts evaluator actors: for sample metrics, and to score fits that
        ran on Ray Train workers (a trial in its own process scores its fit itself)."""
        return bool(self.evaluation.metrics) or not self.resources.fits_in_trial

    def trials(self) -> list[SolverSpec]:
        """Every configuration of the grid, in file order."""
        return [spec for _, spec in self.grid()]

    def grid(self) -> list[tuple[SolverEntry, SolverSpec]]:
        """Every configuration of the grid with the entry it comes from, in file order."""
        return [(entry, spec) for entry in self.solvers for spec in entry.grid()]

    def fit_of(self, entry: SolverEntry) -> FitSettings:
        """The fit settings of an entry: the sweep's, with the entry's own on top."""
        return self.fit.updated(entry.fit_settings)

    def replicate_seeds(self, entry: SolverEntry) -> tuple[int, ...]:
        """The fit seeds of an entry's learned configurations: the entry's `fit.seeds`, else the
        sweep's, else its fit seed alone."""
        return tuple(entry.fit.get("seeds") or self.seeds or (self.fit_of(entry).seed,))

    def as_dict(self) -> dict[str, Any]:
        """The validated sweep, defaults filled in, as plain data (stored with the Tune state);
        the searcher as `algorithm`, `num_samples` and its options (`SearchAlgorithm.stored`)."""
        data: dict[str, Any] = {}
        own = {"fit": self.fit.to_dict(), "evaluation": self.evaluation.settings()}
        for key, value in {**asdict(self), **own}.items():
            data |= self.search.stored() if key == "search" else {key: value}
        data = json.loads(json.dumps(data, default=str))
        data.pop("source")
        return data


class _Reader:
    """Reads one mapping of the YAML with a key path for every error message."""

    def __init__(self, data: Any, path: str, source: str) -> None:
        self.source, self.path = source, path
        if not isinstance(data, dict):
            self.fail("", data, "a mapping of keys to values")
        self.data = data

    def fail(self, key: str, value: Any, expected: str) -> NoReturn:
        self.error(key, f"expected {expected}, got {value!r}")

    def error(self, key: str, message: str) -> NoReturn:
        where = f"{self.path}.{key}" if self.path and key else (key or self.path or "top level")
        raise SweepConfigError(f"{self.source}: {where}: {message}")

    def only(self, *allowed: str) -> None:
        for key in self.data:
            if key not in allowed:
                self.error(key, f"unknown key; the keys here are: {', '.join(allowed)}")

    def get(
        self, key: str, kind: type | tuple[type, ...], default: Any = ..., expected: str = ""
    ) -> Any:
        if key not in self.data:
            if default is ...:
                self.fail(key, None, f"a value for the required key '{key}'")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            self.fail(key, value, expected or f"a {getattr(kind, '__name__', kind)}")
        return value

    def child(self, key: str, default: Any = ...) -> "_Reader":
        return _Reader(
            self.get(key, dict, default, "a mapping"), f"{self.path}.{key}".strip("."), self.source
        )

    def positive_int(self, key: str, default: Any = ...) -> int:
        value = self.get(key, int, default, "a positive integer")
        if value < 1:
            self.fail(key, value, "a positive integer")
        return value

    def positive_number(self, key: str, default: Any = ...) -> float:
        value = self.get(key, (int, float), default, "a positive number")
        if value <= 0:
            self.fail(key, value, "a positive number")
        return float(value)


def _checked(reader: _Reader, key: str, check: Any) -> None:
    """Run a library check and re-raise its message under the YAML key path."""
    try:
        check()
    except SpanliftError as exc:
        reader.error(key, str(exc))


def _solver_entry(data: Any, path: str, source: str, folder: Path) -> SolverEntry:
    r = _Reader(data, path, source)
    r.only("name", "nfe", "schedule", "settings", "search", "fit", "label")
    name = r.get("name", str, expected="a solver name")
    schedule = r.get("schedule", str, SolverEntry.schedule)
    _checked(r, "schedule", lambda: SCHEDULES.get(schedule))
    _checked(r, "name", lambda: SOLVERS.get(name))
    nfe = r.get("nfe", (int, list), expected="an NFE or a list of NFEs")
    nfe = tuple(nfe if isinstance(nfe, list) else [nfe])
    settings = r.get("settings", dict, {}, "a mapping of solver settings")
    search_reader = r.child("search", {})
    search = {}
    for key, values in search_reader.data.items():
        if not isinstance(values, list) or not values:
            search_reader.fail(key, values, "a non-empty list of values")
        search[key] = tuple(values)
    fit = _fit_paths(r.get("fit", dict, {}, "a mapping of fit settings"), folder)
    for key in fit:
        if key not in FIT_KEYS:
            r.error(f"fit.{key}", f"unknown key; the keys here are: {', '.join(FIT_KEYS)}")
    if "seeds" in fit:
        fit = {**fit, "seeds": _seeds(r.child("fit"), fit["seeds"])}
    entry = SolverEntry(name, nfe, settings, search, fit, r.get("label", str, ""), schedule)
    for spec in entry.grid():
        _checked(r, "settings", lambda spec=spec: check_settings(spec.name, spec.settings))
        _checked(
            r, "nfe", lambda spec=spec: steps_for_nfe(spec.name, spec.nfe, spec.settings, schedule)
        )
        _checked(r, "settings", lambda spec=spec: build_solver(spec, *PROBE_SIGMAS, channels=1))
    return entry


FIT_KEYS = (*FitSettings.names(), "seeds")
"""What a `fit:` section takes: the fit settings, and `seeds`, the replicates' fit seeds."""


def _seeds(reader: _Reader, value: Any) -> tuple[int, ...]:
    """`fit.seeds`: a non-empty list of distinct non-negative integers."""
    ok = (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    )
    if not ok or len(set(value)) != len(value):
        reader.fail("seeds", value, "a non-empty list of distinct non-negative integer fit seeds")
    return tuple(value)


PROBE_SIGMAS = (EDM_SIGMA_MIN, EDM_SIGMA_MAX)
"""EDM's σ range, over which every configuration is built once to check its settings before Ray
starts (the backbone's own range may differ; what the settings allow does not)."""


@dataclass(frozen=True)
class Probe:
    """A stand-in backbone with EDM's σ range and one channel: what building a solver to look at
    it (its settings, whether it learns) needs of a backbone."""

    sigma_min: float = EDM_SIGMA_MIN
    sigma_max: float = EDM_SIGMA_MAX
    shape: tuple[int, ...] = (1,)


def _use_gpu(reader: _Reader) -> bool | str:
    value = reader.get("use_gpu", (bool, str), Resources.use_gpu, "true, false or auto")
    if value not in (True, False, "auto"):
        reader.fail("use_gpu", value, "true, false or auto")
    return value


def _evaluation(e: _Reader, folder: Path) -> EvaluationConfig:
    from spanlift.platform.detectors.registry import DETECTORS
    from spanlift.platform.evaluation.metrics.reference import read_statistics

    own = [f.name for f in fields(EvaluationConfig) if f.name != "options"]
    e.only(*own, *(key for _, metric in METRICS for key in metric.option_names()))
    defaults = EvaluationConfig()
    metrics = tuple(e.get("metrics", list, list(defaults.metrics)))
    for metric in metrics:
        if metric not in METRICS:
            e.fail("metrics", metric, f"metrics among {', '.join(METRICS.names())}")
    detector = e.get("detector", str, defaults.detector)
    if detector is not None and detector not in DETECTORS:
        e.fail("detector", detector, f"one of {', '.join(DETECTORS.names())}")
    reference = e.get("reference", str, defaults.reference)
    if reference not in ("dataset", "teacher"):  # a statistics file, relative to the sweep file
        reference = str((folder / Path(reference).expanduser()).resolve())
        _checked(e, "reference", lambda: read_statistics(Path(reference)))
    return EvaluationConfig(
        metrics,
        e.positive_int("samples", defaults.samples),
        e.positive_int("validation_samples", None) if "validation_samples" in e.data else None,
        e.positive_int("evaluators", defaults.evaluators),
        detector,
        reference,
        e.positive_int("reference_samples", defaults.reference_samples),
        batch_size=_batch_size(e, "batch_size", defaults.batch_size),
        options={
            k: v for _, m in METRICS for k, v in asdict(_metric_options(e, m, folder)).items()
        },
    )


def _metric_options(e: _Reader, metric: type[EvaluationMetric], folder: Path) -> Any:
    """`metric`'s options from the section's keys it declares, each of its field's type (a path
    as text, relative to the file's folder), checked by the options themselves."""
    hints = typing.get_type_hints(metric.Options)
    given = {}
    for key in (k for k in metric.option_names() if k in e.data):
        kind = next(t for t in (*typing.get_args(hints[key]), hints[key]) if t is not type(None))
        given[key] = e.get(key, str if kind is Path else kind)
    try:
        return metric.Options(**given).within(folder)
    except OptionError as exc:
        e.error(exc.key, exc.detail)


def _batch_size(reader: _Reader, key: str, default: int | str) -> int | str:
    """A positive number of samples, or "auto"."""
    value = reader.data.get(key, default)
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        reader.fail(key, value, "a positive integer or auto")
    return value


PATH_OPTIONS = ("weights", "path", "dir", "root", "data", "code", "prompts")
"""Backbone and loss options whose names end so hold paths: relative ones are relative to the
file."""


def _absolute_paths(options: dict[str, Any], folder: Path) -> dict[str, Any]:
    return {
        key: str((folder / Path(value).expanduser()).resolve())
        if isinstance(value, str) and key.endswith(PATH_OPTIONS)
        else value
        for key, value in options.items()
    }


def _fit_paths(fit: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Fit settings with their path-valued loss options (see PATH_OPTIONS) made absolute."""
    options = fit.get("loss_options")
    if not isinstance(options, dict):
        return fit  # absent, or refused with its key path by FitSettings
    return {**fit, "loss_options": _absolute_paths(options, folder)}


def _tracking_uri(uri: str | None, folder: Path) -> str | None:
    """A relative sqlite store written in the file is relative to the file's folder."""
    if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str((folder / uri.removeprefix("sqlite:///")).resolve())
    return uri


def parse_sweep(data: Any, source: str = "<sweep>", folder: Path | None = None) -> SweepConfig:
    """The sweep in `data`; relative paths in it are taken relative to `folder` (the file's)."""
    folder = folder or Path.cwd()
    r = _Reader(data, "", source)
    r.only(
        "experiment",
        "backbone",
        "teacher",
        "solvers",
        "search",
        "fit",
        "resources",
        "evaluation",
        "tracking",
        "storage",
    )
    backbone = r.data.get("backbone")
    if isinstance(backbone, str):
        backbone = {"name": backbone}
    b = _Reader(backbone, "backbone", source)
    b.only("name", "options")
    backbone_name = b.get("name", str, expected="a backbone name")
    _checked(b, "name", lambda: BACKBONES.get(backbone_name))

    t = r.child("teacher", {})
    t.only(
        "solver",
        "nfe",
        "schedule",
        "settings",
        "train_samples",
        "validation_samples",
        "test_samples",
    )
    teacher = _teacher(t)
    solvers_data = r.get("solvers", list, expected="a list of solvers to compare")
    if not solvers_data:
        r.fail("solvers", solvers_data, "at least one solver")
    solvers = tuple(
        _solver_entry(s, f"solvers[{i}]", source, folder) for i, s in enumerate(solvers_data)
    )

    s = r.child("search", {})
    search = _searcher(s)
    mode = s.get("mode", str, SweepConfig.mode)
    if mode not in ("min", "max"):
        s.fail("mode", mode, "'min' or 'max'")

    f = r.child("fit", {})
    f.only(*FIT_KEYS)
    seeds = _seeds(f, f.data["seeds"]) if "seeds" in f.data else ()
    try:
        fit = FitSettings(**_fit_paths({k: v for k, v in f.data.items() if k != "seeds"}, folder))
    except SpanliftError as exc:
        raise SweepConfigError(f"{source}: fit: {exc}") from None
    if fit.loss not in LOSSES:
        f.fail("loss", fit.loss, f"one of {', '.join(LOSSES.names())}")
    for i, entry in enumerate(solvers):
        try:
            fit.updated(entry.fit_settings)
        except SpanliftError as exc:
            raise SweepConfigError(f"{source}: solvers[{i}].fit: {exc}") from None

    res = r.child("resources", {})
    res.only(
        "trial_cpu",
        "workers",
        "worker_cpu",
        "use_gpu",
        "max_failures",
        "evaluator_cpu",
        "evaluator_gpu",
        "worker_gpu",
    )
    resources = _resources(res)
    for i, entry in enumerate(solvers):
        batch = fit.updated(entry.fit_settings).batch_size
        if batch % resources.workers:
            where = f"solvers[{i}].fit" if "batch_size" in entry.fit else "fit"
            raise SweepConfigError(
                f"{source}: {where}.batch_size: {batch} is the batch of one update over all "
                f"{resources.workers} workers (resources.workers): it must be a multiple of "
                f"{resources.workers}"
            )
    tracking = r.child("tracking", {})
    tracking.only("uri")
    evaluation = _evaluation(r.child("evaluation", {}), folder)
    metric = s.get("metric", str, SweepConfig.metric)
    _checked(s, "metric", lambda: check_search_metric(metric, evaluation.metrics))
    storage = r.get("storage", str, None)
    if storage:
        _checked(r, "storage", lambda: check_storage(storage))
    return SweepConfig(
        experiment=r.get("experiment", str, expected="an experiment name"),
        backbone=backbone_name,
        backbone_options=_absolute_paths(b.get("options", dict, {}), folder),
        teacher=teacher,
        solvers=solvers,
        search=search,
        metric=metric,
        mode=mode,
        fit=fit,
        resources=resources,
        evaluation=evaluation,
        tracking_uri=_tracking_uri(tracking.get("uri", str, None), folder),
        storage=stored_at(storage, folder),
        source=source,
        seeds=seeds,
    )


def _searcher(s: _Reader) -> SearchAlgorithm:
    """The searcher `search.algorithm` names (a registered one), made from its options: the keys
    of `search:` its dataclass declares."""
    name = s.get("algorithm", str, default_search().name)
    if name not in SEARCHERS:
        s.fail("algorithm", name, f"one of {', '.join(SEARCHERS.names())}")
    searcher = SEARCHERS.get(name)
    s.only("algorithm", "metric", "mode", *searcher.options())
    try:
        return searcher(**{k: s.data[k] for k in searcher.options() if k in s.data})
    except OptionError as exc:
        s.fail(exc.key, exc.value, exc.expected)


def stored_at(storage: str | None, folder: Path) -> str:
    """The file's `storage`: a bucket URI as written, a folder relative to the file's folder."""
    if not storage:
        return DEFAULT_STORAGE
    return storage if is_uri(storage) else str((folder / storage).resolve())


def _teacher(t: _Reader) -> TeacherConfig:
    """The `teacher:` section; what it leaves out is DEFAULT_TEACHER's, or TeacherConfig's."""
    defaults = TeacherConfig()
    solver = t.get("solver", str, defaults.solver.name)
    return TeacherConfig(
        SolverSpec(
            solver,
            t.positive_int("nfe", defaults.solver.nfe),
            t.get("schedule", str, defaults.solver.schedule),
            t.get("settings", dict, dict(defaults.solver.settings)),
        ),
        t.positive_int("train_samples", defaults.train_samples),
        t.positive_int("validation_samples", defaults.validation_samples),
        t.positive_int("test_samples", defaults.test_samples),
    )


def _resources(res: _Reader) -> Resources:
    """The `resources:` section; what it leaves out is Resources' default."""
    defaults = Resources()
    return Resources(
        trial_cpu=res.positive_number("trial_cpu", defaults.trial_cpu),
        workers=res.positive_int("workers", defaults.workers),
        worker_cpu=res.positive_number("worker_cpu", defaults.worker_cpu),
        use_gpu=_use_gpu(res),
        worker_gpu=_gpu_share(res, "worker_gpu", defaults.worker_gpu),
        max_failures=res.get("max_failures", int, defaults.max_failures),
        evaluator_cpu=res.positive_number("evaluator_cpu") if "evaluator_cpu" in res.data else None,
        evaluator_gpu=_gpu_share(res, "evaluator_gpu", defaults.evaluator_gpu),
    )


def _gpu_share(res: _Reader, key: str, default: float) -> float:
    """GPUs a worker or evaluator holds: a fraction of one (0 < x ≤ 1) or a whole number, the
    amounts Ray can place."""
    value = res.positive_number(key, default)
    if value > 1 and not value.is_integer():
        res.fail(key, value, "a fraction of one GPU (0 < x ≤ 1) or a whole number of GPUs")
    return value


def load_sweep(path: str | Path) -> SweepConfig:
    path = Path(path)
    if not path.is_file():
        raise SweepConfigError(f"sweep file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SweepConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_sweep(data, str(path), path.parent)
