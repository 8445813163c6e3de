"""`spanlift sweep`: a sweep YAML run as a Ray Tune experiment driven by Optuna.

    validate YAML → reach MLflow → start/join Ray → check a trial fits → teacher (once, parallel)
    → Tuner(OptunaSearch: grid over configurations, or TPE) → one MLflow run per configuration

Everything lands under `<storage>/<experiment>/`: `teacher/` (the cache), `fitted/` (solver
checkpoints), `train/` (Ray Train runs, resumable), `tune/` (the Tune experiment, restorable with
`--resume`) and `summary.json` (wall time, compute time, teacher generations, trial outcomes).
"""

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from spanlift.errors import SettingsError
from spanlift.platform.ray_runtime import TrialBundle, check_fits, start_ray
from spanlift.platform.sweep.config import SweepConfig, load_sweep
from spanlift.platform.sweep.progress import console_settings, quiet_console, restore_console
from spanlift.platform.sweep.teacher import prepare_teachers
from spanlift.platform.sweep.trial import SweepContext, run_trial, trial_spec
from spanlift.platform.tracking.runs import absolute_uri, connect, experiment_id

TUNE_NAME = "tune"


@dataclass
class SweepSummary:
    experiment: str
    root: str
    tracking_uri: str
    trials: int
    finished: int
    failed: list[str]
    reused: int
    wall_seconds: float
    compute_seconds: float
    teacher_generations: int

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2)


class FinalMetricOptunaSearch(OptunaSearch):
    """OptunaSearch that skips results without the metric: a fit's loss curve comes first."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if self.metric in result:
            super().on_trial_result(trial_id, result)


def grid_search(config: SweepConfig) -> tuple[OptunaSearch, int]:
    """Optuna's GridSampler over the index of every configuration: each runs exactly once."""
    indices = list(range(len(config.trials())))
    space = {"trial": optuna.distributions.CategoricalDistribution(indices)}
    sampler = optuna.samplers.GridSampler({"trial": indices}, seed=0)
    searcher = FinalMetricOptunaSearch(
        space, metric=config.metric, mode=config.mode, sampler=sampler
    )
    return searcher, len(indices)


@dataclass(frozen=True)
class SolverSpace:
    """Optuna's define-by-run space of a sweep: a solver entry, then its NFE and search keys.

    A class, not a closure, so Tune can save it with the searcher and restore it on --resume."""

    config: SweepConfig

    def __call__(self, trial: optuna.Trial) -> None:
        index = trial.suggest_categorical("entry", list(range(len(self.config.solvers))))
        entry = self.config.solvers[index]
        trial.suggest_categorical(f"{index}.nfe", list(entry.nfe))
        for key, values in entry.search.items():
            trial.suggest_categorical(f"{index}.{key}", list(values))


def tpe_search(config: SweepConfig) -> tuple[OptunaSearch, int]:
    """Optuna TPE over the sweep's define-by-run space, `num_samples` trials."""
    sampler = optuna.samplers.TPESampler(seed=config.fit.seed)
    space = SolverSpace(config)
    searcher = FinalMetricOptunaSearch(
        space, metric=config.metric, mode=config.mode, sampler=sampler
    )
    return searcher, config.num_samples


SEARCHERS = {"grid": grid_search, "tpe": tpe_search}


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


def make_tuner(
    context: SweepContext, resume: bool, concurrency: int, verbose: bool = False
) -> tune.Tuner:
    config = context.config
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, context=context), {"cpu": config.resources.trial_cpu}
    )
    path = context.root / TUNE_NAME
    searcher, samples = SEARCHERS[config.algorithm](config)
    console = console_settings(verbose, config, samples, concurrency)
    if resume:
        tuner = tune.Tuner.restore(str(path), trainable, resume_errored=True)
        restore_console(tuner, console)
        return tuner
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=samples,
            max_concurrent_trials=concurrency,
            trial_name_creator=TrialName(config),
            trial_dirname_creator=TrialName(config, folder=True),
        ),
        run_config=tune.RunConfig(
            name=TUNE_NAME,
            storage_path=str(context.root),
            failure_config=tune.FailureConfig(max_failures=config.resources.max_failures),
            **console,
        ),
    )


def sweep_root(config: SweepConfig, storage: str | None) -> Path:
    return Path(storage or config.storage).resolve() / config.experiment


def check_restart(root: Path, resume: bool, restart: bool) -> None:
    """An earlier Tune state is continued (--resume), replaced (--restart) or protected."""
    state = root / TUNE_NAME
    if resume and not tune.Tuner.can_restore(str(state)):
        raise SettingsError(f"--resume: there is no interrupted sweep to continue at {state}")
    if state.exists() and not resume:
        if not restart:
            raise SettingsError(
                f"this sweep already ran at {state}: pass --resume to continue it, or --restart "
                "to run it again (finished configurations are taken from MLflow, not refitted)"
            )
        shutil.rmtree(state)


def with_gpu_choice(config: SweepConfig) -> SweepConfig:
    """Resolve `use_gpu: auto`: GPU workers when the cluster has a GPU for each of them."""
    if config.resources.use_gpu != "auto":
        return config
    gpus = ray.cluster_resources().get("GPU", 0)
    use_gpu = gpus >= config.resources.workers
    return replace(config, resources=replace(config.resources, use_gpu=use_gpu))


def run_sweep(
    path: str | Path,
    address: str | None = None,
    resume: bool = False,
    restart: bool = False,
    tracking_uri: str | None = None,
    storage: str | None = None,
    num_cpus: int | None = None,
    verbose: bool = False,
) -> SweepSummary:
    """Run (or continue) the sweep in `path`; returns its summary, also written to summary.json.

    The console shows one progress view; `verbose`: Ray's and Tune's own output instead."""
    start = time.perf_counter()
    if not verbose:
        quiet_console()
    # A trial reports its fit's loss curve before its metric exists; only the last result counts.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    config = load_sweep(path)
    uri = absolute_uri(tracking_uri or config.tracking_uri)
    experiment_id(connect(uri), config.experiment, create=True)
    root = sweep_root(config, storage)
    check_restart(root, resume, restart)
    start_ray(address, root, num_cpus, verbose=verbose)
    config = with_gpu_choice(config)
    r = config.resources
    concurrency = check_fits(
        TrialBundle(r.trial_cpu, r.workers, r.worker_cpu, r.use_gpu), local=address is None
    )
    teachers = prepare_teachers(config, root / "teacher")
    context = SweepContext(config, root, teachers, uri)
    results = make_tuner(context, resume, concurrency, verbose).fit()
    summary = summarize(config, root, uri, results, start, teachers.generated)
    (root / "summary.json").write_text(summary.to_json())
    return summary


def summarize(
    config: SweepConfig, root: Path, uri: str, results: Any, start: float, generations: int
) -> SweepSummary:
    finished = [r for r in results if r.error is None]
    failed = [f"{r.path}: {str(r.error).strip().splitlines()[-1]}" for r in results if r.error]
    compute = sum(
        r.metrics.get("fit_seconds", 0.0) + r.metrics.get("eval_seconds", 0.0)
        for r in finished
        if not r.metrics.get("reused")
    )
    return SweepSummary(
        experiment=config.experiment,
        root=str(root),
        tracking_uri=uri,
        trials=len(results),
        finished=len(finished),
        failed=failed,
        reused=sum(1 for r in finished if r.metrics.get("reused")),
        wall_seconds=time.perf_counter() - start,
        compute_seconds=compute,
        teacher_generations=generations,
    )
