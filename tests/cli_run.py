"""Run the `spanlift` command as a user does: a new process in a folder of the test's own.

`ROOT` is the repository: the package the processes import, the sweep files, the cluster file.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def command_environment(folder: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with this repository's package first, `env` on top, and an
    empty torch hub: LPIPS finds AlexNet weights only where a test puts them."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TORCH_HOME": str(folder / "torch-home"),
        **(env or {}),
    }


def spanlift(
    folder: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """`spanlift ARGS` in `folder`, waited for, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "spanlift.cli", *args],
        cwd=folder,
        env=command_environment(folder, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_spanlift(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`spanlift ARGS` in `folder`, left running (to interrupt it, or kill its workers), its
    standard error merged into its standard output."""
    return subprocess.Popen(
        [sys.executable, "-m", "spanlift.cli", *args],
        cwd=folder,
        env=command_environment(folder, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
