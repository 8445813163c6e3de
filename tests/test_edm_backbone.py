"""The `edm` backbone on EDM-style pickles of a tiny network: the opt-in, the code path, EDM's
labels per seed, EDM's own sampling protocol (Heun to σ = 0, NFE 35), a fit, FID and every bad
input's message."""

import pickle
from pathlib import Path

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.backbones.base import conditioned
from spanlift.errors import CheckpointError, SettingsError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.base import NFECounter
from tests.cli_run import spanlift
from tests.edm_package import forget_edm_code, write_edm_code, write_edm_pickle


@pytest.fixture(scope="module")
def edm_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("edm")
    code = write_edm_code(root / "edm")
    return {
        "code": code,
        "uncond": write_edm_pickle(code, root / "edm-tiny-8x8-uncond.pkl"),
        "cond": write_edm_pickle(code, root / "edm-tiny-8x8-cond.pkl", label_dim=5, seed=1),
        "no_ema": write_edm_pickle(code, root / "no-ema.pkl", key="net"),
    }


@pytest.fixture
def fresh_imports(edm_files):
    """Each test starts as a process that never imported the EDM code."""
    forget_edm_code(edm_files["code"])
    yield
    forget_edm_code(edm_files["code"])


def edm(edm_files, which: str = "uncond", **options):
    return load_backbone(
        "edm",
        weights=str(edm_files[which]),
        allow_pickle=True,
        code=str(edm_files["code"]),
        **options,
    )


def edm_heun_to_zero(denoise, latents, steps=18, sigma_min=0.002, sigma_max=80.0, rho=7.0):
    """EDM's deterministic sampler (Karras et al. 2022, Algorithm 1): Heun on the EDM grid of
    `steps` points, then σ = 0; no second-order correction on the step to 0. float64."""
    i = torch.arange(steps, dtype=torch.float64)
    t = (
        sigma_max ** (1 / rho) + i / (steps - 1) * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))
    ) ** rho
    t = torch.cat([t, torch.zeros(1, dtype=torch.float64)])
    x = latents.double() * t[0]
    for k in range(steps):
        d = (x - denoise(x, t[k])) / t[k]
        x_next = x + (t[k + 1] - t[k]) * d
        if k < steps - 1:
            d_next = (x_next - denoise(x_next, t[k + 1])) / t[k + 1]
            x_next = x + (t[k + 1] - t[k]) * (d + d_next) / 2
        x = x_next
    return x


def test_loading_needs_the_opt_in_and_the_edm_code(edm_files, fresh_imports) -> None:
    with pytest.raises(CheckpointError, match=r"needs the module 'torch_utils'.*code=<a clone"):
        load_backbone("edm", weights=str(edm_files["uncond"]), allow_pickle=True)
    with pytest.raises(CheckpointError, match=r"is a pickle .* pass allow_pickle=true"):
        load_backbone("edm", weights=str(edm_files["uncond"]), code=str(edm_files["code"]))
    backbone = edm(edm_files)
    assert backbone.shape == (3, 8, 8)
    assert (backbone.sigma_min, backbone.sigma_max) == (0.002, 80.0)
    assert backbone.conditioning([0, 1]) is None


def test_denoiser_is_the_networks_own_call(edm_files, fresh_imports) -> None:
    backbone = edm(edm_files, "cond")
    x = torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    labels = backbone.conditioning([0, 1, 2])
    sigma = torch.tensor(2.5, dtype=torch.float64)  # one 0-d σ for the batch, as EDM's sampler
    expected = backbone.net(x, sigma, labels)
    assert torch.equal(backbone.denoise(x, sigma, labels), expected)
    assert not torch.equal(backbone.net(x, sigma.repeat(3), labels), expected)  # rounds otherwise
    per_sample = torch.tensor([0.5, 2.5, 40.0])
    assert torch.equal(backbone.denoise(x, per_sample, labels), backbone.net(x, per_sample, labels))
    other = torch.eye(5)[(labels.argmax(1) + 1) % 5]
    assert not torch.allclose(backbone.denoise(x, sigma, other), expected)  # labels reach it
    with pytest.raises(SettingsError, match="class-conditional"):
        backbone.denoise(x, sigma)


def test_labels_are_edms_per_seed_draws(edm_files, fresh_imports) -> None:
    backbone = edm(edm_files, "cond")
    seeds = [0, 7, 123, 2_000_000_005]
    expected = []
    for seed in seeds:  # EDM's generate.py: the seed's generator draws the latents, then a label
        generator = torch.Generator().manual_seed(seed % 2**32)
        torch.randn(3, 8, 8, generator=generator)
        expected.append(torch.randint(5, (1,), generator=generator).item())
    labels = backbone.conditioning(seeds)
    assert labels.shape == (4, 5) and torch.equal(labels.sum(1), torch.ones(4))
    assert labels.argmax(1).tolist() == expected
    assert torch.equal(backbone.conditioning(seeds[::-1]), labels.flip(0))  # a function of the seed
    fixed = edm(edm_files, "cond", class_label=3).conditioning(seeds)
    assert fixed.argmax(1).tolist() == [3] * 4


