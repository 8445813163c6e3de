"""A `spanlift fit` replicate as an MLflow run, recorded as a sweep's trial records its own.

The run carries the same params (the solver's, the teacher and the seeds of each role, the fit
settings with the fit seed, the pretrained networks its loss used, the replicate group, what chose
the kept state, where it ran), metrics (rmse and val_rmse, the error quantiles, nfe, the fit's time
and curves) and files (errors per test seed, `configuration.json`, the fitted checkpoint), so
`spanlift leaderboard` ranks it as it ranks a sweep's runs and `spanlift rerun` repeats it. A
replicate that this version of the code already recorded in the experiment is found, not recorded
twice: replicates of one fit seed would narrow its interval.
"""

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from spanlift.backbones import Backbone
from spanlift.platform.configuration import Configuration
from spanlift.platform.fitting.compare import Row, fit_configuration, set_digest
from spanlift.platform.fitting.fit import FitSettings
from spanlift.platform.fitting.losses import networks_param
from spanlift.platform.resolved import ResolvedConfiguration, write_resolved
from spanlift.platform.results.provenance import run_environment
from spanlift.platform.results.tracking import (
    command_tags,
    configuration_params,
    finished_run,
    record_once,
    seed_params,
)
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.sampling.validation_blocks import ValidationBlocks
from spanlift.platform.tracking.per_sample import write_errors
from spanlift.platform.tracking.runs import REPLICATE_PARAM, ConfigurationRuns, run_name

SELECTION = "val_rmse"
"""What chose the kept state of every fit: the RMSE on the validation seeds."""


@dataclass(frozen=True)
class FitRecording:
    """Where `spanlift fit` records its replicates, and what they share: the backbone as named
    on the command line, its teacher sets and their seeds by role."""

    runs: ConfigurationRuns
    backbone: Backbone
    name: str
    options: dict[str, Any]
    sets: dict[str, TeacherSet]
    seeds: dict[str, range]

    def configuration(self, row: Row, settings: FitSettings) -> Configuration:
        """What produced the replicate: its fit (backbone, training and validation sets, fit
        settings with the seed, solver) and the test set it was scored on."""
        sets = self.sets
        fitted = fit_configuration(
            row.spec, self.backbone, sets["train"], settings, sets["validation"]
        )
        return replace(fitted, teacher={**fitted.teacher, "test": set_digest(sets["test"])})

    def params(self, configuration: Configuration, settings: FitSettings) -> dict[str, Any]:
        """The params a sweep's replicate carries, the backbone by the name it was given."""
        return {
            **configuration_params(configuration),
            "backbone": self.name,
            REPLICATE_PARAM: configuration.replicate_key(),
            "loss": settings.loss,
            **networks_param(settings.loss, settings.loss_options),
            **seed_params(self.seeds),
            "selection.metric": SELECTION,
            **run_environment(torch.device("cpu"), deterministic=settings.deterministic),
        }

    def resolved(self, row: Row, settings: FitSettings) -> ResolvedConfiguration:
        """Everything `spanlift rerun` needs to fit and score the replicate again."""
        return ResolvedConfiguration(
            backbone=self.name,
            backbone_options=self.options,
            solver=row.fitted.spec.to_dict(),
            teacher=self.sets["train"].teacher.to_dict(),
            seeds={role: [seeds.start, seeds.stop] for role, seeds in self.seeds.items()},
            fit=settings.to_dict(),
            threads=torch.get_num_threads(),
            validation_blocks=isinstance(self.sets["validation"], ValidationBlocks),
        )


def record_fit(recording: FitRecording, row: Row, settings: FitSettings) -> tuple[str, bool]:
    """The replicate's run id, and whether it was recorded now (False: found, recorded before)."""
    configuration = recording.configuration(row, settings)
    earlier = finished_run(recording.runs, configuration)
    if earlier is not None:
        return earlier, False
    fitted, scored = row.fitted, row.scored
    with tempfile.TemporaryDirectory() as folder:
        files = [
            write_errors(Path(folder), scored.seeds.numpy(), scored.errors.numpy()),
            write_resolved(Path(folder), recording.resolved(row, settings)),
            *([fitted.path] if fitted.path else []),
        ]
        run_id = record_once(
            recording.runs,
            configuration,
            run_name(row.spec),
            {**recording.params(configuration, settings), **fitted.params()},
            command_tags("fit"),
            {**scored.metrics(), **fitted.metrics()},
            files,
            fitted.histories(),
        )
    return run_id, True
