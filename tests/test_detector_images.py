"""The EDM image protocol and the offline Inception detector inside torch-fidelity."""

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x

from spanlift.errors import CheckpointError, SettingsError
from spanlift.platform.detectors.images import to_uint8_rgb
from spanlift.platform.detectors.inception import (
    inception_detector,
    inception_weights,
    torchscript_path,
)
from spanlift.platform.detectors.registry import load_detector


def test_protocol_maps_like_edm_generate() -> None:
    x = torch.tensor([-1.2, -1.0, -0.5, 0.0, 0.999, 1.0, 1.3]).reshape(1, 1, 1, 7)
    expected = np.clip(x.numpy() * 127.5 + 128, 0, 255).astype(np.uint8)  # EDM's own expression
    pixels = to_uint8_rgb(x)
    assert pixels.dtype == torch.uint8 and pixels.shape == (1, 3, 1, 7)
    assert (pixels.numpy() == expected).all()  # grayscale repeated over 3 channels
    assert pixels[0, 0, 0].tolist() == [0, 0, 64, 128, 255, 255, 255]


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (torch.zeros(2, 3, 8, 8, dtype=torch.uint8), "expected a float tensor"),
        (torch.zeros(3, 8, 8), r"expected shape \[N, 1 or 3, H, W\]"),
        (torch.zeros(2, 4, 8, 8), r"got \(2, 4, 8, 8\)"),
        (torch.full((1, 3, 4, 4), float("nan")), "NaN"),
        (torch.full((1, 3, 4, 4), 255.0), r"rescale images in \[0, 1\] or \[0, 255\]"),
    ],
)
def test_bad_images_are_refused_with_the_reason(images, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        to_uint8_rgb(images)


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return inception_weights(tmp_path_factory.mktemp("detectors"))


def test_converted_detector_matches_the_torchscript(weights: Path) -> None:
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    detector = load_detector("inception", weights.parent, weights)
    features = detector.features(images)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.load(str(torchscript_path()), map_location="cpu").eval()
    # The TorchScript takes what torch-fidelity feeds its first convolution: resized, in [-1, 1).
    pixels = to_uint8_rgb(images).double()
    resized = interpolate_bilinear_2d_like_tensorflow1x(
        pixels, size=(299, 299), align_corners=False
    )
    with torch.no_grad():
        expected = scripted(((resized - 128) / 128).float()).double().numpy()
    assert features.shape == (3, 2048)
    assert np.abs(features - expected).max() < 1e-5 * np.abs(expected).max()


def test_inception_features_on_a_cpu_come_in_small_batches_and_equal_one_call(
    weights: Path,
) -> None:
    """Inception runs fastest on a CPU 16 images at a time; the chunking changes no feature."""
    images = torch.rand(18, 3, 32, 32, generator=torch.Generator().manual_seed(1)) * 2 - 1
    detector = load_detector("inception", weights.parent, weights)
    assert detector.cpu_batch == 16
    chunked = detector.features(images)
    whole = replace(detector, cpu_batch=None).features(images)
    assert chunked.shape == whole.shape == (18, 2048)
    assert np.abs(chunked - whole).max() < 1e-5 * np.abs(whole).max()


def test_conversion_is_cached_by_source_hash(weights: Path) -> None:
    before = weights.stat().st_mtime_ns
    assert inception_weights(weights.parent) == weights
    assert weights.stat().st_mtime_ns == before
    assert weights.name.startswith("inception-edm-") and not list(weights.parent.glob("*.partial*"))


def test_missing_weights_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"absent\.pth not found"):
        inception_detector(tmp_path / "absent.pth")
