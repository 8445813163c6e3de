"""Faults injected into real sweeps: what each one loses, what is redone, and whether MLflow ends
up with duplicate runs.

    python benchmarks/fault_tolerance.py [--only 1 3] [--keep]

Every scenario runs in a fresh temporary folder with its own MLflow store and its own local Ray
on 2 CPUs; the sweeps run the GMM backbone through the command line (`spanlift sweep`), as a user
runs them. One row per fault:

1. fit process SIGKILL: the trial process of a DyWeight fit (a one-worker fit runs in its
   trial's process) is killed once its saved state is two checkpoints in. Lost: the iterations
   done since its newest saved state; the iteration at the kill is estimated from that state and
   the rate the fit ran at (`≈`). Redone: the iterations between the state the fit resumed from
   (`fit_resumed_from`) and the kill. The sweep must recover by itself (Tune retries the trial):
   exit 0, the run FINISHED, no second run.
2. driver SIGKILL: the `spanlift sweep` process is killed once a configuration has finished and
   a fit is under way, then `spanlift sweep FILE --resume` runs. The sweep runs in its own
   session; Ray processes still alive 10 s after the kill are SIGKILLed, as a crashed machine
   would lose them (the notes say how many there were). Lost: the configurations running at the
   kill. Redone: configurations that had FINISHED before the kill and were run again after the
   resume (their MLflow run ids and end times compared; must be 0), the iterations the
   interrupted fit did twice, and the exit code of the resume.
3. Ctrl-C: SIGINT to the sweep's process group, as a terminal sends it; the sweep must exit 130
   and print how many configurations remain; then --resume, checked as in 2.
4. evaluator SIGKILL: one of two evaluator actors is killed mid-FID (local Ray, digits backbone,
   euler NFE 3, 96 samples in 8 shards). Lost: the seconds the evaluation took beyond an
   undisturbed one. Redone: the shards the actor had, on its restarted process; the FID must
   equal the undisturbed one and count every sample once.
5. NaN fit: a 2-configuration sweep whose DyWeight fit diverges (lr 1e30, no warm-up). The
   diverging configuration must be FAILED in MLflow with its reason in the `spanlift.failure`
   tag, the other FINISHED, and the sweep must exit 1. Redone: fits of the diverged
   configuration beyond the first (Tune retries the failed trial once: the retry must take the
   failure from MLflow instead of fitting again).
6. node lost: a two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`, 2 CPUs per
   node), the sweep stored in an S3 bucket (moto's server on 127.0.0.1), `spanlift sweep
   --address <head>`; the worker node is killed once a DyWeight fit runs on it and every running
   fit has published a saved state to the bucket (`tests/two_node_sweep.py`). Lost: the
   configurations running on that node. Redone: configurations FINISHED before the kill and
   finished again after it (must be 0); the lost ones must FINISH on the head in their own run,
   resuming from their published state, the sweep exit 0.

Duplicate MLflow runs: runs beyond the first per `spanlift.key` tag in the experiment; the
sweep's parent run (tagged `spanlift.command=sweep`) is not a configuration and is left out.
Expectations that fail are listed under the table, and the script then exits 1.
"""

import argparse
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import torch
import yaml
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from spanlift.backbones import load_backbone
from spanlift.platform.evaluation import pool
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.pool import EvaluatorPool, running_evaluators
from spanlift.platform.ray_runtime import start_ray
from spanlift.platform.tracking.runs import FAILURE_TAG, KEY_TAG
from spanlift.solvers import SolverSpec

ROOT = Path(__file__).resolve().parent.parent
GMM_SMOKE = ROOT / "sweeps" / "gmm_smoke.yaml"
PRIVATE_ENV = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")
"""Unset for every scenario: each starts its own local Ray and writes its own MLflow store."""
POLL_S = 0.5
GRACE_S = 10.0
"""How long Ray processes may outlive their sweep before they count as lingering."""
TIMEOUT_S = 300.0