def test_heun_35_on_edm_to_zero_is_edms_own_sampler(edm_files, fresh_imports) -> None:
    backbone = edm(edm_files, "cond")
    seeds = [0, 1, 2, 3]
    noise, labels = seed_noise(seeds, backbone.shape).double(), backbone.conditioning(seeds)
    denoise = conditioned(backbone, labels)
    solver = build_solver(
        SolverSpec("heun", 35, "edm_to_zero"), backbone.sigma_min, backbone.sigma_max, 3
    )
    counter = NFECounter(denoise)
    ours = solver(counter, backbone.prior(noise))
    assert counter.calls == 35 and solver.num_steps == 18
    reference = edm_heun_to_zero(lambda x, t: backbone.net(x, t, labels).double(), noise)
    assert torch.equal(ours, reference)  # bit for bit: the network is called as EDM calls it
    ends_at_sigma_min = build_solver(SolverSpec("heun", 35), 0.002, 80.0, 3)(denoise, noise * 80)
    assert (ends_at_sigma_min - reference).abs().max() > 1e-4  # the two protocols differ


def test_a_fit_on_cached_teacher_endpoints_with_labels_lowers_its_loss(edm_files, fresh_imports):
    backbone = edm(edm_files, "cond")
    teacher = generate_teacher(backbone, range(32), SolverSpec("heun", 9), progress=False)
    assert torch.equal(teacher.cond, backbone.conditioning(range(32)))
    spec = SolverSpec("spanlift", 3, settings={"base": "dyweight", "hidden_dim": 8})
    solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, 3)
    result = fit(
        solver,
        backbone,
        teacher,
        FitSettings(iterations=30, batch_size=8, lr=1e-2, warmup=2),
        progress=False,
    )
    assert sum(result.losses[-5:]) / 5 < 0.8 * sum(result.losses[:5]) / 5


@pytest.mark.parametrize(
    ("which", "options", "error", "message"),
    [
        ("missing", {}, CheckpointError, r"EDM network pickle not found: .*nvlabs-fi-cdn"),
        ("no_ema", {}, CheckpointError, r"has no 'ema' network"),
        ("uncond", {"resolution": 32}, SettingsError, r"resolution=32, but .* generates 8×8"),
        ("cond", {"class_label": 5}, SettingsError, r"class_label must be an integer in \[0, 4\]"),
        ("uncond", {"class_label": 0}, SettingsError, r"the network is unconditional"),
        ("uncond", {"fp16": "yes"}, SettingsError, r"fp16 must be true or false"),
        ("uncond", {"size": 3}, SettingsError, r"has no option 'size'; its options: weights"),
    ],
)
def test_bad_input_names_what_is_wrong(
    edm_files, fresh_imports, tmp_path, which, options, error, message
) -> None:
    files = {**edm_files, "missing": tmp_path / "edm-cifar10-32x32-uncond-vp.pkl"}
    with pytest.raises(error, match=message):
        edm(files, which, **options)


def test_a_pickle_that_is_not_a_snapshot(tmp_path, fresh_imports) -> None:
    path = tmp_path / "list.pkl"
    path.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(CheckpointError, match=r"has no 'ema' network.*got list"):
        load_backbone("edm", weights=str(path), allow_pickle=True)


@pytest.mark.e2e
def test_cli_lists_it_fits_and_scores_fid_and_refuses_bad_input(edm_files, tmp_path) -> None:
    listed = spanlift(tmp_path, "backbones")
    assert listed.returncode == 0
    assert "edm " in listed.stdout and "allow_pickle=true" in listed.stdout
    options = [
        *("--backbone", "edm"),
        *("--backbone-option", f"weights={edm_files['cond']}"),
        *("--backbone-option", "allow_pickle=true"),
        *("--backbone-option", f"code={edm_files['code']}"),
    ]
    fitted = spanlift(
        tmp_path, "fit", *options, "--solver", "dyweight", "--nfe", "3", "--iterations", "5",
        "--train-samples", "16", "--test-samples", "8", "--batch-size", "8", "--no-tracking",
    )  # fmt: skip
    assert fitted.returncode == 0, fitted.stderr
    assert "dyweight" in fitted.stdout and "checkpoint:" in fitted.stdout
    scored = spanlift(
        tmp_path, "eval", *options, "--solver", "heun", "--nfe", "35", "--schedule", "edm_to_zero",
        "--metrics", "fid", "--samples", "8", "--reference", "teacher", "--reference-samples", "8",
        "--evaluators", "1", "--no-tracking", "--num-cpus", "2",
        timeout=600,
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    assert "fid " in scored.stdout and "detector inception" in scored.stdout
    refused = spanlift(tmp_path, "fit", *options[:4], "--solver", "euler", "--nfe", "3")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("pass allow_pickle=true if you trust it")
    assert len(refused.stderr.strip().splitlines()) == 1
