"""`spanlift doctor --memory SWEEP`: each configuration's fit and evaluation against one GPU's
memory, and the settings that make a fit fit; the shipped SANA sweep's settings fit the 80 GB
GPU its comment names."""

import re
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml

from spanlift.backbones import load_backbone
from spanlift.cli import main
from spanlift.platform.doctor import device as doctor_device
from spanlift.platform.doctor.memory import EvaluationProbe, SweepProbe
from spanlift.platform.doctor.replayed_calls import ReplayedCalls
from spanlift.platform.evaluation.evaluator import Evaluator
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.tensor_memory import MARGIN, device_peak, module_bytes
from spanlift.platform.sweep.config import parse_sweep
from spanlift.platform.sweep.evaluation import evaluator_setup
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build
from spanlift.solvers.model_statistics import ModelStatistics
from spanlift.solvers.on_base import statistics_request, use_statistics
from tests.cli_run import ROOT, command_environment
from tests.test_fit_memory import clock

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


def test_the_doctor_names_the_same_settings_whatever_the_timings_noise(tmp_path, monkeypatch):
    """The FAIL line of a fit too large for the GPU names one setting whether the probe's clock
    read a call of two rows as long as one of one row, or twice as long."""
    config = parse_sweep(DIGITS_SWEEP, "digits.yaml", tmp_path)
    (entry, spec), *_ = config.grid()
    lines = set()
    for steps in ([1.0], [1.0, 1.0, 1.0, 2.0], [0.5, 3.0]):
        monkeypatch.setattr(time, "perf_counter", clock(steps))
        probe = SweepProbe(config, torch.device("cpu"), int(float(GPU_GIB) * 2**30))
        outcome = probe.fit(spec, config.fit_of(entry))
        lines.add(FAIL.search(outcome.detail).groups())
    assert len(lines) == 1, lines


def sana_folder(root: Path) -> Path:
    """A random-weight SANA-600M pipeline, DINOv2-base and prompts file at the real
    configurations (benchmarks/random_pipelines.py; a one-layer text encoder of 64 tokens, the
    tokenizer's 11 among them: its weights do not change a fit's working memory), with the
    shipped sana.yaml copied beside them."""
    script = ROOT / "benchmarks" / "random_pipelines.py"
    args = [str(root), "--sweep", str(ROOT / "sweeps" / "sana.yaml")]
    args += ["--text-encoder-layers", "1", "--text-encoder-vocabulary", "64", "--prompts", "60"]
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
    shutil.rmtree(tmp_path / "models")  # 1.8 GB of weights


def test_an_evaluation_pass_is_measured_as_the_whole_pass_peaks(tmp_path):
    """The doctor measures each solver's rollout, and what follows it (decoding, the metrics)
    once: each pass's peak equals the whole pass's, for the solver whose samples it decoded and
    for the solvers after it; loading the metric networks is not counted as a pass's bytes (they
    are the weights' line)."""
    sweep = {**DIGITS_SWEEP, "evaluation": {"metrics": ["fid"], "detector": "digits_eval"}}
    config = parse_sweep(sweep, "digits.yaml", tmp_path)
    cpu = torch.device("cpu")
    probe = SweepProbe(config, cpu, 2**34)
    evaluation = EvaluationProbe(probe, Evaluator(evaluator_setup(config, tmp_path)))
    specs = [SolverSpec("ipndm", 4), SolverSpec("spanlift", 3, settings={"base": "dyweight"})]

    def whole_pass(solver: torch.nn.Module, samples: int) -> int:
        part = evaluation.evaluator.shard_part
        with torch.no_grad():
            return device_peak(cpu, lambda: part(solver, list(range(samples)), evaluation.metrics))

    measured = {}
    for spec in specs:  # the probe first: the networks load within its first pass
        solver = build(spec, probe.backbone)
        measured[spec.label()] = [evaluation.peak(solver, samples) for samples in (1, 2)]
    for spec in specs:
        solver = build(spec, probe.backbone)
        whole = [whole_pass(solver, samples) for samples in (1, 2)]
        assert measured[spec.label()] == whole, spec.label()
        assert whole[1] > whole[0]  # a second sample costs its bytes: the slope is measured
    assert "fid" in evaluation.metrics


def test_the_evaluation_batch_the_doctor_names_fits_when_measured_whole(tmp_path, capsys):
    """The batch `doctor --memory` says fits (its slope measured with the networks already
    loaded) takes no more than the GPU when a whole pass of it is measured."""
    sweep = {
        **DIGITS_SWEEP,
        "solvers": [{"name": "ipndm", "nfe": 4}],
        "evaluation": {"metrics": ["fid"], "detector": "digits_eval", "batch_size": "auto"},
    }
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(sweep))
    status, lines = doctor_memory(path, "0.05", capsys)
    assert status == 0, lines
    (line,) = [line for line in lines if line.startswith("pass  eval")]
    batch = int(re.search(r"at most (\d+) fit", line).group(1))
    config = parse_sweep(sweep, str(path), tmp_path)
    evaluator = Evaluator(evaluator_setup(config, tmp_path))
    solver = build(SolverSpec("ipndm", 4), evaluator.backbone)
    metrics = ["fid", "latency"]
    with torch.no_grad():
        evaluator.shard_part(solver, [0], metrics)  # the networks loaded
        whole = device_peak(
            torch.device("cpu"), lambda: evaluator.shard_part(solver, list(range(batch)), metrics)
        )
    weights = module_bytes(*evaluator.loaded_modules())
    assert batch >= 1 and weights + whole <= 0.05 * 2**30 * (1 - MARGIN), (batch, whole)


def test_a_rollout_with_replayed_calls_peaks_as_the_rollout_with_every_call_run():
    """On a CPU the doctor runs one backbone call per input shape and replays the rest
    (`doctor/replayed_calls.py`): for every registered solver, and every wrapper over every base,
    the peak equals that of the same rollout with every call run, with one call set of shapes
    shared by all of them as the doctor shares it."""
    digits = load_backbone("digits").freeze()
    replayed = ReplayedCalls(digits)
    cpu, compared, calls = torch.device("cpu"), 0, []
    real_denoise = digits.denoise
    digits.denoise = lambda *args: calls.append(1) or real_denoise(*args)
    for spec in doctor_device.solver_specs():
        solver = build(spec, digits)
        if statistics_request(solver) is not None:  # a fit estimates them
            sigmas = (digits.sigma_min, digits.sigma_max)
            use_statistics(solver, ModelStatistics.degenerate(*sigmas, tuple(digits.shape)))
        noise = torch.randn(1, *digits.shape, generator=torch.Generator().manual_seed(0))
        run = partial(rollout, solver, digits, noise)
        with torch.no_grad():
            run()  # what a solver computes once (its coefficients) is made before either count
            assert replayed.peak(run) == device_peak(cpu, run), spec.label()
        compared += 1
    del digits.denoise
    assert compared > 50 and replayed.calls_run == len(replayed.first) < 10
    assert len(calls) > 40 * replayed.calls_run  # the calls the rollouts run in full made