CHECKPOINT_EVERY = 100
RESUMABLE = [{"name": "euler", "nfe": 3}, {"name": "dyweight", "nfe": 3}]
"""An analytic configuration that finishes while the other one fits: a sweep to stop mid-fit."""
RESUMABLE_FIT = {
    "iterations": 4000,
    "batch_size": 64,
    "checkpoint_every": CHECKPOINT_EVERY,
    "log_every": CHECKPOINT_EVERY,
}


@dataclass
class Row:
    fault: str = ""
    lost: str = ""
    redone: str = ""
    duplicates: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def expect(self, condition: bool, problem: str) -> None:
        if not condition:
            self.problems.append(problem)


# Processes: a sweep runs in its own session, so it and the local Ray it starts can be found
# (and, when they outlive it, killed) without touching anyone else's processes.


def session_of(pid: int) -> int | None:
    """The session id of a live process; None once it is gone (or a zombie)."""
    try:
        state, _, _, session = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:4]
    except (OSError, ValueError):
        return None
    return None if state == "Z" else int(session)


def session_pids(session: int) -> list[int]:
    """Live processes of the session whose leader is `session`."""
    pids = (int(proc.name) for proc in Path("/proc").iterdir() if proc.name.isdigit())
    return [pid for pid in pids if session_of(pid) == session]


