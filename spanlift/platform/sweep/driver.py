"""`spanlift sweep`: a sweep YAML run as a Ray Tune experiment driven by Optuna.

    validate YAML → reach MLflow (a local store opened beside Ray's start) → start/join Ray
    → check a trial fits → teacher (once, parallel)
    → parent MLflow run → Tuner(OptunaSearch with the sweep's searcher, `searchers/`)
    → one child MLflow run per configuration → summary

Everything lands under `<storage>/<experiment>/`: `teacher/` (the cache), `fitted/` (solver
checkpoints), `train/` (Ray Train runs, resumable), `tune/` (the Tune experiment, restorable with
`--resume`), `sweep.yaml` (the validated sweep that state belongs to) and `summary.json` (wall
time, compute time, teacher generations, outcomes, the best configuration). In MLflow the sweep
is a parent run holding sweep.yaml and summary.json; its configurations are nested runs.
"""

import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from spanlift.platform.configuration import digest
from spanlift.platform.evaluation.pool import running_evaluators
from spanlift.platform.ray_runtime import (
    Reserved,
    TrialBundle,
    check_fits,
    check_reachable,
    ray_address,
    start_ray,
)
from spanlift.platform.storage import Storage
from spanlift.platform.sweep.config import SweepConfig, load_sweep, sweep_storage
from spanlift.platform.sweep.distinct_search import DistinctSearch
from spanlift.platform.sweep.evaluation import evaluator_setup
from spanlift.platform.sweep.interrupt import StopTrialsOnInterrupt
from spanlift.platform.sweep.progress import (
    console_settings,
    log_ray_to_file,
    quiet_console,
    restore_console,
)
from spanlift.platform.sweep.retries import NoRetryForGood
from spanlift.platform.sweep.space import (
    SearchSpace,
    SolverSpace,  # noqa: F401  (saved Tune states find it here)
)
from spanlift.platform.sweep.stages import Stages
from spanlift.platform.sweep.state import SWEEP_FILE, TUNE_NAME, check_restart
from spanlift.platform.sweep.stored_values import StoredValues
from spanlift.platform.sweep.summary import (
    SeenFailures,
    SweepSummary,
    expected_configurations,
    summarize,
)
from spanlift.platform.sweep.teacher import SweepTeachers, prepare_teachers
from spanlift.platform.sweep.trial import SweepContext, run_trial, trial_spec
from spanlift.platform.tracking.database import shown
from spanlift.platform.tracking.runs import (
    ConfigurationRuns,
    connect,
    experiment_id,
    source_tags,
)
from spanlift.platform.tracking.store_uri import check_store, local_store, resolve_tracking_uri


