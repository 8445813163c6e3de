"""The latent models' loss (`loss: latent`): c · latent MSE + DINOv2 feature MSE of the decoded
images, on a tiny DINOv2 saved to a local folder; its options from sweep files and the command
line; and fits without loss options keep their identity."""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from spanlift.cli import parser
from spanlift.cli.fit import fit_settings
from spanlift.errors import CheckpointError, SettingsError
from spanlift.platform.configuration import Configuration
from spanlift.platform.fitting.dinov2 import IMAGENET_MEAN, IMAGENET_STD, load_dinov2
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.fitting.losses import LOSSES
from spanlift.platform.sweep.config import SweepConfigError, parse_sweep
from spanlift.solvers import SolverSpec, build_solver

transformers = pytest.importorskip("transformers")

LATENT = (2, 4, 40, 49)  # decoded as is: 40 × 49 → shorter side 32 → 32 × 39 → crop 28 × 28


@pytest.fixture(scope="module")
def dinov2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer DINOv2 with a DINOv2-style image processor (shorter side, then crop)."""
    folder = tmp_path_factory.mktemp("dinov2")
    torch.manual_seed(0)
    config = transformers.Dinov2Config(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2, image_size=28
    )
    transformers.Dinov2Model(config).save_pretrained(folder)
    processor = transformers.BitImageProcessor(
        size={"shortest_edge": 32},
        crop_size={"height": 28, "width": 28},
        image_mean=list(IMAGENET_MEAN),
        image_std=list(IMAGENET_STD),
    )
    processor.save_pretrained(folder)
    return folder


def decode(z: torch.Tensor) -> torch.Tensor:
    """A fixed stand-in decoder: latents (N, 4, H, W) → RGB images (N, 3, H, W) in (−1, 1)."""
    weight = torch.linspace(-1, 1, 12).reshape(3, 4, 1, 1)
    return torch.tanh(F.conv2d(z, weight))


def latents(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(LATENT, generator=g)
    return target + 0.5 * torch.randn(LATENT, generator=g), target


def reference_features(folder: Path, images: torch.Tensor) -> torch.Tensor:
    """DINOv2's pooler output on the images as the Hugging Face processor prepares them."""
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    model = transformers.Dinov2Model.from_pretrained(folder, local_files_only=True).eval()
    pixels = ((images.clamp(-1, 1) + 1) / 2).detach()
    inputs = processor(images=list(pixels), do_rescale=False, return_tensors="pt")
    with torch.no_grad():
        return model(pixel_values=inputs["pixel_values"]).pooler_output


def test_loss_equals_latent_mse_plus_the_processors_dinov2_features(dinov2: Path) -> None:
    student, target = latents(0)
    loss = LOSSES.get("latent")(decode, dinov2_path=str(dinov2), c=0.3)(student, target)
    features = reference_features(dinov2, decode(student))
    target_features = reference_features(dinov2, decode(target))
    expected = 0.3 * (student - target).square().mean()
    expected += (features - target_features).square().mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


def test_grayscale_channels_are_images_of_their_own(dinov2: Path) -> None:
    frames = torch.rand(2, 5, 30, 30) * 2 - 1  # e.g. a nowcast's frames
    features = load_dinov2(dinov2)(frames)
    rgb = frames.reshape(10, 1, 30, 30).expand(-1, 3, -1, -1)
    assert features.shape == (10, 16)
    torch.testing.assert_close(features, reference_features(dinov2, rgb), rtol=1e-5, atol=1e-6)