def wait_gone(pids: list[int], timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while any(session_of(p) is not None for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def process_name(pid: int) -> str:
    """`ray::ImplicitFunc.train` or `raylet`: the program a process runs, as `ps` shows it."""
    return Path(command_line(pid).split(b"\0")[0].decode(errors="replace")).name[:40]


def kill_all(pids: list[int], sig: signal.Signals = signal.SIGKILL) -> int:
    """Signal each of `pids`; how many were still there to receive it."""
    count = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            count += 1
        except ProcessLookupError:
            pass
    return count


@dataclass
class Launch:
    """One `spanlift sweep` command running in its own session, its output in a log file."""

    process: subprocess.Popen
    log: Path
    lingered: list[str] = field(default_factory=list)
    """Processes of its session alive GRACE_S after the command exited, then SIGKILLed."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def fit_processes(self) -> list[int]:
        """The processes fitting: Tune's trial processes (a one-worker fit runs in its trial)."""
        return [p for p in session_pids(self.pid) if b"ImplicitFunc" in command_line(p)]

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        """The command's exit code, once it and the Ray it started are gone."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_all(session_pids(self.pid))
            raise
        self.lingered = self.end_session()
        return code

    def end_session(self) -> list[str]:
        """Give the processes of its session GRACE_S to end, then SIGKILL those left; their
        names."""
        deadline = time.monotonic() + GRACE_S
        while session_pids(self.pid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        left = session_pids(self.pid)
        names = [process_name(pid) for pid in left]
        kill_all(left)
        return names

    def wait_for(self, condition: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                tail = self.output()[-3000:]
                raise RuntimeError(f"the sweep ended (exit {self.process.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                kill_all(session_pids(self.pid))
                raise TimeoutError(f"no fault point within {timeout:.0f} s; see {self.log}")
            time.sleep(POLL_S)


# Fit progress, read from the states fits save under `<storage>/<exp>/train/<fit>.state.pt`.


@dataclass(frozen=True)
class FitProgress:
    """How far one fit had got when a fault struck."""

    checkpoint: int
    """Iteration of its newest saved state."""
    reached: int | None
    """Iteration it had reached, estimated at the rate it ran at up to that state; None when
    that says it should have saved its next state (it was stalled): all that is known then is
    that it was short of that next state."""

    def at(self) -> str:
        return f"≈{self.reached}" if self.reached is not None else self.between(0)

    def since(self, iteration: int) -> str:
        """Iterations from `iteration` to where the fit had got."""
        if self.reached is not None:
            return f"≈{self.reached - iteration}"
        return self.between(iteration)

    def between(self, iteration: int) -> str:
        low = self.checkpoint - iteration
        return f"{low}–{low + CHECKPOINT_EVERY - 1}"


def progress_of(state: Path, now: float) -> FitProgress | None:
    """Its newest saved state, and the iteration reached at `now` had it gone on at its rate
    (short of the next state, which is not on disk)."""
    try:
        written = state.stat().st_mtime
        saved = torch.load(state, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):
        return None  # being written, or removed as the fit ended
    iteration, seconds = int(saved["iteration"]), float(saved["seconds"])
    if seconds <= 0:
        return FitProgress(iteration, None)
    ahead = round(iteration / seconds * (now - written))
    return FitProgress(iteration, iteration + ahead if ahead < CHECKPOINT_EVERY else None)


def fit_label(solver: str, nfe: object) -> str:
    """How fits are matched with runs: a fit's state is `<solver>-nfe<N>-...state.pt`."""
    return f"{solver}-nfe{nfe}"


def saved_states(train: Path) -> list[Path]:
    return list(train.glob("*.state.pt"))


def fit_progress(train: Path) -> dict[str, FitProgress]:
    """Progress of every fit with a saved state under a sweep's `train/` folder, by label."""
    now, progress = time.time(), {}
    for state in saved_states(train):
        found = progress_of(state, now)
        if found is not None:
            solver, nfe = state.name.split("-")[:2]
            progress[fit_label(solver, nfe.removeprefix("nfe"))] = found
    return progress


# Sweeps.


def label_of(run: Run) -> str:
    return fit_label(run.data.params.get("solver"), run.data.params.get("nfe"))


def duplicates(runs: list[Run]) -> int:
    """Runs beyond the first per configuration key."""
    keys = Counter(r.data.tags[KEY_TAG] for r in runs if KEY_TAG in r.data.tags)
    return sum(count - 1 for count in keys.values())


@dataclass
class Hit:
    """A sweep struck by a fault: what ran at that moment, and how the command ended."""

    code: int
    launch: Launch
    running: list[Run]
    """Configurations RUNNING in MLflow just before the fault."""
    progress: dict[str, FitProgress]
    """Each fit when the processes fitting at the moment of the fault were gone."""
    finished: dict[str, int]
    """Run id → end time of each configuration FINISHED once the command had ended."""
    note: str
    """What the fault did."""


Fault = Callable[[Launch], str]
"""Strikes a running sweep; says what it did."""


class Sweep:
    """A GMM sweep file in its own folder, run through the command line as a user runs it."""

    def __init__(self, folder: Path, name: str, **changes: Any) -> None:
        data = yaml.safe_load(GMM_SMOKE.read_text())
        data.update(experiment=name, resources={"workers": 1, "max_failures": 1}, **changes)
        self.folder, self.name = folder, name
        self.path = folder / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(data, sort_keys=False))
        self.root = folder / "runs" / "sweeps" / name
        self.launches: list[Launch] = []

    def start(self, *flags: str) -> Launch:
        earlier = self.root / "ray-logs"  # each command links its Ray temp folder from here
        if earlier.is_symlink():
            earlier.rename(self.root / f"ray-logs-{len(self.launches)}")
        log = self.folder / f"{self.name}-{len(self.launches) + 1}.log"
        env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
        command = [sys.executable, "-m", "spanlift.cli", "sweep", str(self.path)]
        with log.open("w") as out:
            process = subprocess.Popen(
                [*command, "--num-cpus", "2", *flags],
                cwd=self.folder,
                env={**env, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.launches.append(Launch(process, log))
        return self.launches[-1]

    def run(self, *flags: str) -> tuple[int, Launch]:
        launch = self.start(*flags)
        return launch.wait(), launch

    def runs(self) -> list[Run]:
        """The configurations' MLflow runs, the sweep's parent run aside. None until the sweep
        has stored its file, which it does after creating its experiment."""
        if not (self.root / "sweep.yaml").exists():
            return []
        client = MlflowClient(f"sqlite:///{self.folder / 'mlflow.db'}")
        experiment = client.get_experiment_by_name(self.name)
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        return [r for r in runs if r.data.tags.get("spanlift.command") != "sweep"]

    def notes(self, hit: Hit | None = None) -> list[str]:
        """What the fault did, and the Ray processes that outlived a command that exited."""
        return ([hit.note] if hit else []) + [
            f"{launch.log.name}: {len(launch.lingered)} processes outlived the command by "
            f"{GRACE_S:.0f} s and were SIGKILLed: {', '.join(launch.lingered)}"
            for launch in self.launches
            if launch.lingered
        ]

    def checkpoints(self) -> int:
        """Saved states the newest fit's state stands for (0: none saved)."""
        found = fit_progress(self.root / "train")
        return max((p.checkpoint // CHECKPOINT_EVERY for p in found.values()), default=0)

    def finished(self) -> dict[str, int]:
        return {r.info.run_id: r.info.end_time for r in self.runs() if r.info.status == "FINISHED"}

    def inject(self, ready: Callable[[Launch], bool], fault: Fault) -> Hit:
        """Start the sweep, wait until `ready`, strike it with `fault`, wait for it to end."""
        launch = self.start()
        launch.wait_for(lambda: ready(launch))
        running = [r for r in self.runs() if r.info.status == "RUNNING"]
        fitting = launch.fit_processes()
        note = fault(launch)
        wait_gone(fitting)  # a fit goes on until its process is gone, saved states included
        progress = fit_progress(self.root / "train")
        code = launch.wait()
        return Hit(code, launch, running, progress, self.finished(), note)


# Faults.


def kill_fit_processes(launch: Launch) -> str:
    killed = kill_all(launch.fit_processes())
    return f"SIGKILLed {killed} trial process(es) fitting; Tune retries the trial"


def kill_driver(launch: Launch) -> str:
    os.kill(launch.pid, signal.SIGKILL)
    launch.process.wait()
    left = launch.end_session()
    return (
        f"SIGKILLed the sweep process; {len(left)} of its Ray processes were still alive "
        f"{GRACE_S:.0f} s later ({', '.join(left) or 'none'})"
        + (" and were SIGKILLed, as a crashed machine loses them" if left else "")
    )


def ctrl_c(launch: Launch) -> str:
    os.killpg(launch.pid, signal.SIGINT)
    return "SIGINT to the sweep's whole process group, as a terminal sends it on Ctrl-C"


# Scenarios: each takes its folder and returns its row; its docstring names the fault.


def worker_sigkill(folder: Path) -> Row:
    """1. fit process SIGKILL mid-fit"""
    solvers = [{"name": "dyweight", "nfe": 3}]
    sweep = Sweep(folder, "worker-kill", solvers=solvers, fit=RESUMABLE_FIT)
    hit = sweep.inject(
        lambda launch: sweep.checkpoints() >= 2 and bool(launch.fit_processes()),
        kill_fit_processes,
    )
    runs, row = sweep.runs(), Row(notes=sweep.notes(hit))
    (run,) = runs
    at = hit.progress[label_of(run)]
    resumed = int(run.data.metrics.get("fit_resumed_from", -1))
    row.lost = (
        f"{at.since(at.checkpoint)} iterations: killed at {at.at()}, newest saved state "
        f"{at.checkpoint} (one every {CHECKPOINT_EVERY})"
    )
    row.redone = f"{at.since(resumed)} iterations: resumed from {resumed}"
    row.duplicates = str(duplicates(runs))
    row.expect(hit.code == 0, f"the sweep exited {hit.code}, not 0")
    row.expect(run.info.status == "FINISHED", f"the run is {run.info.status}, not FINISHED")
    row.expect(resumed >= CHECKPOINT_EVERY, f"the fit resumed from {resumed}, not a saved state")
    row.expect(len(runs) == 1, f"{len(runs)} runs for one configuration")
    return row


def fitting_after_a_finish(sweep: Sweep, launch: Launch) -> bool:
    """A configuration has finished and a fit is under way, past its first saved state."""
    return sweep.checkpoints() >= 1 and bool(launch.fit_processes()) and bool(sweep.finished())


def lost_configurations(hit: Hit) -> str:
    lost = []
    for run in hit.running:
        at = hit.progress.get(label_of(run))
        fit = f"fit at {at.at()}, newest saved state {at.checkpoint}" if at else "no saved state"
        lost.append(f"{run.info.run_name} ({fit})")
    return ", ".join(lost) or "no configuration was running"


def redone_after_resume(hit: Hit, runs: list[Run]) -> tuple[list[str], str]:
    """Finished configurations run again (run ids), and what each interrupted fit did twice."""
    after = {r.info.run_id: r.info.end_time for r in runs}
    again = [run for run, end in hit.finished.items() if after.get(run) != end]
    by_key = {r.data.tags.get(KEY_TAG): r for r in runs if r.info.status == "FINISHED"}
    fits = []
    for run in hit.running:
        at, now = hit.progress.get(label_of(run)), by_key.get(run.data.tags.get(KEY_TAG))
        if at and now:
            resumed = int(now.data.metrics.get("fit_resumed_from", 0))
            fits.append(
                f"{run.info.run_name} fit resumed from {resumed}: {at.since(resumed)} iterations"
            )
    summary = f"{len(again)} of {len(hit.finished)} finished configurations run again"
    return again, "; ".join([summary, *fits])


def stopped_and_resumed(folder: Path, fault: Fault) -> tuple[Row, Hit]:
    """The RESUMABLE sweep struck by `fault` mid-fit, then `--resume`d; the row's lost, redone
    and duplicates, and the checks every interrupted sweep must pass."""
    sweep = Sweep(folder, "resume", solvers=RESUMABLE, fit=RESUMABLE_FIT)
    hit = sweep.inject(lambda launch: fitting_after_a_finish(sweep, launch), fault)
    code, _ = sweep.run("--resume")
    runs, row = sweep.runs(), Row(notes=sweep.notes(hit))
    again, redone = redone_after_resume(hit, runs)
    row.lost = lost_configurations(hit)
    row.redone = f"{redone}; resume exit {code}"
    row.duplicates = str(duplicates(runs))
    row.expect(code == 0, f"the resume exited {code}, not 0")
    row.expect(not again, f"finished runs run again after the resume: {again}")
    row.expect(len(runs) == len(RESUMABLE), f"{len(runs)} runs for {len(RESUMABLE)} configurations")
    row.expect(all(r.info.status == "FINISHED" for r in runs), "not every run FINISHED")
    row.expect(bool(hit.running), "no configuration was running at the fault")
    return row, hit


def driver_sigkill(folder: Path) -> Row:
    """2. `spanlift sweep` SIGKILL, then --resume"""
    row, _ = stopped_and_resumed(folder, kill_driver)
    return row


def remaining_line(output: str) -> str:
    return next((line for line in output.splitlines() if "configurations remain" in line), "")


def sigint(folder: Path) -> Row:
    """3. Ctrl-C (SIGINT), then --resume"""
    row, hit = stopped_and_resumed(folder, ctrl_c)
    line = remaining_line(hit.launch.output())
    row.lost = f"exit {hit.code}, «{line.strip()}»; {row.lost}"
    row.expect(hit.code == 130, f"Ctrl-C: the sweep exited {hit.code}, not 130")
    row.expect(bool(line), "Ctrl-C: no 'configurations remain' line")
    return row


FID_SPEC = SolverSpec("euler", nfe=3)
FID_SEEDS = list(range(96))  # 2 actors × 4 shards of 12 samples


class KillOnFirstShard:
    """Stands in for the evaluator pool's progress bar and SIGKILLs `pid` when the first shard
    is merged: the other shards are then in flight or queued, so the kill lands mid-run."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.killed_at: float | None = None

    def __call__(self, *args: object, **kwargs: object) -> "KillOnFirstShard":
        return self

    def __enter__(self) -> "KillOnFirstShard":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, count: int) -> None:
        if self.killed_at is None:
            os.kill(self.pid, signal.SIGKILL)
            self.killed_at = time.perf_counter()


@contextmanager
def progress_bar(replacement: object) -> Iterator[None]:
    original = pool.tqdm
    pool.tqdm = replacement
    try:
        yield
    finally:
        pool.tqdm = original


def timed_fid(evaluators: EvaluatorPool, reference: FeatureMoments) -> tuple[float, int, float]:
    """FID of FID_SPEC's samples, how many samples it counted, and the seconds it took."""
    start = time.perf_counter()
    states = evaluators.solver_states(FID_SPEC, None, FID_SEEDS, ("fid",), "fid")["fid"]
    return frechet_distance(states, reference), states.count, time.perf_counter() - start


def evaluator_sigkill(folder: Path) -> Row:
    """4. evaluator actor SIGKILL mid-FID"""
    start_ray(None, folder, num_cpus=2)
    try:
        setup = EvaluatorSetup("digits", "digits", folder / "cache", threads=1)
        with running_evaluators(setup, 2, cpus=0.5) as evaluators:
            images = load_backbone("digits").reference_images()
            reference = evaluators.image_states(images, ("fid",), "reference")["fid"]
            expected, _, undisturbed = timed_fid(evaluators, reference)
            victim = ray.get(evaluators.actors[1].pid.remote())
            killer = KillOnFirstShard(victim)
            with progress_bar(killer):
                fid, count, disturbed = timed_fid(evaluators, reference)
            recovery = time.perf_counter() - (killer.killed_at or 0.0)
            restarted = ray.get(evaluators.actors[1].pid.remote()) != victim
    finally:
        ray.shutdown()
    row, difference = Row(), abs(fid - expected) / expected
    row.lost = (
        f"{disturbed - undisturbed:+.2f} s: {disturbed:.2f} s against {undisturbed:.2f} s "
        f"undisturbed, {recovery:.2f} s from the kill to the last shard"
    )
    same = "identical" if fid == expected else f"equal within {difference:.1e} (merge order)"
    row.redone = f"the victim's shards, on its restarted process; FID {same}"
    row.duplicates = "n/a (no MLflow)"
    row.expect(killer.killed_at is not None, "the evaluator was never killed")
    row.expect(restarted, "the killed evaluator was not restarted")
    row.expect(count == len(FID_SEEDS), f"{count} samples counted, not {len(FID_SEEDS)}")
    row.expect(difference <= 1e-9, f"FID {fid} differs from the undisturbed {expected}")
    return row


def failed_attempts(tune: Path) -> tuple[int, int]:
    """(failed trial attempts, those that failed inside a fit), from Tune's error files: one
    `Failure # n` block per attempt, a fit's own frames (`fit_steps`) in those that fitted."""
    blocks = [
        block
        for error in tune.glob("*/error.txt")
        for block in error.read_text(errors="replace").split("Failure # ")[1:]
    ]
    return len(blocks), sum("fit_steps" in block for block in blocks)


def nan_fit(folder: Path) -> Row:
    """5. NaN fit (lr 1e30) in a 2-configuration sweep"""
    sweep = Sweep(folder, "nan-fit", fit={"iterations": 20, "lr": 1e30, "warmup": 0})
    code, launch = sweep.run()
    runs = sweep.runs()
    by_solver = {r.data.params["solver"]: r for r in runs}
    failed, other = by_solver["dyweight"], by_solver["ipndm"]
    reason = failed.data.tags.get(FAILURE_TAG, "")
    attempts, fits = failed_attempts(sweep.root / "tune")
    row = Row(duplicates=str(duplicates(runs)), notes=sweep.notes())
    row.lost = (
        f"{failed.info.run_name} {failed.info.status} («{reason.split(':')[0]}: …»), "
        f"{other.info.run_name} {other.info.status}; exit {code}"
    )
    row.redone = f"{max(fits - 1, 0)} refits: {attempts} trial attempts, {fits} diverged fit(s)"
    row.expect(code == 1, f"the sweep exited {code}, not 1")
    row.expect(failed.info.status == "FAILED", f"the diverged run is {failed.info.status}")
    row.expect("diverged" in reason, f"{FAILURE_TAG} tag: {reason!r}")
    row.expect(other.info.status == "FINISHED", f"the other run is {other.info.status}")
    row.expect("failed: dyweight nfe=3" in launch.output(), "no 'failed:' line printed")
    return row


def node_lost(folder: Path) -> Row:
    """a worker node lost mid-fit (two nodes, S3 storage)"""
    sys.path.insert(0, str(ROOT))  # the scenario is the multi-node tests' own
    from tests.two_node_sweep import run_two_node_sweep

    sweep = run_two_node_sweep(folder)
    lost = [sweep.runs[run_id] for run_id in sweep.lost()]
    finished = [r for r in sweep.at_kill.values() if r.status == "FINISHED"]
    resumed = ", ".join(
        f"{r.name} from {r.resumed_from:g}" for r in lost if r.resumed_from is not None
    )
    row = Row(
        lost=f"{len(lost)} running configuration(s): {', '.join(r.name for r in lost)}",
        redone=(
            f"{len(sweep.rerun())} of {len(finished)} finished configurations run again; the "
            f"lost one(s) finished on the head (fit resumed: {resumed or 'from 0'})"
        ),
        duplicates=str(sweep.duplicates),
    )
    row.expect(sweep.exit_code == 0, f"exit {sweep.exit_code}")
    row.expect(bool(lost), "no configuration ran on the lost node")
    row.expect(
        all(r.status == "FINISHED" and r.node == sweep.head for r in lost), "lost not redone"
    )
    row.expect(not sweep.rerun(), "finished configurations ran again")
    row.expect(sweep.duplicates == 0, "duplicate runs")
    return row


SCENARIOS: list[Callable[[Path], Row]] = [
    worker_sigkill,
    driver_sigkill,
    sigint,
    evaluator_sigkill,
    nan_fit,
    node_lost,
]


def remove(folder: Path) -> None:
    """A scenario's folder, and the Ray temp folders its `ray-logs` links point to."""
    for link in [*folder.glob("ray-logs"), *folder.glob("runs/sweeps/*/ray-logs*")]:
        shutil.rmtree(link.resolve(), ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def run_scenario(scenario: Callable[[Path], Row], keep: bool) -> Row:
    fault = scenario.__doc__.strip()
    folder = Path(tempfile.mkdtemp(prefix="spanlift-faults-"))
    print(f"\n== {fault} in {folder}", flush=True)
    start = time.perf_counter()
    try:
        row = scenario(folder)
    except Exception as exc:
        traceback.print_exc()
        problem = f"{type(exc).__name__}: {exc}".splitlines()[0]
        row = Row(lost=f"error: {problem}", problems=[problem])
    row.fault, row.seconds = fault, time.perf_counter() - start
    if keep or row.problems:
        print(f"kept {folder}")
    else:
        remove(folder)
    return row


def table(rows: list[Row]) -> str:
    lines = [
        "| fault | what was lost | what was redone | duplicate MLflow runs | wall s |",
        "|---|---|---|---|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.fault} | {r.lost} | {r.redone} | {r.duplicates} | {r.seconds:.0f} |")
    notes = [f"- {r.fault}: {note}" for r in rows for note in r.notes]
    problems = [f"- {r.fault}: {problem}" for r in rows for problem in r.problems]
    lines += ["", "Notes:", *notes] if notes else []
    lines += ["", "UNEXPECTED:", *problems] if problems else []
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", type=int, nargs="+", help="scenario numbers to run (default: all)")
    p.add_argument("--keep", action="store_true", help="keep the scenarios' folders")
    args = p.parse_args()
    for name in PRIVATE_ENV:
        os.environ.pop(name, None)
    chosen = [s for i, s in enumerate(SCENARIOS, 1) if not args.only or i in args.only]
    rows = [run_scenario(scenario, args.keep) for scenario in chosen]
    print("\n" + table(rows))
    print(f"\ntotal wall time {sum(r.seconds for r in rows):.0f} s")
    return 1 if any(r.problems for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
