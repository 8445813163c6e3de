"""fd_dinov2 against NVlabs/edm2's own code (`calculate_metrics.py`, run unmodified; figures in
tests/fixtures, see its README): its Fréchet distance on fixed features, its preprocessing of a
fixed image, its DINOv2 detector's features with the torch-hub model class; then the metric in an
evaluation of a small solver through the evaluator, against SciPy; missing weights and a
statistics-file reference refused with one line."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch
import torch.nn.functional as F

from spanlift.errors import MetricUnavailable, ReferenceStatisticsError
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics import METRICS, Done
from spanlift.platform.evaluation.metrics.fd_dinov2 import (
    Compared,
    FdDinov2,
    FdDinov2Options,
    edm2_pixels,
    load_detector,
)
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments
from spanlift.platform.evaluation.metrics.reference import ReferenceSet
from spanlift.platform.evaluation.sample_metrics import evaluate_samples
from spanlift.platform.sampling.rollout import rollout, seed_noise
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "dinov2-tiny"  # 16-d, 2 layers, seeded random weights (fixtures/README.md)
EDM2 = json.loads((FIXTURES / "edm2_fd_dinov2_reference.json").read_text())
HUB = json.loads((FIXTURES / "edm2_dinov2_features.json").read_text())


def done(samples: int = 40) -> Done:
    return Done(samples, 1.0, None, "cpu")


def test_the_distance_is_the_one_edm2_prints_on_the_same_features() -> None:
    generated = FeatureMoments.of(np.array(EDM2["features_generated"]))
    reference = FeatureMoments.of(np.array(EDM2["features_reference"]))
    finished = FdDinov2().finish(generated, Compared(reference, "fixed"), done())
    assert finished.metrics["fd_dinov2"] == pytest.approx(EDM2["fd_dinov2"], rel=1e-9)
    assert EDM2["fd_dinov2"] == pytest.approx(18.871568587487722, rel=1e-12)


def test_preprocessing_is_edm2s_on_a_fixed_image() -> None:
    image = torch.tensor(EDM2["image"])[None]  # [-1.05, 1.05]: some pixels clip
    ours = edm2_pixels(image)[0].double().numpy()
    stride = EDM2["preprocessed_stride"]
    assert ours.shape == (3, 224, 224)
    np.testing.assert_allclose(
        ours[:, ::stride, ::stride], EDM2["preprocessed_subsample"], atol=1e-6
    )
    assert ours.sum() == pytest.approx(EDM2["preprocessed_sum"], rel=1e-6)
    assert np.square(ours).sum() == pytest.approx(EDM2["preprocessed_sum_of_squares"], rel=1e-6)
    # EDM2's steps as torch ops: uint8 pixels, resize, /255, ImageNet normalisation
    pixels = (image * 127.5 + 128).clip(0, 255).to(torch.uint8)
    x = F.interpolate(pixels.to(torch.float32), size=(224, 224), mode="bicubic", antialias=True)
    x = x / 255
    x = (x - torch.tensor([0.485, 0.456, 0.406]).reshape(1, -1, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]
    ).reshape(1, -1, 1, 1)
    assert torch.equal(edm2_pixels(image), x)
    assert ours.min() < (0 - 0.485) / 0.229  # bicubic overshoot is kept, as EDM2 keeps it


def test_features_are_edm2s_detector_with_the_hub_model() -> None:
    detector = load_detector(TINY)
    ours = detector.features(torch.tensor(HUB["images"]))
    np.testing.assert_allclose(ours, HUB["features"], atol=1e-5)
    # transformers' own position-embedding interpolation would move them
    from transformers import Dinov2Model

    plain = Dinov2Model.from_pretrained(TINY, local_files_only=True).eval()
    with torch.no_grad():
        theirs = plain(pixel_values=edm2_pixels(torch.tensor(HUB["images"]))).pooler_output
    assert np.abs(theirs.double().numpy() - np.array(HUB["features"])).max() > 1e-2


@dataclass
class InProcess:
    """The evaluator pool's calls answered by one evaluator in this process (no Ray)."""

    evaluator: Evaluator

    @property
    def setup(self) -> EvaluatorSetup:
        return self.evaluator.setup

    @property
    def actors(self) -> list[Evaluator]:
        return [self.evaluator]

    def call(self, method: str, *args):
        return getattr(self.evaluator, method)(*args)

    def solver_states(self, spec, checkpoint, seeds, metrics, desc):
        return self.evaluator.solver_states(spec, checkpoint, list(seeds), metrics)

    def image_states(self, images, metrics, desc):
        return self.evaluator.image_states(images, metrics)


