"""The table's reference rows: persistence (the last observed frame repeated) and the teacher read
from its cache, scored with the evaluators' counting and recorded like a solver's row."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from spanlift.backbones.latent_nowcast import LatentNowcast
from spanlift.platform.configuration import Configuration
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.nowcast_reference_rows import (
    PERSISTENCE_SPEC,
    cached_teacher,
    persistence,
    score_reference_row,
)
from spanlift.platform.results.tracking import configuration_params
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.seeds import TEST_SEED_OFFSET
from tests.test_latent_nowcast import TinyAutoencoder, TinyNoisePredictor, random_windows

THRESHOLDS = (74, 133, 219)
"""Levels that survive the round trip VIL → [−1, 1] → VIL exactly (16 comes back as 15.999999)."""


def numpy_hits(forecast: np.ndarray, observed: np.ndarray, threshold: int) -> np.ndarray:
    """Hits per lead time, summed over windows and pixels (pool 1), counted apart."""
    return ((forecast >= threshold) & (observed >= threshold)).sum(axis=(0, 2, 3))


def test_persistence_and_cached_teacher_rows_count_like_the_evaluators(tmp_path: Path):
    torch.manual_seed(0)
    windows = random_windows(size=16)
    backbone = LatentNowcast.from_modules(TinyNoisePredictor(), TinyAutoencoder(), windows)
    seeds = [TEST_SEED_OFFSET + i for i in range(5)]  # 5 windows of 3: two drawn twice
    setup = EvaluatorSetup(
        "prediff", "", tmp_path, options={"lpips_weights": tmp_path / "no-alexnet.pth"}
    )

    report = score_reference_row(
        persistence(backbone, seeds), backbone, seeds, setup, ("skill", "lpips")
    )
    vil = windows.windows(seeds).numpy().astype(np.int64)
    last = np.repeat(vil[:, 6:7], 6, axis=1)
    counts = report.states["skill"].to_dataset()
    for threshold in THRESHOLDS:
        np.testing.assert_array_equal(
            counts.hits.sel(pool=1, threshold=threshold).values,
            numpy_hits(last, vil[:, 7:], threshold),
        )
    assert "lpips" in report.unavailable and "AlexNet" in report.unavailable["lpips"]
    assert report.measures["skill.reference"] == f"observed frames of {backbone.identity()}"
    assert report.measures["skill.convention"] == "exact" == report.states["skill"].convention
    assert "latency_ms_per_image" not in report.metrics()  # nothing was sampled

    endpoints = torch.randn(len(seeds), *backbone.shape, generator=torch.Generator().manual_seed(1))
    test = TeacherSet(torch.tensor(seeds), endpoints.clone(), endpoints)
    teacher = score_reference_row(
        cached_teacher(backbone, test, "teacher"), backbone, seeds, setup, ("skill",)
    )
    with torch.no_grad():
        frames = backbone.decode(endpoints).clamp(-1, 1)
    forecast_vil = ((frames + 1) * 127.5).clamp(0, 255).numpy()
    hits = teacher.states["skill"].to_dataset().hits.sel(pool=1, threshold=74).values
    np.testing.assert_array_equal(hits, numpy_hits(forecast_vil, vil[:, 7:], 74))

    earthformer = replace(setup, options={**setup.options, "skill_convention": "earthformer"})
    counted = score_reference_row(
        persistence(backbone, seeds), backbone, seeds, earthformer, ("skill",)
    )
    assert (
        counted.states["skill"].convention == counted.measures["skill.convention"] == "earthformer"
    )
    np.testing.assert_array_equal(
        counted.states["skill"].hits, report.states["skill"].hits
    )  # values 0–255: same

    configuration = Configuration("prediff", {}, PERSISTENCE_SPEC, {})
    params = configuration_params(configuration)
    assert (params["solver"], params["nfe"]) == ("persistence", 0)
    assert len(configuration.key()) > 0
