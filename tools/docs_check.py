"""`make docs-check`: run the docs' command lines as written, in order, on a fresh store.

Every `cpu` line of README.md and docs/*.md (`tools/docs_lines.py` reads the tags) runs in one
temporary folder laid out like a fresh clone (the sweep files, benchmarks and Makefile copied; no
MLflow store, no runs/), with this Python environment's `bin/` first on PATH. A `cpu` line passes
when it exits 0 within TIME_FACTOR × the time its tag states, and what it names exists after it:
each path it names and each `--experiment` in the store. A `gpu`, `weights` or `cluster` line runs
and passes when it fails within FAST_FAIL seconds in one line and without a traceback. The rest
are skipped, the reason printed. `RUN_ID` stands for the last run id an earlier line printed;
`make` runs with this environment as the Makefile's VENV, already installed.

    python -m tools.docs_check [--only PATTERN] [--list] [--time-factor 1.5] [--keep]
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tools.docs_lines import NEEDS, DocLine, doc_lines

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("sweeps", "benchmarks", "Makefile", "pyproject.toml")
TIME_FACTOR = 1.5
FAST_FAIL = 120.0
UNSTATED_LIMIT = 900.0
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
OUTPUT_SUFFIXES = (".png", ".csv", ".json", ".nc", ".pt", ".zarr", ".yaml", ".py", ".md")


@dataclass(frozen=True)
class Ran:
    status: int | None
    """Exit status, None when it ran past its limit."""
    seconds: float
    stdout: str
    stderr: str


def workspace() -> Path:
    """A temporary folder laid out like a fresh clone, with no store and no runs."""
    work = Path(tempfile.mkdtemp(prefix="docs-check-"))
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, work / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, work / name)
    for cluster_file in ROOT.glob("ray_cluster*.yaml"):
        shutil.copy2(cluster_file, work / cluster_file.name)
    return work


def environment() -> dict[str, str]:
    """This environment's tools first, this checkout's package, and no store or cluster named."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


def shell_text(line: DocLine, run_id: str | None) -> str:
    """The line as bash runs it: `make` given this environment as its VENV, RUN_ID replaced
    (a line that is to fail keeps it: the run it names is one CI cannot make)."""
    venv = Path(sys.prefix)
    text = re.sub(
        r"^((?:time )?)make ",
        rf"\1make VENV={shlex.quote(str(venv))} -o {shlex.quote(str(venv / '.installed'))} ",
        line.command,
    )
    return text.replace("RUN_ID", run_id) if run_id else text


def run(text: str, work: Path, limit: float, python: bool) -> Ran:
    """`text` in bash (a Python block: in python) in `work`, killed with its children after
    `limit` seconds."""
    if python:
        (work / "block.py").write_text(text)
        argv = ["python", "block.py"]
    else:
        argv = ["bash", "-c", text]
    env = environment()
    argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    began = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=limit)
        status: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        status = None
    return Ran(status, time.monotonic() - began, stdout, stderr)


def named_paths(command: str) -> list[str]:
    """The relative paths a shell line names (a word with `/` or a file suffix, not an option,
    a URI, a glob, a variable or a `key=value`): each must exist after a `cpu` line ran."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    return [
        word
        for word in words[1:]
        if not word.startswith(("-", "/", "~", "<"))
        and not any(mark in word for mark in ("://", "*", "$", "=", "…", "{"))
        and ("/" in word or word.endswith(OUTPUT_SUFFIXES))
    ]


def named_experiments(command: str) -> list[str]:
    """The experiments `--experiment NAME` names, where the line uses the default store."""
    if "--tracking-uri" in command:
        return []
    return re.findall(r"--experiment[= ]([\w.-]+)", command)


def stored_experiments(work: Path) -> set[str]:
    store = work / "mlflow.db"
    if not store.exists():
        return set()
    with sqlite3.connect(store) as connection:
        rows = connection.execute("SELECT name FROM experiments WHERE lifecycle_stage='active'")
        return {name for (name,) in rows}


def last_line(ran: Ran) -> str:
    lines = [line for line in (ran.stderr or ran.stdout).splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def slow(measured: float, stated: float | None, factor: float) -> str:
    """Why `measured` seconds break the docs' stated time, or '' when they keep it."""
    if stated is None or measured <= factor * stated:
        return ""
    return f"took {measured:.0f} s, over {factor:g} × the stated {stated:.0f} s"


def cpu_problems(line: DocLine, ran: Ran, work: Path, factor: float) -> list[str]:
    """What a `cpu` line that ran got wrong: its status, its time, what it names."""
    if ran.status is None:
        return [f"still running after {ran.seconds:.0f} s: killed"]
    if ran.status != 0:
        return [f"exit status {ran.status}: {last_line(ran)}"]
    problems = [slow(ran.seconds, line.stated, factor)]
    if not line.python:
        missing = [p for p in named_paths(line.command) if not (work / p).exists()]
        problems += [f"{p} does not exist after it" for p in missing]
        absent = set(named_experiments(line.command)) - stored_experiments(work)
        problems += [f"no experiment {name!r} in the store after it" for name in sorted(absent)]
    return [p for p in problems if p]


MISSING_WORDS = {
    "gpu": r"CUDA|GPU",
    "weights": r"not found|no such|not a folder|no MLflow store|no run |neither a checkpoint"
    r"|pass \w+=",
    "cluster": r"Ray|cluster|reach|server",
}
"""What an error line of a line of each kind says, naming what is missing."""


