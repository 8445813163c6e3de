"""The sweep YAML schema, validated into typed objects before Ray starts.

A bad file is rejected with the key path, the value and what was expected, e.g.
`sweeps/x.yaml: solvers[2].search.kernel_size: expected a list of values, got 3`.
See `sweeps/digits_nfe.yaml` for a commented example of every section.
"""

import json
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

import yaml

from spanlift.backbones import BACKBONES
from spanlift.errors import OptionError, SpanliftError
from spanlift.platform.evaluation.metrics import METRICS, EvaluationMetric, option_values
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.fitting.losses import LOSSES
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
from spanlift.platform.storage import Storage, check_storage, open_storage
from spanlift.platform.strict_yaml import DuplicateKeyError, strict_load
from spanlift.platform.sweep import relative_paths
from spanlift.platform.sweep.relative_paths import DEFAULT_STORAGE
from spanlift.platform.sweep.resources import Resources
from spanlift.platform.sweep.schema import (
    CountOrAuto,
    PositiveInt,
    Rule,
    Section,
    SweepConfigError,
    read_fields,
)
from spanlift.platform.sweep.searchers import (
    SEARCHERS,
    SearchAlgorithm,
    default_search,
    stored_searcher,
)
from spanlift.platform.sweep.solver_entry import (
    FIT_KEYS,
    SolverEntry,
    check_spec,
    read_seeds,
    read_solver_entry,
)
from spanlift.platform.tracking.metrics import check_search_metric
from spanlift.solvers import SOLVERS, SolverSpec


@dataclass(frozen=True)
class EvaluationConfig:
    """Metrics beyond the endpoint error, computed by the sweep's evaluator actors after each
    trial's fit (`platform/evaluation/metrics/`: what each is, and its options)."""

    metrics: tuple[str, ...] = ()
    samples: PositiveInt = 1000
    """Samples scored per configuration (test seeds)."""
    validation_samples: PositiveInt | None = None
    """Samples on validation seeds for a sample metric the sweep searches on (FID, say); None:
    as many as `samples`."""
    evaluators: PositiveInt = 1
    """Evaluator actors, each holding the backbone and the metrics' networks."""
    detector: str | None = None
    """Feature detector of the metrics that compare features (FID); None: the backbone's own."""
    reference: str = "dataset"
    """FID reference: dataset (the backbone's training images), teacher (teacher samples), or a
    statistics .npz such as NVlabs' cifar10-32x32.npz (the usual choice for EDM networks)."""
    reference_samples: PositiveInt = 10_000
    """Teacher samples in a teacher reference."""
    batch_size: CountOrAuto = "auto"
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
    train_samples: PositiveInt = 1024
    """Teacher endpoints to fit on (training seeds)."""
    validation_samples: PositiveInt = 256
    """Teacher endpoints every choice is made on (validation seeds: the fit's kept state, the
    searcher, the leaderboard's configuration per solver)."""
    test_samples: PositiveInt = 256
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
        for entry in data["solvers"]:
            entry.pop("learned")  # read again from the entry's settings, not a setting itself
        return data


SECTIONS = ("experiment", "backbone", "teacher", "solvers", "search", "fit", "resources")
SECTIONS += ("evaluation", "tracking", "storage")
"""The top-level keys of a sweep file."""


def parse_sweep(data: Any, source: str = "<sweep>", folder: Path | None = None) -> SweepConfig:
    """The sweep in `data`; relative paths in it are taken relative to `folder` (the file's)."""
    folder = folder or Path.cwd()
    top = Section(data, "", source)
    top.only(*SECTIONS)
    backbone, backbone_options = _backbone(top, folder)
    solvers_data = top.get("solvers", list, expected="a list of solvers to compare")
    if not solvers_data:
        top.fail("solvers", solvers_data, "at least one solver")
    solvers = tuple(
        read_solver_entry(Section(s, f"solvers[{i}]", source), folder)
        for i, s in enumerate(solvers_data)
    )
    fit, seeds = _fit(top.child("fit", {}), solvers, folder)
    resources = Resources(**read_fields(top.child("resources", {}), Resources))
    _check_batches(top, fit, solvers, resources.workers)
    evaluation = _evaluation(top.child("evaluation", {}), folder)
    search = top.child("search", {})
    metric = search.get("metric", str, SweepConfig.metric)
    search.checked("metric", lambda: check_search_metric(metric, evaluation.metrics))
    tracking = top.child("tracking", {})
    tracking.only("uri")
    storage = top.get("storage", str, None)
    if storage:
        top.checked("storage", lambda: check_storage(storage))
    return SweepConfig(
        experiment=top.get("experiment", str, expected="an experiment name"),
        backbone=backbone,
        backbone_options=backbone_options,
        teacher=_teacher(top.child("teacher", {})),
        solvers=solvers,
        search=_searcher(search),
        metric=metric,
        mode=search.value("mode", Annotated[str, MIN_OR_MAX], SweepConfig.mode),
        fit=fit,
        resources=resources,
        evaluation=evaluation,
        tracking_uri=relative_paths.tracking_uri(tracking.get("uri", str, None), folder),
        storage=relative_paths.stored_at(storage, folder),
        source=source,
        seeds=seeds,
    )


