"""The prediff backbone against numbers PreDiff's own code printed (tests/fixtures/prediff_reference.npz).

The fixture was written by running PreDiff's `LatentDiffusion` (src/prediff/diffusion/
latent_diffusion.py of github.com/gaozhihan/PreDiff at 0703a619) with the stand-in networks of
test_prediff_release.py's fake clone, whose weights it stores: `cond_stage_forward` on the past
frames of two windows and `decode_first_stage` of fixed latents (at scale_factor 1.0 and 0.5),
and one ancestral step `p_sample(z_t, zc, t, y)` at t = 999, 500, 100 and 10, without and with
`use_alignment` (the alignment function is `SEVIRAvgIntensityAlignment(guide_scale=50)
.get_mean_shift`, knowledge `avg_x_gt` from its SEVIR script's `get_alignment_kwargs_avg_x`),
each window alone (batch size 1), with the noise it drew. The fixture's `note` says the same.

Here the same step is taken from the backbone's D(x, σ_t) (its x₀ prediction, guided ε̃ inside):
z_{t−1} = c₁(t)·D + c₂(t)·z_t + σ̃_t·noise, the DDPM posterior of Ho et al. (2020, eq. 7)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.test_prediff_release import CFG, LATENT, load, release  # noqa: F401 (fixture)

REFERENCE = np.load(Path(__file__).parent / "fixtures" / "prediff_reference.npz")
SEEDS = [10**9, 10**9 + 1]  # the fixture's two test windows


@pytest.fixture
def reference_release(request):
    """The fake clone's options with the fixture's weights in its state-dict files."""
    _, options = request.getfixturevalue("release")
    for part in ("unet", "vae", "alignment"):
        prefix = f"{part}."
        state = {
            key.removeprefix(prefix): torch.from_numpy(REFERENCE[key])
            for key in REFERENCE.files
            if key.startswith(prefix)
        }
        torch.save(state, options[part])
    return options


def reference_windows():
    from spanlift.backbones.nowcast_windows import NowcastWindows

    return NowcastWindows(torch.from_numpy(REFERENCE["train"]), torch.from_numpy(REFERENCE["test"]))


def ancestral_step(denoised: torch.Tensor, z_t: torch.Tensor, noise: torch.Tensor, t: int):
    """The DDPM posterior step from the x₀ prediction `denoised` (NTHWC), in float64 tables."""
    betas = np.linspace(np.sqrt(1e-4), np.sqrt(2e-2), 1000) ** 2
    alphas_cumprod = np.cumprod(1 - betas)
    previous = alphas_cumprod[t - 1] if t > 0 else 1.0
    c1 = betas[t] * np.sqrt(previous) / (1 - alphas_cumprod[t])
    c2 = (1 - previous) * np.sqrt(1 - betas[t]) / (1 - alphas_cumprod[t])
    sigma = np.sqrt(max(betas[t] * (1 - previous) / (1 - alphas_cumprod[t]), 1e-20))
    return c1 * denoised + c2 * z_t + (sigma if t > 0 else 0.0) * noise


def backbone_step(backbone, z_t: torch.Tensor, noise: torch.Tensor, t: int, cond: torch.Tensor):
    """One ancestral step of the backbone's (guided) model from z_t (N, 6, h, w, c)."""
    alphas_cumprod = np.cumprod(1 - np.linspace(np.sqrt(1e-4), np.sqrt(2e-2), 1000) ** 2)
    abar = float(alphas_cumprod[t])
    n = len(z_t)
    x = (z_t / abar**0.5).permute(0, 1, 4, 2, 3).reshape(n, 6 * LATENT, 4, 4)
    sigma = torch.tensor(((1 - abar) / abar) ** 0.5)
    denoised = backbone.denoise(x, sigma, cond)
    denoised = denoised.reshape(n, 6, LATENT, 4, 4).permute(0, 1, 3, 4, 2)
    return ancestral_step(denoised, z_t, noise, t)


@torch.no_grad()
def test_one_aligned_ancestral_step_is_prediffs_p_sample(reference_release, monkeypatch):
    windows = reference_windows()
    guided = load(monkeypatch, windows, reference_release)
    plain = load(
        monkeypatch, windows, {k: v for k, v in reference_release.items() if k != "alignment"}
    )
    cond = guided.conditioning(SEEDS)
    torch.testing.assert_close(
        cond[:, 7, 0, 0, 0], torch.from_numpy(REFERENCE["avg_x_gt"][:, 0]), rtol=1e-6, atol=1e-6
    )  # the knowledge target, PreDiff's avg_x_gt
    for t in REFERENCE["steps"].tolist():
        z_t, noise = (torch.from_numpy(REFERENCE[f"{name}{t}"]) for name in ("z_t", "noise_t"))
        aligned, unaligned = (
            torch.from_numpy(REFERENCE[f"{name}_t{t}"]) for name in ("aligned", "unaligned")
        )
        unguided = backbone_step(plain, z_t, noise, t, cond[:, :7])
        torch.testing.assert_close(unguided, unaligned, rtol=1e-4, atol=2e-5)
        step = backbone_step(guided, z_t, noise, t, cond)
        torch.testing.assert_close(
            step, aligned, rtol=1e-4, atol=2e-5, msg=lambda m, t=t: f"t={t}: {m}"
        )
        shift = (aligned - unaligned).flatten(1).norm(dim=1)
        assert (shift > 100 * 2e-5).all()  # the guidance moves the step well beyond tolerance


@torch.no_grad()
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_conditioning_and_decoding_are_prediffs_at_any_scale_factor(
    reference_release, monkeypatch, tmp_path, scale
):
    """PreDiff encodes its conditioning with the VAE's posterior mode and no scale_factor
    (`cond_stage_forward`); the latents it generates are divided by it before decoding
    (`decode_first_stage`)."""
    config = tmp_path / f"scale{scale}.yaml"
    config.write_text(CFG.replace("scale_factor: 1.0", f"scale_factor: {scale}"))
    backbone = load(
        monkeypatch,
        reference_windows(),
        {k: v for k, v in reference_release.items() if k != "alignment"} | {"cfg": config},
    )
    expected = torch.from_numpy(REFERENCE[f"cond_scale{scale}"])
    torch.testing.assert_close(backbone.conditioning(SEEDS), expected, rtol=1e-5, atol=1e-6)
    latents = torch.from_numpy(REFERENCE["z_decode"])  # (N, 6, h, w, c)
    x = latents.permute(0, 1, 4, 2, 3).reshape(len(latents), 6 * LATENT, 4, 4)
    decoded = torch.from_numpy(REFERENCE[f"decoded_scale{scale}"])[..., 0]  # [0, 1]
    torch.testing.assert_close(backbone.decode(x), 2 * decoded - 1, rtol=1e-5, atol=1e-6)
