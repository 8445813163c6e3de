"""`spanlift doctor --memory SWEEP`: each configuration's fit and evaluation against one GPU's
memory, and the settings that make a fit fit; the shipped SANA sweep's settings fit the 80 GB
GPU its comment names."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spanlift.cli import main
from tests.cli_run import ROOT, command_environment

FAIL = re.compile(r"fits with checkpoint (\w+)(?:, micro_batch (\d+))?: ")
DIGITS_SWEEP = {
    "experiment": "digits-memory",
    "backbone": "digits",
    "teacher": {"solver": "heun", "nfe": 9, "train_samples": 32, "test_samples": 8},
    "solvers": [{"name": "spanlift", "nfe": 3, "settings": {"base": "dyweight"}}],
    "search": {"algorithm": "grid", "metric": "rmse", "mode": "min"},
    "fit": {"iterations": 10, "batch_size": 16, "seed": 0},
}
GPU_GIB = "0.04"
"""A GPU of 41 MiB: the plain fit of 16 digits at NFE 3 (≈ 60 MiB) does not fit it, a
recomputed or split one does."""


def doctor_memory(sweep: Path, gib: str, capsys) -> tuple[int, list[str]]:
    status = main(["doctor", "--memory", str(sweep), "--gpu-memory", gib])
    return status, capsys.readouterr().out.splitlines()


def test_a_fit_that_does_not_fit_names_settings_that_do_and_they_pass(tmp_path, capsys):
    sweep = tmp_path / "digits.yaml"
    sweep.write_text(yaml.safe_dump(DIGITS_SWEEP))
    status, lines = doctor_memory(sweep, GPU_GIB, capsys)
    assert status == 1, lines
    failed = [line for line in lines if line.startswith("FAIL  fit spanlift")]
    assert len(failed) == 1, lines
    checkpoint, micro_batch = FAIL.search(failed[0]).groups()
    named = {"checkpoint": checkpoint, "micro_batch": int(micro_batch or 0)}
    sweep.write_text(yaml.safe_dump({**DIGITS_SWEEP, "fit": {**DIGITS_SWEEP["fit"], **named}}))
    status, lines = doctor_memory(sweep, GPU_GIB, capsys)
    assert status == 0, lines
    assert any(line.startswith("pass  fit spanlift") for line in lines), lines
    assert lines[-1].startswith("doctor: ") and " 0 failed" in lines[-1]


def sana_folder(root: Path) -> Path:
    """A random-weight SANA-600M pipeline, DINOv2-base and prompts file at the real
    configurations (benchmarks/random_pipelines.py; a one-layer text encoder: its weights do not
    change a fit's working memory), with the shipped sana.yaml copied beside them."""
    script = ROOT / "benchmarks" / "random_pipelines.py"
    args = [str(root), "--sweep", str(ROOT / "sweeps" / "sana.yaml")]
    args += ["--text-encoder-layers", "1", "--prompts", "60"]
    written = subprocess.run(
        [sys.executable, str(script), *args],
        env=command_environment(root),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert written.returncode == 0, written.stderr
    return root / "sweeps" / "sana.yaml"


@pytest.mark.e2e
def test_the_shipped_sana_sweep_fits_the_80_gb_gpu_its_comment_names(tmp_path, capsys):
    sweep = sana_folder(tmp_path)
    status, lines = doctor_memory(sweep, "80", capsys)
    fits = [line for line in lines if line.startswith(("pass  fit", "FAIL  fit"))]
    evaluations = [line for line in lines if line.startswith(("pass  eval", "FAIL  eval"))]
    assert len(fits) == 6 and len(evaluations) == 4, lines  # fits: DyWeight, SpanLift × NFE 3, 5, 7
    assert all(line.startswith("pass") for line in fits + evaluations), "\n".join(lines)
    assert status == 0
    shutil.rmtree(tmp_path / "models")  # 3 GB of weights
