"""Backbones: the exact GMM denoiser against Tweedie's formula, digits weights and their errors."""

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from spanlift.backbones import load_backbone, loaded
from spanlift.backbones.digits import DEFAULT_WEIGHTS, digits_dataset
from spanlift.backbones.train_digits import train_digits
from spanlift.errors import CheckpointError

from .conftest import noise_like


def log_density(gmm, x: np.ndarray, sigma: float) -> float:
    """log p_σ(x) of the noised mixture, written with SciPy."""
    means = gmm.means.double().flatten(1).numpy()
    variances = gmm.variances.double().numpy() + sigma**2
    weights = gmm.log_weights.double().numpy()
    terms = [
        w + multivariate_normal(m, v).logpdf(x)
        for w, m, v in zip(weights, means, variances, strict=True)
    ]
    return float(logsumexp(terms))


@pytest.mark.parametrize("sigma", [0.05, 0.3, 2.0])
def test_gmm_denoiser_satisfies_tweedie(gmm64, sigma):
    """D(x, σ) = x + σ² ∇ log p_σ(x), the gradient by central differences."""
    x = gmm64.sample_data(1, torch.Generator().manual_seed(1)) + sigma * noise_like(
        gmm64, 1, 2, torch.float64
    )
    flat = x.flatten().numpy()
    eps = 1e-5
    grad = np.array(
        [
            (log_density(gmm64, flat + eps * e, sigma) - log_density(gmm64, flat - eps * e, sigma))
            / (2 * eps)
            for e in np.eye(len(flat))
        ]
    )
    denoised = gmm64.denoise(x, torch.tensor(sigma, dtype=torch.float64)).flatten().numpy()
    np.testing.assert_allclose(denoised, flat + sigma**2 * grad, atol=1e-6)


def test_committed_digits_weights_denoise_digits():
    digits = load_backbone("digits")
    clean = digits_dataset()[:64]
    noisy = clean + 0.5 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        denoised = digits.denoise(noisy, torch.tensor(0.5))
    assert (denoised - clean).square().mean() < 0.25 * (noisy - clean).square().mean()
    assert digits.to_images(denoised).dtype == torch.uint8 and digits.to_images(denoised).shape == (
        64,
        16,
        16,
        1,
    )


def test_missing_digits_weights_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(CheckpointError, match=r"nothing\.pt.*spanlift train-digits"):
        load_backbone("digits", weights=tmp_path / "nothing.pt")


def test_corrupt_digits_weights(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(DEFAULT_WEIGHTS.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"bad\.pt"):
        load_backbone("digits", weights=bad)


def test_training_command_writes_loadable_weights(tmp_path):
    path = train_digits(tmp_path / "digits.pt", steps=2, batch_size=8)
    backbone = load_backbone("digits", weights=path)
    assert backbone.identity() != load_backbone("digits").identity()


def test_a_process_loads_each_backbone_once_and_keeps_the_two_last_used() -> None:
    before = loaded.backbone_loads()
    first = loaded.loaded_backbone("gmm", {"seed": 11})
    assert loaded.loaded_backbone("gmm", {"seed": 11}) is first  # the process's copy
    assert loaded.backbone_loads() == before + 1
    loaded.loaded_backbone("gmm", {"seed": 12})
    loaded.loaded_backbone("gmm", {"seed": 11})  # the most recently used stays
    loaded.loaded_backbone("gmm", {"seed": 13})  # a third: seed 12 goes
    assert loaded.backbone_loads() == before + 3
    loaded.loaded_backbone("gmm", {"seed": 12})
    assert loaded.backbone_loads() == before + 4
