"""psnr, a metric added as one file (`evaluation/metrics/psnr.py`): its formula against a hand
computation and torchmetrics, its value on an evaluator against the teacher's samples of the same
seeds, and what reads the metric registry finding it: the catalogue, the sweep schema, `spanlift
eval`."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from spanlift.cli import main
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics.psnr import psnr_state
from spanlift.platform.evaluation.metrics.reference import ReferenceSet
from spanlift.platform.evaluation.metrics.states import merge_states
from spanlift.platform.run_eval import EvalRequest, check_request
from spanlift.platform.sampling.rollout import rollout, seed_noise
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
from spanlift.platform.sweep.config import parse_sweep
from spanlift.platform.sweep.evaluation import searched_family
from spanlift.platform.tracking.metrics import METRICS, default_mode, produced_by
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build

SPEC = SolverSpec("euler", 4)


def test_psnr_of_fixed_arrays_is_the_hand_computed_one() -> None:
    samples = torch.zeros(2, 1, 4, 4)
    teacher = torch.stack([torch.full((1, 4, 4), 0.125), torch.full((1, 4, 4), 0.5)])
    state = psnr_state(samples, teacher)  # MSE 1/64 and 1/4: 24.0824 dB and 12.0412 dB
    assert state.count == 2
    assert state.mean == pytest.approx((10 * math.log10(256) + 10 * math.log10(16)) / 2, 1e-12)
    assert state.mean == pytest.approx(18.0618, abs=1e-4)
    assert psnr_state(teacher, teacher).mean == math.inf  # a sample equal to the teacher's


def test_psnr_is_torchmetrics_psnr_per_sample_averaged() -> None:
    functional = pytest.importorskip("torchmetrics.functional.image")
    g = torch.Generator().manual_seed(0)
    teacher = torch.rand(5, 3, 8, 8, generator=g) * 2 - 1
    samples = (teacher + 0.1 * torch.randn(5, 3, 8, 8, generator=g)).clamp(-1, 1)
    theirs = functional.peak_signal_noise_ratio(
        samples.double(), teacher.double(), data_range=2.0, dim=(1, 2, 3)
    )
    # torchmetrics holds ln 10 and the range in float32: it agrees to 5e-8, not to 1e-12
    assert psnr_state(samples, teacher).mean == pytest.approx(float(theirs), rel=1e-7)


def test_the_evaluator_compares_each_sample_with_the_teachers_of_its_seed(tmp_path: Path) -> None:
    evaluator = Evaluator(EvaluatorSetup("gmm", "", tmp_path))
    seeds = list(range(FID_FIRST_SEED, FID_FIRST_SEED + 12))
    whole = evaluator.solver_states(SPEC, None, seeds, ("psnr",))["psnr"]
    halves = [evaluator.solver_states(SPEC, None, s, ("psnr",)) for s in (seeds[:5], seeds[5:])]
    backbone = evaluator.backbone
    noise, cond = seed_noise(seeds, backbone.shape), backbone.conditioning(seeds)
    with torch.no_grad():
        ours, teacher = (
            backbone.decode(rollout(build(spec, backbone), backbone, noise, cond)).clamp(-1, 1)
            for spec in (SPEC, DEFAULT_TEACHER)
        )
    errors = (ours - teacher).double().square().flatten(1).mean(dim=1).numpy()
    assert whole.count == 12 and whole.mean == pytest.approx(np.mean(10 * np.log10(4 / errors)))
    assert merge_states(halves)["psnr"].total == pytest.approx(whole.total, rel=1e-9)
    assert 0 < whole.mean < math.inf


def test_the_catalogue_the_sweep_schema_and_eval_read_it_from_the_registry(capsys) -> None:
    assert default_mode("psnr") == "max"
    assert METRICS["psnr"].against == ("psnr.reference", "eval.samples")
    assert {"psnr", "latency_ms_per_image"} <= set(produced_by(("psnr",)))
    sweep = {
        "experiment": "psnr",
        "backbone": "gmm",
        "solvers": [{"name": "euler", "nfe": 3}],
        "search": {"metric": "psnr", "mode": "max"},
        "evaluation": {"metrics": ["psnr"]},
    }
    config = parse_sweep(sweep)
    assert config.search_metric == "val_psnr" and searched_family(config) == "psnr"
    setup = EvaluatorSetup("gmm", "digits", Path("unused"))
    request = EvalRequest(setup, SPEC, None, ("psnr",), 8, 1, ReferenceSet())
    check_request(request)  # available everywhere: it needs only the teacher
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "psnr" in capsys.readouterr().out
