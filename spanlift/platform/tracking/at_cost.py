"""The leaderboard at equal fit cost (`spanlift leaderboard --at-cost T`): would the ranking flip
with a longer fit, or a shorter one?

A fit keeps the states it kept on its way in its checkpoint (`fitting/fit.py`, `MAX_KEPT`), each
with the fit seconds at which it was kept. For every learned run of a ranked row (each replicate
of the configuration chosen at convergence), the state of T seconds is the last kept state whose
time is at or before T on the whole fit's clock (`fit_clock.py`: a two-stage SpanLift's base fit
counted first, whether its run fitted the base or took it from the fit cache), else its starting
state. A two-stage run whose base fit had not ended by T had no state of its own yet (its
starting state is the fitted base it was still waiting for): its row is not ranked at T, and one
line names its base's seconds, from which on it is ranked. A run's state of T is loaded into
the run's solver as `--samples` loads it (the checkpoint's spec; the backbone, the teacher and the
test seeds of its `configuration.json`), rolled out from the test seeds' noise and scored against
the teacher's endpoints there:

    e_s = sqrt(mean over pixels (Φ_S(x_s) − Φ*(x_s))²),      RMSE = sqrt(mean_s e_s²)

Only RMSE is recomputed (FID and the other sample metrics need their detectors and sample
budgets: refused in one line). Analytic rows keep their recorded values (they cost 0 s). Rows
are ranked again within each group on these values and compared with the row below on the same
seeds (`comparison.py`); each carries, beside its own, its rank and value at convergence
(`rank_converged`, `rmse_converged`) and T (`at_fit_seconds`). A row's fit cost is T-capped: the
iterations its fit had run by T (interpolated between its timed validations; all of them past its
end) and min(T, its whole fit's seconds, a base's included). A row with a run that stored no
kept states (recorded before fits kept them) or no configuration cannot be scored: it is left
out, and one line names its runs.
"""

import math
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from mlflow.tracking import MlflowClient

from spanlift.backbones import Backbone, load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.resolved import RESOLVED_FILE
from spanlift.platform.sampling.score import sample_errors
from spanlift.platform.sampling.teacher import TeacherSet, generate_teacher
from spanlift.platform.statistics import replicate_interval
from spanlift.platform.tracking.comparison import ErrorCache, compare_neighbours
from spanlift.platform.tracking.entry import Entry
from spanlift.platform.tracking.fit_clock import FitClock
from spanlift.platform.tracking.fit_cost import FitCost
from spanlift.platform.tracking.run_files import checkpoint_of, resolved_of
from spanlift.solvers import SolverSpec, read_checkpoint
from spanlift.solvers.loading import load_solver

RECOMPUTED = ("rmse",)
"""The metrics `--at-cost` can score a state on again."""


def check_at_cost(seconds: float, metric: str) -> None:
    """A one-line refusal of what `--at-cost` cannot rank."""
    if not math.isfinite(seconds) or seconds < 0:
        raise SettingsError(f"--at-cost takes fit seconds ≥ 0, got {seconds!r}")
    if metric not in RECOMPUTED:
        raise SettingsError(
            f"--at-cost cannot recompute {metric} from a fit's kept states; it ranks by rmse "
            "(against the teacher on the test seeds): use --metric rmse"
        )


@dataclass(frozen=True)
class StateAt:
    """A run's kept state at T seconds, and what its fit had cost by then."""

    iteration: int  # the iteration the state was kept at (0: the starting state)
    state: dict[str, torch.Tensor]
    iterations_run: float  # iterations the fit had run by T
    seconds: float  # min(T, the fit's seconds)


@dataclass(frozen=True)
class BaseFitting:
    """A two-stage run at T: its base fit, which took `base_seconds`, had not ended by then."""

    run_id: str
    base_seconds: float


def state_at(metadata: dict[str, Any], seconds: float) -> StateAt | None:
    """The last state the fit kept at or before `seconds` on the whole fit's clock (its base's
    seconds first), else its starting state; None for a checkpoint that kept no states. The
    caller checks that the fit's own stage had started by then (`FitClock.started_by`)."""
    kept = metadata.get("kept_states")
    if not kept:
        return None
    clock = FitClock.of(metadata)
    reached = [k for k in kept if clock.since_start(k["seconds"]) <= seconds] or kept[:1]
    ran = float(metadata.get("iterations_run") or len(metadata.get("losses", [])))
    timed = {0: 0.0, **metadata.get("validation_seconds", {}), int(ran): clock.own}
    steps = sorted(timed)
    by_then = np.interp(seconds - clock.base, [timed[i] for i in steps], steps, left=0.0)
    return StateAt(
        reached[-1]["iteration"], reached[-1]["state"], float(by_then), min(seconds, clock.total)
    )


@dataclass
class Scorer:
    """Backbones and teacher endpoints, each made once however many runs share them."""

    backbones: dict[str, Backbone] = field(default_factory=dict)
    teachers: dict[str, TeacherSet] = field(default_factory=dict)

    def backbone(self, name: str, options: dict[str, Any]) -> Backbone:
        key = repr((name, sorted(options.items())))
        if key not in self.backbones:
            self.backbones[key] = load_backbone(name, **options)
        return self.backbones[key]

    def teacher(self, backbone: Backbone, spec: SolverSpec, seeds: range) -> TeacherSet:
        key = repr((backbone.identity(), spec.to_dict(), seeds.start, seeds.stop))
        if key not in self.teachers:
            self.teachers[key] = generate_teacher(backbone, seeds, spec, progress=False)
        return self.teachers[key]


