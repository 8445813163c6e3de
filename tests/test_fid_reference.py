"""FID against a reference-statistics file: NVlabs' published `.npz` (mu, sigma) or spanlift's own,
checked against an independent SciPy computation; every bad file refused with one line; the
`spanlift eval --reference FILE` command end to end on the digits backbone."""

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch

from spanlift.backbones import load_backbone
from spanlift.cli import main
from spanlift.errors import ReferenceStatisticsError, SpanliftError
from spanlift.files import file_sha256
from spanlift.platform import run_eval
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics.fid import FidResult, file_moments, reference_moments
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance
from spanlift.platform.evaluation.metrics.reference import (
    NVLABS_STATISTICS,
    ReferenceSet,
    read_statistics,
    save_reference,
)
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.sweep.config import SweepConfigError, parse_sweep
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec
from tests.cli_run import spanlift

SPEC = SolverSpec("euler", nfe=3)
SAMPLES = 80  # more than the digits detector's 64 features: full-rank covariances


def nvlabs_statistics(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """μ and Σ as NVlabs EDM's `fid.py` (`calculate_inception_stats`) accumulates them."""
    n = len(features)
    mu = features.sum(axis=0)
    sigma = features.T @ features
    mu = mu / n
    sigma = (sigma - np.outer(mu, mu) * n) / (n - 1)
    return mu, sigma


def nvlabs_fid(
    mu: np.ndarray, sigma: np.ndarray, mu_ref: np.ndarray, sigma_ref: np.ndarray
) -> float:
    """NVlabs EDM's `calculate_fid_from_inception_stats`, with SciPy's matrix square root."""
    root = scipy.linalg.sqrtm(sigma @ sigma_ref)
    return float(np.real(np.square(mu - mu_ref).sum() + np.trace(sigma + sigma_ref - 2 * root)))


def write_nvlabs(path: Path, mu: np.ndarray, sigma: np.ndarray, **extra: object) -> Path:
    np.savez(path, mu=mu, sigma=sigma, **extra)
    return path


@pytest.fixture
def random_statistics() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample features, and reference μ, Σ at Inception-like scale (mean ≫ spread)."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(500, 32)) @ rng.normal(size=(32, 32)) * 0.2 + 0.4
    mixing = rng.normal(size=(32, 32))
    return features, rng.uniform(0.2, 0.8, size=32), 0.05 * mixing @ mixing.T


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> EvaluatorSetup:
    return EvaluatorSetup("digits", "digits", tmp_path_factory.mktemp("cache"), threads=1)


@pytest.fixture(scope="module")
def evaluator(setup: EvaluatorSetup) -> Evaluator:
    return Evaluator(setup)


def test_fid_from_an_nvlabs_file_equals_their_scipy_formula(random_statistics, tmp_path) -> None:
    features, mu_ref, sigma_ref = random_statistics
    path = write_nvlabs(tmp_path / "ref.npz", mu_ref, sigma_ref)
    moments = read_statistics(path).moments
    assert np.allclose(moments.mean(), mu_ref, rtol=1e-15, atol=0)
    assert np.allclose(moments.covariance(), sigma_ref, rtol=1e-12, atol=1e-14)
    fid = frechet_distance(FeatureMoments.of(features), moments)
    mu, sigma = features.mean(axis=0), np.cov(features, rowvar=False)
    assert fid == pytest.approx(nvlabs_fid(mu, sigma, mu_ref, sigma_ref), rel=1e-9)
    assert fid > 1  # the two differ


def test_nvlabs_covariance_is_the_unbiased_one_spanlift_uses(random_statistics) -> None:
    features, _, _ = random_statistics
    mu, sigma = nvlabs_statistics(features)
    moments = FeatureMoments.of(features)
    assert np.allclose(sigma, np.cov(features, rowvar=False), rtol=1e-12, atol=1e-14)
    assert np.allclose(moments.covariance(), sigma, rtol=1e-12, atol=1e-14)
    assert abs(frechet_distance(moments, FeatureMoments.from_statistics(mu, sigma, 1000))) < 1e-9


def test_fid_of_samples_against_a_file_of_their_own_statistics_is_zero(
    evaluator, setup, tmp_path
) -> None:
    seeds = list(range(FID_FIRST_SEED, FID_FIRST_SEED + SAMPLES))
    own = evaluator.solver_states(SPEC, None, seeds, ("fid",))["fid"]
    mu = own.total / own.count
    sigma = (own.outer - own.count * np.outer(mu, mu)) / (own.count - 1)
    path = write_nvlabs(tmp_path / "digits-16x16.npz", mu, sigma)
    no_actors = EvaluatorPool(setup, [])  # a file reference is read on the driver
    reference = reference_moments(no_actors, ReferenceSet.from_setting(str(path)), "digits:x")
    assert abs(frechet_distance(own, reference)) < 1e-6
    dataset = evaluator.image_states(evaluator.backbone.reference_images(), ("fid",))["fid"]
    assert frechet_distance(own, dataset) > 1  # a real distance where the sets differ


def test_spanlift_statistics_files_are_accepted_as_references(evaluator, setup, tmp_path) -> None:
    dataset = evaluator.image_states(evaluator.backbone.reference_images(), ("fid",))["fid"]
    path = save_reference(tmp_path / "mine.npz", dataset, evaluator.identity())
    loaded = file_moments(path, setup, evaluator.backbone, evaluator.identity())
    assert loaded.count == dataset.count and np.array_equal(loaded.outer, dataset.outer)


def spanlift_file(path: Path) -> Path:
    return save_reference(path, FeatureMoments.of(np.eye(64)), "inception:0123456789ab")


BAD_FILES = [
    (lambda folder: folder / "cifar10-32x32.npz", f"not found (.*{NVLABS_STATISTICS})"),
    (lambda folder: folder / "x.npz", "not an .npz file"),
    (
        lambda f: write_nvlabs(f / "x.npz", np.zeros(64), np.eye(63)),
        r"expected \(D,\) and \(D, D\)",
    ),
    (lambda f: np.savez(f / "x.npz", mean=np.zeros(64)) or f / "x.npz", "expected arrays mu and"),
    (
        lambda f: write_nvlabs(f / "inception.npz", np.zeros(2048), np.eye(2048)),
        "holds 2048-d features; detector digits gives 64-d features",
    ),
    (
        lambda f: write_nvlabs(f / "cifar10-32x32.npz", np.zeros(64), np.eye(64)),
        "is for 32x32 images \\(by its name\\); the backbone makes 16x16 images",
    ),
    (
        lambda f: write_nvlabs(f / "x.npz", np.zeros(64), np.eye(64), resolution=64),
        "is for 64x64 images \\(by its resolution entry\\)",
    ),
    (lambda f: spanlift_file(f / "x.npz"), "computed with detector inception:0123456789ab"),
]


@pytest.mark.parametrize(("write", "message"), BAD_FILES)
def test_bad_reference_files_are_refused_with_one_line(setup, tmp_path, write, message) -> None:
    (tmp_path / "x.npz").write_text("not a zip archive")
    path = write(tmp_path)
    with pytest.raises(ReferenceStatisticsError, match=message) as error:
        file_moments(path, setup, load_backbone("digits"), "digits:aaaaaaaaaaaa")
    assert isinstance(error.value, SpanliftError) and "\n" not in str(error.value)
    assert path.name in str(error.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("absent.npz", f"absent.npz not found .*{NVLABS_STATISTICS}"),
        ("cifar10-32x32.npz", "is for 32x32 images"),
    ],
)
def test_eval_refuses_a_bad_reference_before_starting(
    tmp_path, monkeypatch, capsys, name, message
) -> None:
    monkeypatch.chdir(tmp_path)
    write_nvlabs(tmp_path / "cifar10-32x32.npz", np.zeros(64), np.eye(64))  # 64-d: `digits`
    args = ["--reference", name, "--samples", "8", "--detector", "digits"]
    code = main(["eval", "--solver", "euler", "--nfe", "3", *args])
    err = capsys.readouterr().err
    assert code == 2 and re.search(message, err) and "Traceback" not in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.e2e