def test_without_a_processor_config_images_are_resized_to_224_and_normalised(tmp_path) -> None:
    config = transformers.Dinov2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    transformers.Dinov2Model(config).save_pretrained(tmp_path)
    gray = torch.zeros(1, 3, 40, 49)  # 0 in [−1, 1]: 0.5 in [0, 1]
    pixels = load_dinov2(tmp_path).pixel_values(gray)
    assert pixels.shape == (1, 3, 224, 224)
    expected = (0.5 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    torch.testing.assert_close(pixels.mean(dim=(0, 2, 3)), expected)


def test_gradients_reach_the_student_and_not_the_target(dinov2: Path) -> None:
    student, target = latents(1)
    student.requires_grad_(True)
    target.requires_grad_(True)
    loss_fn = LOSSES.get("latent")(decode, dinov2_path=str(dinov2), c=0.0)  # features alone
    loss_fn(student, target).backward()
    assert torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0
    assert not target.grad.any()  # c = 0 leaves only the features, taken without gradient
    assert loss_fn(target, target).item() == pytest.approx(0.0, abs=1e-10)


def test_c_weighs_the_latent_mse(dinov2: Path) -> None:
    student, target = latents(2)
    without = LOSSES.get("latent")(decode, dinov2_path=str(dinov2), c=0.0)(student, target)
    default = LOSSES.get("latent")(decode, dinov2_path=str(dinov2))(student, target)
    latent_mse = (student - target).square().mean()
    assert latent_mse > 0.1
    torch.testing.assert_close(default - without, 0.1 * latent_mse)


def test_a_missing_folder_names_it_and_where_it_comes_from(tmp_path) -> None:
    missing = tmp_path / "dinov2-base"
    with pytest.raises(CheckpointError, match=r"not found: .*dinov2-base; .*facebook/dinov2-base"):
        LOSSES.get("latent")(decode, dinov2_path=str(missing))


def test_a_folder_without_a_model_is_refused(tmp_path) -> None:
    with pytest.raises(CheckpointError, match=r"holds no DINOv2 model .*facebook/dinov2-base") as e:
        load_dinov2(tmp_path)
    assert "\n" not in str(e.value)


def test_without_transformers_the_error_names_the_extra(dinov2: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SettingsError, match=r"pip install 'spanlift\[diffusers\]'"):
        load_dinov2(dinov2)


@pytest.mark.parametrize(
    ("loss", "options", "message"),
    [
        ("mse", {"c": 0.1}, "loss 'mse' has no option 'c'; it takes no options"),
        ("latent", {"dinov2_path": "x", "w": 1}, "no option 'w'; its options are: dinov2_path, c"),
        ("latent", {"c": 0.1}, "loss 'latent' needs the option 'dinov2_path'"),
    ],
)
def test_options_a_loss_does_not_take_or_needs_are_refused(loss, options, message) -> None:
    with pytest.raises(SettingsError, match=message):
        FitSettings(loss=loss, loss_options=options)


@pytest.mark.parametrize("c", [-0.1, "much", True, float("inf")])
def test_a_bad_weight_is_refused(dinov2: Path, c) -> None:
    with pytest.raises(SettingsError, match="option c must be a number ≥ 0"):
        LOSSES.get("latent")(decode, dinov2_path=str(dinov2), c=c)


def test_a_fit_passes_its_loss_options_to_the_loss(gmm, gmm_teacher, dinov2: Path) -> None:
    solver = build_solver(SolverSpec("dyweight", 3), gmm.sigma_min, gmm.sigma_max, gmm.shape[0])
    options = {"dinov2_path": str(dinov2), "c": 0.5}
    settings = FitSettings(iterations=3, batch_size=4, loss="latent", loss_options=options)
    losses = fit(solver, gmm, gmm_teacher[0], settings, progress=False).losses
    assert len(losses) == 3 and all(loss > 0 for loss in losses)
    with pytest.raises(CheckpointError, match="DINOv2 folder not found"):
        missing = FitSettings(loss="latent", loss_options={"dinov2_path": str(dinov2 / "x")})
        fit(solver, gmm, gmm_teacher[0], missing, progress=False)


SWEEP = {
    "experiment": "t",
    "backbone": "gmm",
    "fit": {"loss": "latent", "loss_options": {"dinov2_path": "models/dinov2-base", "c": 0.2}},
    "solvers": [
        {"name": "dyweight", "nfe": 3},
        {"name": "dyweight", "nfe": 3, "fit": {"loss_options": {"dinov2_path": "../d2"}}},
        {"name": "dyweight", "nfe": 3, "fit": {"loss": "mse"}},
    ],
}


def test_a_sweep_resolves_relative_dinov2_paths_against_its_folder(tmp_path) -> None:
    config = parse_sweep(SWEEP, "s.yaml", tmp_path)
    assert config.fit.loss_options == {
        "dinov2_path": str(tmp_path / "models/dinov2-base"),
        "c": 0.2,
    }
    fits = [config.fit_of(entry) for entry in config.solvers]
    assert fits[0] == config.fit
    assert fits[1].loss_options == {"dinov2_path": str((tmp_path / "../d2").resolve())}
    assert (fits[2].loss, fits[2].loss_options) == ("mse", {})  # options belong to their loss
    assert config.as_dict()["fit"]["loss_options"]["c"] == 0.2


def test_a_sweep_with_a_bad_loss_option_names_its_key() -> None:
    bad = {**SWEEP, "fit": {"loss": "latent", "loss_options": {"dinov2": "x"}}}
    with pytest.raises(SweepConfigError, match=r"s.yaml: fit: loss 'latent' has no option"):
        parse_sweep(bad, "s.yaml")
    bad = {**SWEEP, "fit": {"loss": "latent", "loss_options": "x"}}
    with pytest.raises(SweepConfigError, match=r"fit: fit setting loss_options must be a mapping"):
        parse_sweep(bad, "s.yaml")


def test_the_command_line_reads_repeated_loss_options() -> None:
    command = ["fit", "--solver", "dyweight", "--nfe", "3", "--loss", "latent"]
    args = parser().parse_args([*command, "--loss-option", "dinov2_path=d", "--loss-option", "c=1"])
    assert fit_settings(args).loss_options == {"dinov2_path": "d", "c": 1}
    assert fit_settings(parser().parse_args(command[:-2])).loss_options == {}
    with pytest.raises(SettingsError, match="--loss-option expects key=value, got 'c'"):
        fit_settings(parser().parse_args([*command, "--loss-option", "c"]))


PLAIN_FIT = {
    "iterations": 300,
    "batch_size": 32,
    "lr": 5e-3,
    "warmup": 20,
    "grad_clip": 1.0,
    "loss": "mse",
    "target": "teacher",
    "seed": 0,
    "log_every": 25,
    "checkpoint_every": 50,
    "weight_decay": 0.0,
    "validation": 0.1,
    "validate_every": 25,
}
"""A fit's identity without loss options: the keys of stored checkpoints and runs hash this.
(The held-out split and weight decay entered it on purpose: they change what a fit keeps.)"""


def fit_key(fit: FitSettings) -> str:
    solver = SolverSpec("dyweight", 3)
    return Configuration("gmm", {}, solver, {"train": "t"}, fit=fit.to_dict()).fit_key()


def test_fits_without_loss_options_keep_their_identity() -> None:
    plain = FitSettings()
    assert plain.to_dict() == PLAIN_FIT
    assert (
        fit_key(plain)
        == Configuration(
            "gmm", {}, SolverSpec("dyweight", 3), {"train": "t"}, fit=PLAIN_FIT
        ).fit_key()
    )
    plain_sweep = parse_sweep(SWEEP | {"fit": {}, "solvers": SWEEP["solvers"][:1]})
    assert plain_sweep.as_dict()["fit"] == PLAIN_FIT
    assert FitSettings(**plain.to_dict()) == plain


def test_loss_options_are_part_of_a_fits_identity() -> None:
    first = FitSettings(loss="latent", loss_options={"dinov2_path": "/d"})
    second = FitSettings(loss="latent", loss_options={"dinov2_path": "/e"})
    assert first.to_dict()["loss_options"] == {"dinov2_path": "/d"}
    assert fit_key(first) != fit_key(second)
    assert FitSettings(**first.to_dict()) == first and hash(first) == hash(second)  # hashable