class FinalMetricOptunaSearch(OptunaSearch):
    """OptunaSearch that skips results without the metric: a fit's loss curve comes first."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if self.metric in result:
            super().on_trial_result(trial_id, result)


def searcher_for(context: SweepContext, concurrency: int) -> tuple[Searcher, int]:
    """The sweep's searcher (`search.algorithm`, `searchers/`) as an OptunaSearch, and its number
    of trials; one whose proposals can repeat runs inside the distinct-configuration layer."""
    config = context.config
    space = SearchSpace(config)
    plan = config.search.optuna(space)
    searcher: Searcher = FinalMetricOptunaSearch(
        plan.space,
        metric=space.metric,
        mode=space.mode,
        sampler=plan.sampler,
        points_to_evaluate=plan.points,
    )
    if config.search.repeats(space.size):
        stored = StoredValues(replace(context, evaluators=None))
        searcher = DistinctSearch(searcher, config, lag=concurrency, lookup=stored)
    return searcher, config.search.trials(space.size)


@dataclass(frozen=True)
class TrialName:
    """Trial names that say what runs, e.g. `spanlift[base=dyweight,kernel_size=3]-nfe4-1a2b`;
    as a folder name, with everything but letters, digits, `_.-` replaced by `_`."""

    config: SweepConfig
    folder: bool = False

    def __call__(self, trial: Any) -> str:
        spec = trial_spec(trial.config, self.config)
        name = f"{spec.label()}-nfe{spec.nfe}-{trial.trial_id}"
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) if self.folder else name


def trial_bundle(config: SweepConfig) -> TrialBundle:
    """What one trial of the sweep holds while it runs."""
    r = config.resources
    return TrialBundle(r.trial_cpu, r.workers, r.worker_cpu, r.use_gpu, r.worker_gpu)


def make_tuner(
    context: SweepContext,
    resume: bool,
    concurrency: int,
    verbose: bool = False,
    search: tuple[Searcher, int] | None = None,
    seen: SeenFailures | None = None,
) -> tune.Tuner:
    """The sweep's Tuner (restored with `resume`); `search`: its searcher and number of trials
    (default: `searcher_for`); `seen`: the callback that keeps the failures Tune reports."""
    config = context.config
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, context=context), trial_bundle(config).trial_resources()
    )
    where = context.store.ray_storage(TUNE_NAME)
    searcher, samples = search or searcher_for(context, concurrency)
    console = console_settings(verbose, config, samples, concurrency)
    console["callbacks"] += [NoRetryForGood(), StopTrialsOnInterrupt(), *([seen] if seen else [])]
    if resume:
        tuner = tune.Tuner.restore(
            where["storage_path"],
            trainable,
            resume_errored=True,
            storage_filesystem=where.get("storage_filesystem"),
        )
        restore_console(tuner, console)
        return tuner
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=samples,
            max_concurrent_trials=concurrency,
            reuse_actors=True,  # a trial's process (torch, Ray, spanlift imported) serves the next
            trial_name_creator=TrialName(config),
            trial_dirname_creator=TrialName(config, folder=True),
        ),
        run_config=tune.RunConfig(
            name=TUNE_NAME,
            **context.store.ray_storage(""),
            failure_config=tune.FailureConfig(max_failures=config.resources.max_failures),
            **console,
        ),
    )


def sync_sweep_state(store: Storage, config: SweepConfig, resume: bool, restart: bool) -> bool:
    """`check_restart` on the storage's Tune state and sweep file: with a bucket, this node's
    copy is refreshed from the bucket first, and what it decides is written back. Returns
    whether there is a Tune state to restore."""
    root = store.local
    store.refresh(root / TUNE_NAME)
    store.fetch(root / SWEEP_FILE)
    restore = check_restart(root, config, resume, restart)
    if restart:
        store.remove(root / TUNE_NAME)
    store.publish(root / SWEEP_FILE)
    return restore


def with_gpu_choice(config: SweepConfig) -> SweepConfig:
    """Resolve `use_gpu: auto` on the running cluster (`Resources.uses_gpus`)."""
    r = config.resources
    if r.use_gpu != "auto":
        return config
    use_gpu = r.uses_gpus(ray.cluster_resources().get("GPU", 0), config.evaluation.evaluators)
    return replace(config, resources=replace(r, use_gpu=use_gpu))


def run_sweep(
    path: str | Path,
    address: str | None = None,
    resume: bool = False,
    restart: bool = False,
    tracking_uri: str | None = None,
    storage: str | None = None,
    num_cpus: int | None = None,
    reuse_across_versions: bool = False,
    verbose: bool = False,
    stages: Stages | None = None,
    config: SweepConfig | None = None,
    store: Storage | None = None,
) -> SweepSummary:
    """Run (or continue) the sweep in `path` (`config`: that file as read already, `store`: its
    storage as opened already by `sweep_storage`); returns its summary, also written to
    summary.json and logged, with the validated sweep, to the sweep's parent MLflow run.

    The console shows each stage as it starts (`stages`), then one progress view; `verbose`:
    Ray's and Tune's own output instead."""
    start = time.perf_counter()
    stages = stages or Stages()
    if not verbose:
        quiet_console()
    # The Train workers' loss reports reach Tune before the trial's metrics do. The search metric
    # is checked in the sweep file (`check_search_metric`) and in each trial's last report.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    config = config or load_sweep(path)
    store = store or sweep_storage(config, storage)
    root = store.local
    address = ray_address(address)
    if address:
        check_reachable(address)  # before anything is written
    uri = resolve_tracking_uri(tracking_uri, config.tracking_uri)
    experiment, restore = open_stores(config, store, uri, resume, restart, stages)
    config, concurrency = join_ray(config, root, address, num_cpus, verbose, stages)
    experiment.result()  # made beside Ray's start; its error, if any, now
    teachers = teacher_stage(config, store, stages)
    runs = ConfigurationRuns(uri, config.experiment)
    tags = source_tags(f"spanlift sweep {path}")
    parent = open_sweep_run(runs, config, root, tags)
    context = SweepContext(
        config, root, teachers, uri, parent, reuse_across_versions, tags, storage=store
    )
    try:
        results, search, seen = run_configurations(context, restore, concurrency, verbose, stages)
    except BaseException:
        runs.client.set_terminated(parent, "KILLED")
        raise
    answered = 0 if restore else getattr(search[0], "answered", 0)
    generated = teachers.generated
    summary = summarize(config, root, uri, results, start, generated, answered, seen.reasons)
    (root / "summary.json").write_text(summary.to_json())
    for name in (SWEEP_FILE, "summary.json"):
        store.publish(root / name)
    close_sweep_run(runs, parent, summary, root)
    return summary


def open_stores(
    config: SweepConfig, store: Storage, uri: str, resume: bool, restart: bool, stages: Stages
) -> tuple[Future, bool]:
    """The MLflow experiment (made if new; `sweep_experiment`) and the sweep's stored state
    (checked against the file, or started anew); whether Tune restores its experiment."""
    stages.configurations = expected_configurations(config)
    stages.begin(
        "opening the MLflow store",
        f"{stages.configurations} configurations of sweep {config.experiment} will be recorded at {shown(uri)}",
    )
    experiment = sweep_experiment(uri, config.experiment)
    restore = sync_sweep_state(store, config, resume, restart)
    stages.resumable = True
    return experiment, restore


def sweep_experiment(uri: str, name: str) -> Future:
    """The id of the sweep's MLflow experiment `name` (made if new). A server is reached here,
    before Ray starts, so one that does not answer is refused first; a local store, checked
    here (`check_store`), is opened (made, on first contact) on a thread beside Ray's start."""
    if local_store(uri) is None:
        done: Future = Future()
        done.set_result(experiment_id(connect(uri), name, create=True))
        return done
    check_store(uri)
    return on_daemon_thread(lambda: experiment_id(connect(uri), name, create=True))