def test_eval_against_a_statistics_file_end_to_end(evaluator, tmp_path) -> None:
    dataset = evaluator.image_states(evaluator.backbone.reference_images(), ("fid",))["fid"]
    path = write_nvlabs(tmp_path / "digits-16x16.npz", dataset.mean(), dataset.covariance())
    seeds = list(range(FID_FIRST_SEED, FID_FIRST_SEED + SAMPLES))
    expected = frechet_distance(
        evaluator.solver_states(SPEC, None, seeds, ("fid",))["fid"], dataset
    )
    result = spanlift(
        tmp_path, "eval", "--solver", "euler", "--nfe", "3", "--reference", path.name,
        "--samples", str(SAMPLES), "--evaluators", "1", "--num-cpus", "2", "--no-tracking",
        "--detector", "digits",  # the statistics' detector, not the backbone's `digits_eval`
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    fid = float(re.search(r"^fid ([0-9.]+) ", result.stdout, re.MULTILINE).group(1))
    assert fid == pytest.approx(expected, abs=1e-3)
    described = f"file digits-16x16.npz sha256:{file_sha256(path)[:16]}"  # names file and content
    assert f"{SAMPLES} samples against {described};" in result.stdout
    reference = ReferenceSet.from_setting(str(path)).describe()
    assert FidResult(fid, SAMPLES, "digits:x", reference).params()["fid.reference"] == described


def test_default_samples_are_the_papers_50k_on_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run_eval.default_samples() == 50_000
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_eval.default_samples() == 10_000


def test_sweep_reference_file_is_relative_to_the_sweep_file(tmp_path) -> None:
    (tmp_path / "stats").mkdir()
    write_nvlabs(tmp_path / "stats" / "digits-16x16.npz", np.zeros(64), np.eye(64))
    sweep = {"experiment": "t", "backbone": "digits", "solvers": [{"name": "euler", "nfe": 3}]}
    evaluation = {"metrics": ["fid"], "reference": "stats/digits-16x16.npz"}
    config = parse_sweep({**sweep, "evaluation": evaluation}, "s.yaml", tmp_path)
    assert config.evaluation.reference == str(tmp_path / "stats" / "digits-16x16.npz")
    evaluation["reference"] = "stats/absent.npz"
    with pytest.raises(
        SweepConfigError,
        match=r"s\.yaml: evaluation\.reference: FID reference .*absent\.npz not found",
    ):
        parse_sweep({**sweep, "evaluation": evaluation}, "s.yaml", tmp_path)
