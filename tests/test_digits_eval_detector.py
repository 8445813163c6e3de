"""The `digits_eval` detector: trained well on its own split, features unlike the `digits`
detector's (which the digits feature loss fits in), FIDs that behave, and the digits backbone's
default FID detector. (Its FID equals torch-fidelity's with its registered extractor:
test_digits_detector.py, for both digits detectors.)"""

from pathlib import Path

import numpy as np
import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.cli import main
from spanlift.errors import CheckpointError, UnknownNameError
from spanlift.platform.detectors import digits_detector
from spanlift.platform.detectors.digits_classifier import load_classifier
from spanlift.platform.detectors.digits_eval_detector import SPEC
from spanlift.platform.detectors.registry import feature_size, load_detector
from spanlift.platform.detectors.train_digits_detector import accuracy, split, split_indices
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance

HELD_OUT_ACCURACY = 0.97  # of the committed weights on this detector's 360 held-out digits


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return split(SPEC)


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    return load_backbone("digits").reference_images()


def test_split_swaps_the_digits_detectors_parts() -> None:
    train, held_out = split_indices(SPEC)
    first_train, first_held_out = split_indices(digits_detector.SPEC)
    assert len(held_out) == len(first_held_out) == 360 and len(train) == 1437
    assert set(held_out.tolist()).isdisjoint(first_held_out.tolist())
    assert set(held_out.tolist()) <= set(first_train.tolist())  # trained on by `digits`
    assert set(first_held_out.tolist()) <= set(train.tolist())  # and the other way round


def test_committed_detector_classifies_its_held_out_digits(data) -> None:
    _, _, test_x, test_y = data
    held_out = accuracy(load_classifier(SPEC), test_x, test_y)
    assert held_out > HELD_OUT_ACCURACY
    stored = torch.load(SPEC.weights, weights_only=True)["train"]
    assert held_out == pytest.approx(stored["test_accuracy"], abs=1e-6)  # the one trained
    assert (stored["seed"], stored["held_out"], stored["split_seed"]) == (1, "first", 0)


def test_features_are_not_the_digits_detectors(digits, tmp_path: Path) -> None:
    ours = load_detector("digits_eval", tmp_path).features(digits)
    theirs = load_detector("digits", tmp_path).features(digits)
    assert ours.shape == (len(digits), feature_size("digits_eval")) == (len(digits), 96)
    assert theirs.shape[1] == feature_size("digits") == 64
    # The best linear map from the `digits` features explains only part of ours (R² 1 if they
    # were the same network up to a linear map); fitted on half of the digits, scored on the rest.
    half = len(digits) // 2
    design = np.hstack([theirs, np.ones((len(theirs), 1))])
    weights, *_ = np.linalg.lstsq(design[:half], ours[:half], rcond=None)
    residual = ours[half:] - design[half:] @ weights
    r2 = 1 - residual.var(axis=0).sum() / ours[half:].var(axis=0).sum()
    assert r2 < 0.95, r2  # 0.87 with the committed weights


def test_fid_of_the_digits_against_themselves_is_zero_and_against_noise_large(
    digits, tmp_path: Path
) -> None:
    detector = load_detector("digits_eval", tmp_path)
    reference = FeatureMoments.of(detector.features(digits))
    assert abs(frechet_distance(reference, reference)) < 1e-6
    noise = torch.randn(digits.shape, generator=torch.Generator().manual_seed(0)).clamp(-1, 1)
    assert frechet_distance(FeatureMoments.of(detector.features(noise)), reference) > 50  # 160


def test_digits_backbone_scores_fid_with_digits_eval(tmp_path: Path) -> None:
    assert load_backbone("digits").fid_detector == "digits_eval"
    evaluator = Evaluator(EvaluatorSetup("digits", "", tmp_path, threads=1))
    assert evaluator.identity().startswith("digits_eval:")
    assert load_detector("digits", tmp_path).identity.startswith("digits:")  # still by name


def test_unknown_detector_lists_both_digits_detectors(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="expected one of: digits, digits_eval, inception"):
        load_detector("digits-eval", tmp_path)
    with pytest.raises(UnknownNameError, match="expected one of: digits, digits_eval, inception"):
        feature_size("lenet")


def test_missing_or_foreign_weights_name_the_file_and_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(
        CheckpointError,
        match=r"digits_eval detector weights not found: .*absent\.pt; create them with "
        r"`spanlift train-digits-detector --detector digits_eval --out",
    ):
        load_detector("digits_eval", tmp_path, tmp_path / "absent.pt")
    with pytest.raises(CheckpointError, match=r"cannot read digits_eval detector weights .*"):
        load_detector("digits_eval", tmp_path, digits_detector.SPEC.weights)  # the other network


def test_cli_trains_the_chosen_detector(tmp_path: Path, capsys) -> None:
    out = tmp_path / "eval.pt"
    args = ["train-digits-detector", "--detector", "digits_eval", "--steps", "3", "--out", str(out)]
    assert main(args) == 0
    assert f"wrote {out} (held-out accuracy" in capsys.readouterr().out
    detector = load_detector("digits_eval", tmp_path, out)
    assert (
        detector.identity.startswith("digits_eval:")
        and detector.identity != load_detector("digits_eval", tmp_path).identity
    )
    train = torch.load(out, weights_only=True)["train"]
    assert (train["steps"], train["seed"], train["held_out"]) == (3, 1, "first")