@dataclass(frozen=True)
class RunAt:
    """A learned run scored at its state of T seconds: its errors by test seed."""

    errors: pd.Series
    at: StateAt

    @property
    def rmse(self) -> float:
        return float(np.sqrt(np.mean(np.square(self.errors.to_numpy()))))


def run_at(
    client: MlflowClient, run_id: str, seconds: float, scorer: Scorer
) -> RunAt | BaseFitting | None:
    """The run's state of `seconds` scored on its test seeds (module docstring); BaseFitting
    when its base fit had not ended by then; None when the run stored no configuration, no
    checkpoint or no kept states."""
    if RESOLVED_FILE not in {a.path for a in client.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = checkpoint_of(client, run_id, Path(folder))
        if checkpoint is None:
            return None
        metadata = read_checkpoint(checkpoint)["metadata"]
        clock = FitClock.of(metadata)
        if not clock.started_by(seconds):
            return BaseFitting(run_id, clock.base)
        at = state_at(metadata, seconds)
        if at is None:
            return None
        resolved = resolved_of(client, run_id, Path(folder))
        backbone = scorer.backbone(resolved.backbone, resolved.backbone_options)
        spec = SolverSpec.from_dict(resolved.solver)
        solver = load_solver(spec, checkpoint, backbone)
    solver.load_state_dict(at.state)
    teacher = scorer.teacher(
        backbone, SolverSpec.from_dict(resolved.teacher), resolved.seed_range("test")
    )
    errors = sample_errors(solver, backbone, teacher).numpy()
    return RunAt(pd.Series(errors, index=teacher.seeds.numpy(), name=run_id), at)


def capped_cost(fit: FitCost | None, runs: list[RunAt]) -> FitCost:
    """The row's fit cost by T: its replicates' mean iterations run and seconds by then."""
    devices, device = (fit.devices, fit.device) if fit else (1.0, "CPU")
    seconds = float(np.mean([r.at.seconds for r in runs]))
    return FitCost(
        float(np.mean([r.at.iterations_run for r in runs])),
        seconds,
        seconds * devices / 3600,
        devices,
        device,
        False,
    )


def at_cost(
    client: MlflowClient, entries: list[Entry], seconds: float, metric: str, mode: str
) -> tuple[list[Entry], list[str]]:
    """The entries ranked at `seconds` of fit (module docstring), and one line per row left out."""
    check_at_cost(seconds, metric)
    scorer, errors, rows, left_out = Scorer(), ErrorCache(client), [], []
    for e in entries:
        converged = {"rank_converged": float(e.rank), f"{metric}_converged": e.value}
        columns = {**e.columns, **converged, "at_fit_seconds": seconds}
        if e.fit is None:  # an analytic row: nothing to fit, its value stands
            rows.append(replace(e, columns=columns))
            continue
        scored = [run_at(client, run_id, seconds, scorer) for run_id in e.run_ids]
        unranked = why_not_ranked(e, seconds, scored)
        if unranked:
            left_out.append(unranked)
            continue
        for run in scored:
            errors.read[str(run.errors.name)] = run.errors
        values = [run.rmse for run in scored]
        interval = replicate_interval(values)
        rows.append(
            replace(
                e,
                value=interval.mean,
                n=interval.n,
                sd=interval.sd,
                half_width=interval.half_width,
                values=tuple(values),
                columns=columns,
                fit=capped_cost(e.fit, scored),
                vs_next="",
                ratio=None,
            )
        )
    return compare_neighbours(reranked(rows, mode), client, metric, mode, errors), left_out


def why_not_ranked(
    e: Entry, seconds: float, scored: list[RunAt | BaseFitting | None]
) -> str | None:
    """The line naming a row that cannot be ranked at `seconds` and why; None when it can."""
    row = f"not ranked at {seconds:g} s: {e.solver} (NFE {e.nfe})"
    missing = [r for r, s in zip(e.run_ids, scored, strict=True) if s is None]
    if missing:
        return (
            f"{row}, run {', '.join(missing)} stored no kept states (recorded before fits kept "
            "them, or without its configuration or checkpoint); fit it again to rank it here"
        )
    waiting = [s for s in scored if isinstance(s, BaseFitting)]
    if waiting:
        took = ", ".join(f"{w.base_seconds:.3g} s (run {w.run_id})" for w in waiting)
        return (
            f"{row}: its base's fit took {took}; until that fit ended it had no state of its "
            "own, so it is ranked only from then on"
        )
    return None


def reranked(rows: list[Entry], mode: str) -> list[Entry]:
    """The rows ranked again by value within each (backbone, scale, NFE), groups kept in order."""
    ordered = []
    groups: dict[tuple[str, str, int], list[Entry]] = {}
    for e in rows:
        groups.setdefault((e.backbone, e.scale, e.nfe), []).append(e)
    for part in groups.values():
        part = sorted(part, key=lambda e: e.value, reverse=mode == "max")
        ordered += [replace(e, rank=i, vs_next="", ratio=None) for i, e in enumerate(part, 1)]
    return ordered
