"""A benchmark asked for a CUDA device on a machine without one stops at once, in one line."""

import subprocess
import sys

import pytest
import torch

from tests.cli_run import ROOT, command_environment

SCRIPTS = [
    ["gpu_check.py"],
    ["backbone_latency.py", "--only", "edm", "--device", "cuda"],
    ["fit_memory.py", "--device", "cuda"],
    ["fill_fit_cache.py", "sweeps/digits_convergence.yaml", "--device", "cuda"],
]


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("argv", SCRIPTS, ids=lambda argv: argv[0])
def test_a_benchmark_on_cuda_without_a_gpu_says_so_in_one_line(tmp_path, argv):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / argv[0]), *argv[1:]],
        cwd=ROOT,
        env=command_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        "--device cuda: no CUDA device is visible to torch on this machine"
    )