def on_daemon_thread(work: Callable[[], Any]) -> Future:
    """`work()`'s result, computed on a daemon thread: a command that ends before it is done
    (Ctrl-C during Ray's start) exits without waiting for it. A pool's thread would be joined at
    exit, and an import that Ctrl-C caught half-done on the main thread can block it forever."""
    done: Future = Future()

    def run() -> None:
        try:
            done.set_result(work())
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=run, name="mlflow-store", daemon=True).start()
    return done


def join_ray(
    config: SweepConfig,
    root: Path,
    address: str | None,
    num_cpus: int | None,
    verbose: bool,
    stages: Stages,
) -> tuple[SweepConfig, int]:
    """Start or join Ray; the sweep with `use_gpu: auto` resolved there, and how many trials run
    at once (a trial that cannot be placed is refused here)."""
    if not verbose:
        log_ray_to_file(root)
    where = f"joining the Ray cluster at {address}" if address else "starting a local Ray"
    stages.begin(where, "" if address else f"its logs: {root / 'ray-logs'}")
    dashboard = not config.resources.fits_in_trial
    start_ray(address, root, num_cpus, verbose, dashboard)
    config = with_gpu_choice(config)
    evaluators = Reserved(*config.evaluator_actors()[:3])
    return config, check_fits(trial_bundle(config), evaluators, address is None)


def teacher_stage(config: SweepConfig, store: Storage, stages: Stages) -> SweepTeachers:
    """The sweep's teacher sets, generated once (or found in the storage)."""
    t = config.teacher
    seeds = t.train_samples + t.validation_samples + t.test_samples
    stages.begin(
        "preparing the teacher", f"{t.solver.label()} nfe={t.solver.nfe} on {seeds} seeds, cached"
    )
    return prepare_teachers(config, store.child("teacher"))


def run_configurations(
    context: SweepContext, restore: bool, concurrency: int, verbose: bool, stages: Stages
) -> tuple[Any, tuple[Searcher, int], SeenFailures]:
    """Tune's experiment over the configurations, beside the sweep's evaluator actors (started
    for it, stopped after it): its results, the searcher that proposed them, and the failures
    Tune reported."""
    config = context.config
    evaluators = Reserved(*config.evaluator_actors()[:3])
    if evaluators.count:
        stages.begin("starting the evaluators", evaluators.describe())
    setup = evaluator_setup(config, context.root)
    with running_evaluators(
        setup, evaluators.count, evaluators.cpus, evaluators.gpus, context.store
    ) as pool:
        context = replace(context, evaluators=pool)
        stages.begin("running the configurations", running_detail(config, concurrency))
        search = searcher_for(context, concurrency)
        seen = SeenFailures(config)
        tuner = make_tuner(context, restore, concurrency, verbose, search, seen)
        with stages.handed_over():  # Tune answers Ctrl-C while its experiment runs
            return tuner.fit(), search, seen


def running_detail(config: SweepConfig, concurrency: int) -> str:
    """`12, 2 at a time`, and what the searcher adds (`SearchAlgorithm.note`)."""
    detail = f"{expected_configurations(config)}, {concurrency} at a time"
    note = config.search.note(len(config.trials()))
    return f"{detail}; {note}" if note else detail


def open_sweep_run(
    runs: ConfigurationRuns, config: SweepConfig, root: Path, tags: dict[str, str]
) -> str:
    """The sweep's parent MLflow run: one per sweep file and storage folder, reopened by
    --resume and --restart, so every configuration run of the sweep sits under it."""
    key = digest({"sweep": config.as_dict(), "root": str(root)})
    params = {
        "backbone": config.backbone,
        "search.algorithm": config.algorithm,
        "search.metric": config.metric,
        "configurations": expected_configurations(config),
    }
    tags = {**tags, "spanlift.command": "sweep"}
    return runs.open(key, f"sweep {config.experiment}", params, tags, reopen_finished=True)


def close_sweep_run(
    runs: ConfigurationRuns, run_id: str, summary: SweepSummary, root: Path
) -> None:
    """Log the outcome (with the best value of the search metric as `best_<metric>`) and the
    files; FINISHED, FAILED (a configuration failed) or KILLED (interrupted, configurations
    remain)."""
    metrics = {
        "configurations_finished": summary.finished,
        "configurations_failed": len(summary.failed),
        "configurations_remaining": summary.remaining,
        "wall_seconds": summary.wall_seconds,
        "compute_seconds": summary.compute_seconds,
        "model_loads": summary.model_loads,
    }
    metrics |= {f"best_{k}": v for k, v in summary.best.items() if k != "configuration"}
    runs.finish(run_id, metrics, [root / SWEEP_FILE, root / "summary.json"])
    if summary.remaining or summary.failed:
        runs.client.set_terminated(run_id, "KILLED" if summary.remaining else "FAILED")