def missing_problem(ran: Ran, kind: str) -> str:
    """What a line that needs what CI lacks (`kind`) got wrong, or '': it must fail fast in one
    line (`spanlift: error: …`, a script's last line, or the doctor's FAIL lines) that names
    what is missing (MISSING_WORDS), with no traceback."""
    if ran.status is None or ran.seconds > FAST_FAIL:
        return f"did not fail within {FAST_FAIL:.0f} s"
    if ran.status == 0:
        return "exit status 0: it ran, so its tag names nothing missing"
    if "Traceback (most recent call last)" in ran.stderr + ran.stdout:
        return f"a traceback, not one line: {last_line(ran)}"
    said = [line for line in ran.stdout.splitlines() if line.startswith("FAIL ")]
    said += ran.stderr.strip().splitlines()[-1:]
    if not said:
        return f"no error line: {last_line(ran)}"
    if not any(re.search(MISSING_WORDS[kind], line) for line in said):
        return f"its error does not name the missing {kind}: {said[-1]}"
    return ""


SKIPPED = {
    "long": "runs on a CPU, longer than CI affords",
    "sketch": "a form to adapt, not a line to run",
}


def ray_running() -> bool:
    """Whether a Ray head (its GCS server) runs on this machine: `--address auto` joins it."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"gcs_server" in cmdline.read_bytes().split(b"\0")[0]:
                return True
        except OSError:
            continue
    return False


def skip_reason(line: DocLine) -> str:
    """Why `line` is not run here, or '' when it is."""
    if line.kind == "cluster" and "--address auto" in line.command and ray_running():
        return "a Ray cluster runs on this machine, which `--address auto` would join"
    if line.kind.startswith("after "):
        return f"reads what a {line.kind.split()[1]} line above records"
    if line.python and line.kind in NEEDS:
        return f"a Python block that needs {line.kind}: a script's failure is not one line"
    return SKIPPED.get(line.kind, "")


def shown(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    if not minutes:
        return f"{secs} s"
    return f"{minutes} min {secs} s" if secs else f"{minutes} min"


def check_line(line: DocLine, work: Path, run_id: str | None, factor: float) -> tuple[str, Ran]:
    """Run one line that is not skipped: (what it got wrong, or '', what it did)."""
    text = line.command if line.python else shell_text(line, run_id if line.kind == "cpu" else None)
    if line.kind == "cpu":
        limit = factor * line.stated * 2 if line.stated else UNSTATED_LIMIT
        ran = run(text, work, max(limit, 60.0), line.python)
        return "; ".join(cpu_problems(line, ran, work, factor)), ran
    ran = run(text, work, FAST_FAIL + 5, line.python)
    return missing_problem(ran, line.kind), ran


def check(
    lines: list[DocLine], work: Path, factor: float
) -> tuple[list[tuple[DocLine, float]], list[DocLine]]:
    """Each line in order, a line printed for each: the `cpu` lines' measured seconds, and the
    lines that failed."""
    run_id, measured, failures = None, [], []
    for line in lines:
        head = " ".join(line.command.splitlines()[0].split())
        reason = skip_reason(line)
        if reason:
            print(f"skip  {line.where}  [{line.kind}] {reason}: {head}", flush=True)
            continue
        problem, ran = check_line(line, work, run_id, factor)
        ids = RUN_ID.findall(ran.stdout)
        run_id = ids[-1] if ids else run_id
        if line.kind == "cpu":
            measured.append((line, ran.seconds))
        verdict = f"{ran.seconds:.1f} s" + (f": {last_line(ran)}" if line.kind != "cpu" else "")
        print(f"{'FAIL' if problem else 'ok':<5} {line.where}  {head}  ({verdict})", flush=True)
        if problem:
            failures.append(line)
            print(f"      {problem}", flush=True)
    return measured, failures


def print_times(measured: list[tuple[DocLine, float]], factor: float) -> None:
    print(f"\nmeasured beside stated (a line fails over {factor:g} × its stated time):")
    for line, seconds in measured:
        head = line.command.splitlines()[0][:70]
        print(f"  {line.where:<22} {shown(seconds):>12}  stated {shown(line.stated):>12}  {head}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only the lines whose `where command` matches this regex")
    parser.add_argument("--list", action="store_true", help="list the lines and their tags")
    parser.add_argument("--time-factor", type=float, default=TIME_FACTOR)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    lines, errors = doc_lines(ROOT)
    for error in errors:
        print(f"FAIL  {error}")
    if args.only:
        lines = [ln for ln in lines if re.search(args.only, f"{ln.where} {ln.command}")]
    if args.list:
        for ln in lines:
            print(
                f"{ln.where:<22} {ln.kind:<14} {shown(ln.stated):>12}  {ln.command.splitlines()[0]}"
            )
        return 1 if errors else 0
    work = workspace()
    print(f"docs-check: {len(lines)} lines in {work}", flush=True)
    measured, failures = check(lines, work, args.time_factor)
    print_times(measured, args.time_factor)
    print(f"docs-check: {len(failures) + len(errors)} failed of {len(lines)} lines")
    if args.keep or failures:
        print(f"the folder they ran in: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures or errors else 0


if __name__ == "__main__":
    sys.exit(main())
