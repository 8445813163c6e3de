"""A copy of the spanlift package with files dropped in, read back by a fresh process: how the
plug-in tests show that a new file is all a new plug-in takes."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import spanlift


def read_back(folder: Path, dropped: dict[str, str], script: str) -> dict:
    """Copy the package into `folder/spanlift`, write each `dropped` file (path inside the
    package → text), run `script` there in a fresh process, and return the JSON it prints last."""
    copy = folder / "spanlift"
    shutil.copytree(
        Path(spanlift.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pt")
    )
    for path, text in dropped.items():
        (copy / path).write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
