"""benchmarks/fill_fit_cache.py fits a sweep's configurations into the checkpoints the sweep
itself would keep: the same file names (configuration keys), a two-stage SpanLift's included, so
a sweep run afterwards takes them from its fit cache."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cli_run import ROOT, command_environment, spanlift

SWEEP = {
    "experiment": "fill",
    "backbone": "gmm",
    "teacher": {
        "solver": "ipndm",
        "nfe": 20,
        "train_samples": 64,
        "validation_samples": 32,
        "test_samples": 16,
    },
    "solvers": [
        {"name": "dyweight", "nfe": 3},
        {"name": "spanlift", "nfe": 3, "settings": {"base": "dyweight", "hidden_dim": 8}},
    ],
    "search": {"algorithm": "grid", "metric": "rmse", "mode": "min"},
    "fit": {"iterations": 20, "batch_size": 16, "seed": 0},
    "resources": {"workers": 1},
}


def fill(folder: Path, sweep: Path, storage: Path) -> subprocess.CompletedProcess:
    script = ROOT / "benchmarks" / "fill_fit_cache.py"
    args = [str(sweep), "--storage", str(storage), "--device", "cpu", "--processes", "1"]
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=folder,
        env=command_environment(folder),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.e2e
def test_the_fits_it_makes_are_the_ones_the_sweep_keeps(tmp_path: Path) -> None:
    sweep, storage = tmp_path / "fill.yaml", tmp_path / "runs"
    sweep.write_text(yaml.safe_dump(SWEEP))
    swept = spanlift(tmp_path, "sweep", str(sweep), "--storage", str(storage), "--num-cpus", "2")
    assert swept.returncode == 0, swept.stdout + swept.stderr
    fitted = storage / "fill" / "fitted"
    kept = sorted(p.name for p in fitted.glob("*.pt"))
    assert [name.split("-")[0] for name in kept] == ["dyweight", "spanlift"]
    shutil.rmtree(fitted)
    filled = fill(tmp_path, sweep, storage)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    assert sorted(p.name for p in fitted.glob("*.pt")) == kept
    assert "spanlift[base=dyweight,hidden_dim=8] nfe=3 seed 0: 20 iterations" in filled.stdout


def test_a_sweep_fitted_on_several_workers_is_refused(tmp_path: Path) -> None:
    sweep = tmp_path / "ddp.yaml"
    sweep.write_text(yaml.safe_dump({**SWEEP, "resources": {"workers": 2}}))
    refused = fill(tmp_path, sweep, tmp_path / "runs")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("so it takes only workers: 1")