MIN_OR_MAX = Rule("'min' or 'max'", lambda v: v in ("min", "max"))


def _backbone(top: Section, folder: Path) -> tuple[str, dict[str, Any]]:
    """`backbone:` a name, or a mapping of `name` and `options` (paths relative to the file)."""
    data = top.data.get("backbone")
    b = Section({"name": data} if isinstance(data, str) else data, "backbone", top.source)
    b.only("name", "options")
    name = b.get("name", str, expected="a backbone name")
    b.checked("name", lambda: BACKBONES.get(name))
    return name, relative_paths.absolute_paths(b.get("options", dict, {}), folder)


def _fit(f: Section, solvers: tuple[SolverEntry, ...], folder: Path) -> tuple[FitSettings, Any]:
    """(the sweep's fit settings, its replicates' seeds), every entry's own settings checked on
    top of them. `FitSettings` checks its values itself."""
    f.only(*FIT_KEYS)
    seeds = read_seeds(f) if "seeds" in f.data else ()
    given = relative_paths.fit_paths({k: v for k, v in f.data.items() if k != "seeds"}, folder)
    try:
        fit = FitSettings(**given)
    except SpanliftError as exc:
        raise SweepConfigError(f"{f.source}: fit: {exc}") from None
    if fit.loss not in LOSSES:
        f.fail("loss", fit.loss, f"one of {', '.join(LOSSES.names())}")
    for i, entry in enumerate(solvers):
        try:
            fit.updated(entry.fit_settings)
        except SpanliftError as exc:
            raise SweepConfigError(f"{f.source}: solvers[{i}].fit: {exc}") from None
    return fit, seeds


def _check_batches(top: Section, fit: FitSettings, solvers: Any, workers: int) -> None:
    """Each fit's batch is one update's over all Ray Train workers: it must split evenly."""
    for i, entry in enumerate(solvers):
        batch = fit.updated(entry.fit_settings).batch_size
        if batch % workers:
            where = f"solvers[{i}].fit" if "batch_size" in entry.fit else "fit"
            top.error(
                f"{where}.batch_size",
                f"{batch} is the batch of one update over all {workers} workers "
                f"(resources.workers): it must be a multiple of {workers}",
            )


def _evaluation(e: Section, folder: Path) -> EvaluationConfig:
    """`evaluation:`: its own fields, and the options every metric declares."""
    from spanlift.platform.evaluation.metrics.reference import read_statistics

    metric_keys = [key for _, metric in METRICS for key in metric.option_names()]
    given = read_fields(e, EvaluationConfig, skip=("options", *metric_keys))
    for metric in given.get("metrics", ()):
        if metric not in METRICS:
            e.fail("metrics", metric, f"metrics among {', '.join(METRICS.names())}")
    if given.get("detector") is not None:  # torch-fidelity and torchvision load only here
        from spanlift.platform.detectors.registry import DETECTORS

        if given["detector"] not in DETECTORS.names():
            e.fail("detector", given["detector"], f"one of {', '.join(DETECTORS.names())}")
    if given.get("reference", "dataset") not in ("dataset", "teacher"):  # a statistics file
        given["reference"] = relative_paths.within(folder, given["reference"])
        e.checked("reference", lambda: read_statistics(Path(given["reference"])))
    options = [asdict(_metric_options(e, metric, folder)) for _, metric in METRICS]
    return EvaluationConfig(**given, options={k: v for o in options for k, v in o.items()})


def _metric_options(e: Section, metric: type[EvaluationMetric], folder: Path) -> Any:
    """`metric`'s options from the section's keys it declares, typed as its fields are (a path
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


def _searcher(s: Section) -> SearchAlgorithm:
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


def _teacher(t: Section) -> TeacherConfig:
    """`teacher:`: the solver (`solver`, `nfe`, `schedule`, `settings`; DEFAULT_TEACHER's where
    left out, its settings only when the solver is its own) and the fields of TeacherConfig.
    Checked here, before anything starts: the solver, its settings and steps."""
    solver = ("solver", "nfe", "schedule", "settings")
    given = read_fields(t, TeacherConfig, skip=solver)
    default = DEFAULT_TEACHER
    name = t.value("solver", str, default.name)
    t.checked("solver", lambda: SOLVERS.get(name))
    spec = SolverSpec(
        name,
        t.value("nfe", PositiveInt, default.nfe),
        t.value("schedule", str, default.schedule),
        t.value("settings", dict, dict(default.settings) if name == default.name else {}),
    )
    check_spec(t, spec)
    return TeacherConfig(spec, **given)


def load_sweep(path: str | Path) -> SweepConfig:
    path = Path(path)
    if not path.is_file():
        raise SweepConfigError(f"sweep file not found: {path}")
    try:
        data = strict_load(path.read_text())
    except DuplicateKeyError as exc:
        raise SweepConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SweepConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_sweep(data, str(path), path.parent)


def sweep_storage(config: SweepConfig, storage: str | None) -> Storage:
    """`<storage>/<experiment>`: the command line's storage (a folder or a bucket URI), else the
    sweep file's; a bucket is checked to exist and be writable before anything runs."""
    return open_storage(storage or config.storage).child(config.experiment)
