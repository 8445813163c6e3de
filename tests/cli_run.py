"""Run the `spanlift` command as a user does: a new process in a folder of the test's own."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def spanlift(folder: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`spanlift ARGS` in `folder`, with an empty torch hub: LPIPS finds AlexNet weights only
    where a test puts them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_HOME": str(folder / "torch-home")}
    return subprocess.run(
        [sys.executable, "-m", "spanlift.cli", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
