"""The digits FID detector: trained well, a torch-fidelity extractor, FIDs that order sensibly."""

from pathlib import Path

import pytest
import torch
import torch_fidelity
from torch.utils.data import Dataset

from spanlift.errors import CheckpointError, UnknownNameError
from spanlift.platform.detectors.digits_classifier import load_classifier
from spanlift.platform.detectors.digits_detector import SPEC
from spanlift.platform.detectors.digits_eval_detector import SPEC as EVAL_SPEC
from spanlift.platform.detectors.images import to_uint8_rgb
from spanlift.platform.detectors.registry import load_detector
from spanlift.platform.detectors.train_digits_detector import accuracy, split
from spanlift.platform.evaluation.metrics.frechet import FeatureMoments, frechet_distance


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return split(SPEC)


def test_committed_detector_classifies_held_out_digits(data) -> None:
    _, _, test_x, test_y = data
    held_out = accuracy(load_classifier(SPEC), test_x, test_y)
    assert held_out > 0.95
    stored = torch.load(SPEC.weights, weights_only=True)["train"]["test_accuracy"]
    assert held_out == pytest.approx(stored, abs=1e-6)  # the checkpoint is the one trained


class Pixels(Dataset):
    """uint8 images as torch-fidelity reads a dataset."""

    def __init__(self, images: torch.Tensor) -> None:
        self.pixels = to_uint8_rgb(images)

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.pixels[i]


@pytest.mark.parametrize("spec", [SPEC, EVAL_SPEC], ids=lambda spec: spec.name)
def test_fid_matches_torch_fidelity_with_the_registered_extractor(spec, tmp_path: Path) -> None:
    train_x, _, test_x, _ = split(spec)
    detector = load_detector(spec.name, tmp_path)
    ours = frechet_distance(
        FeatureMoments.of(detector.features(test_x)), FeatureMoments.of(detector.features(train_x))
    )
    theirs = torch_fidelity.calculate_metrics(
        input1=Pixels(test_x),
        input2=Pixels(train_x),
        fid=True,
        feature_extractor=spec.extractor,  # spanlift-digits, spanlift-digits-eval
        cuda=False,
        cache=False,
        save_cpu_ram=True,  # no DataLoader worker processes
        verbose=False,
    )["frechet_inception_distance"]
    assert ours == pytest.approx(theirs, rel=1e-4)


def test_fid_orders_real_digits_before_corrupted_ones(data, tmp_path: Path) -> None:
    train_x, _, test_x, _ = data
    detector = load_detector("digits", tmp_path)
    reference = FeatureMoments.of(detector.features(train_x))
    generator = torch.Generator().manual_seed(0)

    def fid(images: torch.Tensor) -> float:
        return frechet_distance(FeatureMoments.of(detector.features(images)), reference)

    noisy = (test_x + 0.5 * torch.randn(test_x.shape, generator=generator)).clamp(-1, 1)
    blank = torch.full_like(test_x, -1.0) + 0.01 * torch.randn(test_x.shape, generator=generator)
    assert fid(test_x) < fid(noisy) < fid(blank)


def test_identity_names_detector_and_weights(tmp_path: Path) -> None:
    detector = load_detector("digits", tmp_path)
    assert detector.identity.startswith("digits:") and len(detector.identity) == len("digits:") + 12


def test_missing_or_corrupt_detector_weights_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(
        CheckpointError,
        match=r"weights not found: .*absent\.pt; create them with `spanlift train-digits-detector",
    ):
        load_detector("digits", tmp_path, tmp_path / "absent.pt")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"cannot read digits detector weights .*corrupt\.pt"):
        load_detector("digits", tmp_path, corrupt)


def test_unknown_detector_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="expected one of: digits, digits_eval, inception"):
        load_detector("lenet", tmp_path)