def frechet_scipy(a: np.ndarray, b: np.ndarray) -> float:
    """‖μ_a − μ_b‖² + tr(Σ_a + Σ_b − 2 (Σ_a Σ_b)^{1/2}), Σ unbiased."""
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = scipy.linalg.sqrtm(sa @ sb).real
    return float(np.square(a.mean(0) - b.mean(0)).sum() + np.trace(sa + sb - 2 * root))


def test_an_evaluation_reports_it_against_teacher_samples(tmp_path: Path) -> None:
    options = {"fd_dinov2_weights": TINY}
    setup = EvaluatorSetup("digits", "", tmp_path, threads=1, batch_size=16, options=options)
    pool = InProcess(Evaluator(setup))
    spec, samples, reference = SolverSpec("euler", 3), 24, ReferenceSet("teacher", samples=24)
    report = evaluate_samples(pool, spec, None, samples, ("fd_dinov2",), reference)
    value = report.metrics()["fd_dinov2"]
    params = report.params()
    assert params["fd_dinov2.detector"].startswith("dinov2-16d:")
    assert params["fd_dinov2.reference"] == reference.describe()
    assert len(list(tmp_path.glob("reference-*.npz"))) == 1  # the teacher's moments, cached

    backbone, detector = pool.evaluator.backbone, load_detector(TINY)

    def features(solver_spec: SolverSpec, seeds: list[int]) -> np.ndarray:
        noise, cond = seed_noise(seeds, backbone.shape), backbone.conditioning(seeds)
        with torch.no_grad():
            images = backbone.decode(rollout(build(solver_spec, backbone), backbone, noise, cond))
        return detector.features(images.clamp(-1, 1))

    ours = features(spec, list(range(FID_FIRST_SEED, FID_FIRST_SEED + samples)))
    teacher = features(DEFAULT_TEACHER, reference.seeds())
    assert value == pytest.approx(frechet_scipy(ours, teacher), rel=1e-6)
    assert value > 0


def test_missing_weights_make_it_unavailable_with_the_file_and_how_to_get_it(tmp_path) -> None:
    metric = FdDinov2(FdDinov2Options(fd_dinov2_weights=tmp_path))
    setup = EvaluatorSetup("digits", "", tmp_path)
    with pytest.raises(MetricUnavailable) as caught:
        metric.measures(setup, None)
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "config.json") in message
    assert "hf download facebook/dinov2-large" in message and "fd_dinov2_weights" in message
    assert METRICS.get("fd_dinov2") is FdDinov2


def test_a_statistics_file_reference_needs_its_own_statistics(tmp_path: Path) -> None:
    fid_file = tmp_path / "cifar10-32x32.npz"
    np.savez(fid_file, mu=np.zeros(4), sigma=np.eye(4))
    setup = EvaluatorSetup("digits", "", tmp_path)
    reference = ReferenceSet.from_setting(str(fid_file))
    with pytest.raises(ReferenceStatisticsError, match="give fd_dinov2_statistics"):
        FdDinov2().check(setup, reference, None)
    own = tmp_path / "dinov2-16x16.npz"
    np.savez(own, mu=np.zeros(8), sigma=np.eye(8))  # 8-d: the network gives 16-d features
    metric = FdDinov2(FdDinov2Options(fd_dinov2_weights=TINY, fd_dinov2_statistics=own))
    backbone = Evaluator(setup).backbone
    with pytest.raises(ReferenceStatisticsError, match="holds 8-d features"):
        metric.check(setup, reference, backbone)
