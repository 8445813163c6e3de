"""A configuration's result in MLflow: its experiment, the params and tags of its run, recording.

Every run carries the solver's params (`solver_params`, which the leaderboard groups by), the fit
settings as `fit.<name>` and, where a training teacher set produced it, the teacher as
`<solver label> nfe=<N>`; it is tagged with the code version and the command that made it.
"""

from pathlib import Path
from typing import Any

from spanlift.platform.configuration import Configuration, code_version
from spanlift.platform.tracking.runs import (
    CODE_TAG,
    ConfigurationRuns,
    connect,
    experiment_id,
    solver_params,
    source_tags,
)
from spanlift.seeds import describe
from spanlift.solvers import SolverSpec


def open_experiment(uri: str, experiment: str) -> ConfigurationRuns:
    """The experiment's runs, the experiment created if new; a bad URI fails here, before work."""
    experiment_id(connect(uri), experiment, create=True)
    return ConfigurationRuns(uri, experiment)


def configuration_params(configuration: Configuration) -> dict[str, Any]:
    """The params every run of `configuration` carries: solver, teacher (when trained on one),
    fit settings."""
    teacher = configuration.teacher
    trained = "train" in teacher
    label = SolverSpec.from_dict(teacher["solver"]) if trained else None
    return {
        **solver_params(configuration.backbone, configuration.solver),
        **({"teacher": f"{label.label()} nfe={label.nfe}"} if label else {}),
        **{f"fit.{k}": v for k, v in configuration.fit.items()},
    }


def seed_params(seeds: dict[str, range]) -> dict[str, Any]:
    """The seeds of each role a replicate used (training, validation, test), as its run records
    them: the leaderboard ranks only runs scored on the same test seeds."""
    train, test = seeds["train"], seeds["test"]
    return {
        "teacher.train_samples": len(train),
        "teacher.train_seeds": describe(train),
        "teacher.validation_seeds": describe(seeds["validation"]),
        "teacher.test_seeds": f"{test.start}..{test.stop - 1}",
        "teacher.test_samples": len(test),
    }


def command_tags(command: str) -> dict[str, str]:
    """Tags of a run made by `spanlift <command>`: the command, the code version, MLflow's
    source tags."""
    return {
        "spanlift.command": command,
        CODE_TAG: code_version(),
        **source_tags(f"spanlift {command}"),
    }


def finished_run(runs: ConfigurationRuns, configuration: Configuration) -> str | None:
    """The id of the configuration's finished run made by this version of the code, if any."""
    earlier = runs.find(configuration.key(), code_version())
    return earlier.run_id if earlier is not None and earlier.status == "FINISHED" else None


def record_once(
    runs: ConfigurationRuns,
    configuration: Configuration,
    name: str,
    params: dict[str, Any],
    tags: dict[str, str],
    metrics: dict[str, float],
    files: list[Path],
    histories: dict[str, Any] | None = None,
) -> str:
    """The configuration's one run, as a sweep's replicate has: a run of the same code version
    (`tags`, from `command_tags`) that an interruption left unfinished is reopened
    (`ConfigurationRuns.open`), else a new one is made; then finished with `metrics`, `files` and
    metric `histories` (a fit's curves). Returns its id."""
    run_id = runs.open(configuration.key(), name, params, tags)
    runs.finish(run_id, metrics, files, histories=histories)
    return run_id


def record_result(
    runs: ConfigurationRuns,
    configuration: Configuration,
    name: str,
    params: dict[str, Any],
    tags: dict[str, str],
    metrics: dict[str, float],
    files: list[Path],
    measured: dict[str, Any] | None = None,
) -> str:
    """A new finished run of `configuration` (repeated evaluations sit side by side): `params`
    known before, `measured` params known after the evaluation; returns its id."""
    run_id = runs.create(configuration.key(), name, params, tags)
    runs.finish(run_id, metrics, files, measured)
    return run_id
