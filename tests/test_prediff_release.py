"""PreDiff's released checkpoints through the documented options: a tiny fake clone of PreDiff's
repository (same package layout, class names, constructor arguments, config fields, state_dict
key form, and an `encode` that returns a distribution), its cfg.yaml and .pt state dicts; D(x, σ)
checked against a direct ε → x₀ computation on the same modules; PreDiff's knowledge-alignment
guidance loaded and configured (its step is checked against PreDiff's own code in
test_prediff_reference.py)."""

import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

from spanlift.backbones import latent_nowcast as module_under_test
from spanlift.backbones import load_backbone
from spanlift.cli.options import parse_settings
from spanlift.errors import CheckpointError, SettingsError
from tests.cli_run import spanlift
from tests.test_latent_nowcast import random_windows

SIZE, LATENT, FACTOR = 16, 3, 4  # frames 16×16 → latents 3 × 4×4 (two downsamplings)
SEEDS = [0, 1, 10**9 + 2]
PARTS = ("vae", "unet", "alignment")

UNET_ARGUMENTS = """input_shape, target_shape, base_units, scale_alpha, num_heads, attn_drop,
    proj_drop, ffn_drop, downsample, downsample_type, upsample_type, upsample_kernel_size, depth,
    block_attn_patterns, num_global_vectors, use_global_vector_ffn, use_global_self_attn,
    separate_global_qkv, global_dim_ratio, ffn_activation, gated_ffn, norm_layer, padding_type,
    checkpoint_level, pos_embed_type, use_relative_pos, self_attn_use_final_proj,
    attn_linear_init_mode, ffn_linear_init_mode, ffn2_linear_init_mode,
    attn_proj_linear_init_mode, conv_init_mode, down_linear_init_mode, up_linear_init_mode,
    global_proj_linear_init_mode, norm_init_mode, time_embed_channels_mult,
    time_embed_use_scale_shift_norm, time_embed_dropout, unet_res_connect"""
"""CuboidTransformerUNet's arguments as PreDiff's training script passes them (no defaults here,
so a missing or extra one fails)."""

FILES = {
    "prediff/__init__.py": "",
    "prediff/utils/__init__.py": "",
    "prediff/utils/distributions.py": """
        import torch

        class DiagonalGaussianDistribution:
            def __init__(self, parameters):
                self.mean, self.logvar = torch.chunk(parameters, 2, dim=1)

            def mode(self):
                return self.mean

            def sample(self):
                return self.mean + torch.exp(0.5 * self.logvar) * torch.randn_like(self.mean)
        """,
    "prediff/taming/__init__.py": "from .autoencoder_kl import AutoencoderKL\n",
    "prediff/taming/autoencoder_kl.py": """
        import torch
        from torch import nn
        from ..utils.distributions import DiagonalGaussianDistribution

        class Coder(nn.Module):
            def __init__(self, conv):
                super().__init__()
                self.conv_in = conv

            def forward(self, x):
                return self.conv_in(x)

        class AutoencoderKL(nn.Module):
            def __init__(self, in_channels=3, out_channels=3, down_block_types=(),
                         up_block_types=(), block_out_channels=(64,), layers_per_block=1,
                         act_fn="silu", latent_channels=4, norm_num_groups=32, sample_size=32,
                         scaling_factor=0.18215):
                super().__init__()
                f = 2 ** (len(block_out_channels) - 1)
                self.encoder = Coder(nn.Conv2d(in_channels, 2 * latent_channels, f, stride=f))
                self.decoder = Coder(nn.ConvTranspose2d(latent_channels, out_channels, f, stride=f))
                self.quant_conv = nn.Conv2d(2 * latent_channels, 2 * latent_channels, 1)
                self.post_quant_conv = nn.Conv2d(latent_channels, latent_channels, 1)

            def encode(self, x):
                return DiagonalGaussianDistribution(self.quant_conv(self.encoder(x)))

            def decode(self, z):
                return torch.sigmoid(self.decoder(self.post_quant_conv(z)))
        """,
    "prediff/models/__init__.py": "",
    "prediff/models/cuboid_transformer/__init__.py": (
        "from .cuboid_transformer_unet import CuboidTransformerUNet\n"
    ),
    "prediff/models/cuboid_transformer/cuboid_transformer_unet.py": f"""
        import warnings

        import torch
        from torch import nn

        class CuboidTransformerUNet(nn.Module):
            def __init__(self, {" ".join(UNET_ARGUMENTS.split())}):
                super().__init__()
                assert len(block_attn_patterns) == len(depth)
                warnings.warn(MESHGRID_WARNING, UserWarning)  # as PreDiff's cuboid attention
                channels = target_shape[-1]
                self.first_proj = nn.Conv3d(2 * channels, base_units, 3, padding=1)
                self.out_proj = nn.Conv3d(base_units, channels, 1)

            def forward(self, x, t, cond):
                inputs = torch.cat([x, cond[:, 1:]], dim=-1).permute(0, 4, 1, 2, 3)
                scale = 1 + 0.5 * torch.sin(t.float() / 7.0)[:, None, None, None, None]
                eps = self.out_proj(torch.tanh(self.first_proj(inputs))) * scale
                return eps.permute(0, 2, 3, 4, 1)

        MESHGRID_WARNING = (
            "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
            "argument. (Triggered internally at aten/src/ATen/native/TensorShape.cpp:4221.)"
        )
        """,
    "prediff/diffusion/__init__.py": "",
    "prediff/diffusion/knowledge_alignment/__init__.py": "",
    "prediff/diffusion/knowledge_alignment/models.py": """
        import torch
        from torch import nn

        class NoisyCuboidTransformerEncoder(nn.Module):
            def __init__(self, input_shape, out_channels=1, base_units=128, depth=(4, 4),
                         readout_seq=True, out_len=None, time_embed_channels_mult=4):
                super().__init__()
                self.first_proj = nn.Linear(input_shape[-1], base_units)
                self.out = nn.Linear(base_units, out_channels)

            def forward(self, x, t, *args, **kwargs):
                hidden = torch.tanh(self.first_proj(x)).mean(dim=(2, 3))  # b t units
                return self.out(hidden) * (1 + t.float()[:, None, None] / 1000)
        """,
}

CFG = f"""
layout: {{in_len: 7, out_len: 6, img_height: {SIZE}, img_width: {SIZE}, data_channels: 1,
  layout: NTHWC}}
model:
  diffusion:
    data_shape: [6, {SIZE}, {SIZE}, 1]
    beta_schedule: "linear"
    linear_start: 1e-4
    linear_end: 2e-2
    parameterization: "eps"
    latent_shape: [6, 4, 4, {LATENT}]
    cond_stage_model: "__is_first_stage__"
    scale_by_std: false
    scale_factor: 1.0
  align:
    alignment_type: "avg_x"
    guide_scale: 50.0
    model_type: "cuboid"
    model_args: {{input_shape: [6, 4, 4, {LATENT}], out_channels: 1, base_units: 8,
      depth: [1, 1], readout_seq: true, out_len: 6, time_embed_channels_mult: 4}}
    model_ckpt_path: "pretrained_sevirlr_alignment_avg_x_cuboid_v1.pt"
  latent_model:
    input_shape: [7, 4, 4, {LATENT}]
    target_shape: [6, 4, 4, {LATENT}]
    base_units: 8
    scale_alpha: 1.0
    num_heads: 4
    attn_drop: 0.1
    proj_drop: 0.1
    ffn_drop: 0.1
    downsample: 2
    downsample_type: "patch_merge"
    upsample_type: "upsample"
    upsample_kernel_size: 3
    depth: [4, 4]
    self_pattern: "axial"
    num_global_vectors: 0
    use_dec_self_global: false
    dec_self_update_global: true
    use_dec_cross_global: false
    use_global_vector_ffn: false
    use_global_self_attn: true
    separate_global_qkv: true
    global_dim_ratio: 1
    ffn_activation: "gelu"
    gated_ffn: false
    norm_layer: "layer_norm"
    padding_type: "zeros"
    pos_embed_type: "t+h+w"
    checkpoint_level: 0
    use_relative_pos: true
    self_attn_use_final_proj: true
    attn_linear_init_mode: "0"
    ffn_linear_init_mode: "0"
    ffn2_linear_init_mode: "2"
    attn_proj_linear_init_mode: "2"
    conv_init_mode: "0"
    down_up_linear_init_mode: "0"
    global_proj_linear_init_mode: "2"
    norm_init_mode: "0"
    time_embed_channels_mult: 4
    time_embed_use_scale_shift_norm: false
    time_embed_dropout: 0.0
    unet_res_connect: true
  vae:
    pretrained_ckpt_path: "pretrained_sevirlr_vae_8x8x64_v1.pt"
    data_channels: 1
    down_block_types: ['DownEncoderBlock2D', 'DownEncoderBlock2D', 'DownEncoderBlock2D']
    in_channels: 1
    block_out_channels: [8, 8, 8]
    act_fn: 'silu'
    latent_channels: {LATENT}
    up_block_types: ['UpDecoderBlock2D', 'UpDecoderBlock2D', 'UpDecoderBlock2D']
    norm_num_groups: 4
    layers_per_block: 2
    out_channels: 1
"""


@pytest.fixture
def release(tmp_path, monkeypatch):
    """A fake PreDiff clone in tmp_path/PreDiff (src layout), its cfg.yaml and state dicts; the
    modules themselves, built from that package, for the direct computation."""
    clone = tmp_path / "PreDiff"
    for name, source in FILES.items():
        path = clone / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    (tmp_path / "cfg.yaml").write_text(CFG)
    forget_prediff(monkeypatch)
    monkeypatch.syspath_prepend(str(clone / "src"))
    from prediff.diffusion.knowledge_alignment.models import NoisyCuboidTransformerEncoder
    from prediff.models.cuboid_transformer import CuboidTransformerUNet
    from prediff.taming import AutoencoderKL

    torch.manual_seed(0)
    unet_args = {name.strip(): None for name in UNET_ARGUMENTS.split(",")}
    unet_args |= {"target_shape": [6, 4, 4, LATENT], "base_units": 8, "depth": [4, 4]}
    unet_args["block_attn_patterns"] = ["axial"] * 2
    with pytest.warns(UserWarning, match="torch.meshgrid"):  # what PreDiff's classes print
        unet = CuboidTransformerUNet(**unet_args)
    modules = {
        "vae": AutoencoderKL(
            in_channels=1, out_channels=1, block_out_channels=[8, 8, 8], latent_channels=LATENT
        ),
        "unet": unet,
        "alignment": NoisyCuboidTransformerEncoder([6, 4, 4, LATENT], base_units=8),
    }
    files = {name: tmp_path / f"{name}.pt" for name in modules}
    for name, module in modules.items():
        torch.save(module.state_dict(), files[name])
        module.eval()
    options = {
        "code": str(clone),
        "cfg": str(tmp_path / "cfg.yaml"),
        **{name: str(path) for name, path in files.items()},
        "trust_code": "true",
    }
    yield modules, options
    forget_prediff(monkeypatch)


def forget_prediff(monkeypatch) -> None:
    for name in [n for n in sys.modules if n == "prediff" or n.startswith("prediff.")]:
        monkeypatch.delitem(sys.modules, name)


def load(monkeypatch, windows, options: dict[str, str]):
    """The backbone as `--backbone prediff --backbone-option KEY=VALUE …` builds it."""
    monkeypatch.setattr(module_under_test, "open_windows", lambda data, grid, split: windows)
    pairs = [f"{key}={value}" for key, value in options.items()]
    return load_backbone("prediff", data="unused", grid=SIZE, **parse_settings(pairs))


def schedule_table() -> tuple[np.ndarray, np.ndarray]:
    """β_t and ᾱ_t of PreDiff's linear schedule, written apart from the code under test."""
    betas = np.linspace(np.sqrt(1e-4), np.sqrt(2e-2), 1000) ** 2
    return betas, np.cumprod(1 - betas)


def direct_x0(modules, x, t, past):
    """x₀ = (z_t − √(1−ᾱ_t) ε)/√ᾱ_t with z_t = √ᾱ_t x, on the modules themselves (NTHWC)."""
    _, alphas_cumprod = schedule_table()
    abar = float(alphas_cumprod[t])
    n = len(x)
    z = (x * abar**0.5).reshape(n, 6, LATENT, 4, 4).permute(0, 1, 3, 4, 2)
    eps = modules["unet"](z, torch.full((n,), t, dtype=torch.long), past)
    x0 = (z - (1 - abar) ** 0.5 * eps) / abar**0.5
    return x0.permute(0, 1, 4, 2, 3).reshape(n, 6 * LATENT, 4, 4)


def posterior_mode_past(modules, windows) -> torch.Tensor:
    past = (windows.past(SEEDS) + 1) / 2  # PreDiff's [0, 1] scale
    mode = modules["vae"].encode(past.reshape(-1, 1, SIZE, SIZE)).mode()
    return mode.reshape(len(SEEDS), 7, LATENT, 4, 4).permute(0, 1, 3, 4, 2)


@torch.no_grad()
def test_released_state_dicts_load_and_d_is_the_eps_to_x0_step(release, monkeypatch):
    modules, options = release
    windows = random_windows(SIZE)
    without_alignment = {k: v for k, v in options.items() if k != "alignment"}
    backbone = load(monkeypatch, windows, without_alignment)
    assert backbone.shape == (6 * LATENT, 4, 4)
    cond = backbone.conditioning(SEEDS)
    torch.testing.assert_close(cond, posterior_mode_past(modules, windows))  # mode, scale 1.0
    x = torch.randn(len(SEEDS), *backbone.shape, generator=torch.Generator().manual_seed(1))
    _, alphas_cumprod = schedule_table()
    for t in (0, 37, 500, 999):
        sigma = float(np.sqrt((1 - alphas_cumprod[t]) / alphas_cumprod[t]))
        expected = direct_x0(modules, x, t, cond)
        torch.testing.assert_close(
            backbone.denoise(x, torch.tensor(sigma), cond), expected, rtol=1e-4, atol=1e-5
        )
    frames = backbone.decode(x)
    decoded = modules["vae"].decode(x.reshape(-1, LATENT, 4, 4)) * 2 - 1
    torch.testing.assert_close(frames, decoded.reshape(len(SEEDS), 6, SIZE, SIZE))


@torch.no_grad()
def test_knowledge_alignment_guides_with_the_configs_scale_and_the_windows_target(
    release, monkeypatch
):
    """The guided step itself is checked against PreDiff's p_sample in test_prediff_reference.py."""
    modules, options = release
    windows = random_windows(SIZE)
    guided = load(monkeypatch, windows, options)
    assert guided.guidance.guide_scale == 50.0  # the config's model.align.guide_scale
    cond = guided.conditioning(SEEDS)
    past, knowledge = cond[:, :7], cond[:, 7]
    target = 2.0 * ((windows.future(SEEDS).double() + 1) / 2).flatten(1).mean(1)
    torch.testing.assert_close(knowledge, target.float()[:, None, None, None].expand_as(knowledge))
    x = torch.randn(len(SEEDS), *guided.shape, generator=torch.Generator().manual_seed(2))
    _, alphas_cumprod = schedule_table()
    sigma = float(np.sqrt((1 - alphas_cumprod[250]) / alphas_cumprod[250]))
    actual = guided.denoise(x, torch.tensor(sigma), cond)
    assert not torch.allclose(actual, direct_x0(modules, x, 250, past), atol=1e-4)
    weaker = load(monkeypatch, windows, {**options, "guide_scale": "3"})
    assert weaker.guidance.guide_scale == 3.0 and weaker.identity() != guided.identity()
    off = load(monkeypatch, windows, {**options, "guide_scale": "0"})
    assert off.guidance is None and off.conditioning(SEEDS).shape[1] == 7
    torch.testing.assert_close(
        off.denoise(x, torch.tensor(sigma), cond[:, :7]),
        direct_x0(modules, x, 250, past),
        rtol=1e-4,
        atol=1e-5,
    )


@torch.no_grad()
def test_lightning_checkpoints_with_the_module_prefix_load_the_same(release, monkeypatch, tmp_path):
    modules, options = release
    windows = random_windows(SIZE)
    for name, prefix in (("unet", "torch_nn_module."), ("vae", "first_stage_model.")):
        state = {prefix + key: value for key, value in modules[name].state_dict().items()}
        state["model_ema.decay"] = torch.tensor(0.999)  # other parts of the LightningModule
        torch.save({"epoch": 3, "state_dict": state}, tmp_path / f"{name}.ckpt")
    plain = load(monkeypatch, windows, {k: v for k, v in options.items() if k != "alignment"})
    lightning_plain = {k: v for k, v in options.items() if k != "alignment"}
    lightning_plain |= {"unet": tmp_path / "unet.ckpt", "vae": tmp_path / "vae.ckpt"}
    lightning = load(monkeypatch, windows, lightning_plain)
    cond = plain.conditioning(SEEDS)
    x = torch.randn(len(SEEDS), *plain.shape, generator=torch.Generator().manual_seed(3))
    sigma = torch.tensor([0.1, 1.0, 30.0])
    torch.testing.assert_close(lightning.denoise(x, sigma, cond), plain.denoise(x, sigma, cond))


def test_building_prediffs_classes_keeps_torchs_meshgrid_warning_off_the_console(
    release, monkeypatch
):
    """PreDiff's cuboid attention calls torch.meshgrid without `indexing`, which makes torch warn
    (two lines on the console, once per process); the fake clone's U-Net warns the same way."""
    _, options = release
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load(monkeypatch, random_windows(SIZE), options)
    assert not [w for w in caught if "torch.meshgrid" in str(w.message)]


def save_like_prediffs_training_module(modules, path) -> None:
    """`trainer.save_checkpoint` of a LightningModule laid out as PreDiff's training module
    (scripts/prediff/sevirlr/train_sevirlr_prediff.py): its config saved as an omegaconf DictConfig
    hyper-parameter, the parts under `torch_nn_module`, `first_stage_model`, `alignment_model`."""
    import lightning.pytorch as pl
    import yaml
    from omegaconf import OmegaConf

    class PreDiffModule(pl.LightningModule):
        def __init__(self, oc) -> None:
            super().__init__()
            self.save_hyperparameters(oc)
            self.torch_nn_module = modules["unet"]
            self.first_stage_model = modules["vae"]
            self.cond_stage_model = self.first_stage_model  # cond_stage_model: __is_first_stage__
            self.alignment_model = modules["alignment"]

    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.strategy.connect(PreDiffModule(OmegaConf.create(yaml.safe_load(CFG))))
    trainer.save_checkpoint(path)


@torch.no_grad()
def test_a_checkpoint_saved_by_prediffs_lightning_module_loads(release, monkeypatch, tmp_path):
    modules, options = release
    checkpoint = tmp_path / "prediff.ckpt"
    save_like_prediffs_training_module(modules, checkpoint)
    windows = random_windows(SIZE)
    plain = load(monkeypatch, windows, options)
    lightning = load(monkeypatch, windows, options | dict.fromkeys(PARTS, checkpoint))
    cond = plain.conditioning(SEEDS)
    x = torch.randn(len(SEEDS), *plain.shape, generator=torch.Generator().manual_seed(4))
    sigma = torch.tensor([0.1, 1.0, 30.0])
    torch.testing.assert_close(lightning.denoise(x, sigma, cond), plain.denoise(x, sigma, cond))


class Payload:
    """An object a weights-only load must not build."""

    def __reduce__(self):
        return (print, ("code from the checkpoint ran",))


def test_unreadable_checkpoints_are_refused_in_one_line(release, monkeypatch, tmp_path, capsys):
    modules, options = release
    windows = random_windows(SIZE)
    state = {f"torch_nn_module.{k}": v for k, v in modules["unet"].state_dict().items()}
    refused = {
        "code.pt": {"state_dict": {**state, "torch_nn_module.extra": Payload()}},
        "text.pt": "not a checkpoint",
    }
    for name, content in refused.items():
        torch.save(content, tmp_path / name)
    (tmp_path / "garbage.pt").write_bytes(b"PK\x03\x04 not a zip archive")
    for name in (*refused, "garbage.pt"):
        with pytest.raises(CheckpointError) as refusal:
            load(monkeypatch, windows, {**options, "unet": tmp_path / name})
        assert name in str(refusal.value) and "\n" not in str(refusal.value), str(refusal.value)
    assert "code from the checkpoint ran" not in capsys.readouterr().out


def test_bad_release_options_name_what_to_pass(release, monkeypatch, tmp_path):
    _, options = release
    windows = random_windows(SIZE)
    with pytest.raises(CheckpointError, match="trust_code=true"):
        load(monkeypatch, windows, {**options, "trust_code": "false"})
    with pytest.raises(CheckpointError, match=r"missing_vae\.pt.*vae=<file>"):
        load(monkeypatch, windows, {**options, "vae": tmp_path / "missing_vae.pt"})
    with pytest.raises(CheckpointError, match=r"unet checkpoint .* does not fit"):
        load(monkeypatch, windows, {**options, "unet": options["vae"]})
    (tmp_path / "v.yaml").write_text(CFG.replace('parameterization: "eps"', "parameterization: v"))
    with pytest.raises(SettingsError, match="parameterization is 'v'"):
        load(monkeypatch, windows, {**options, "cfg": tmp_path / "v.yaml"})
    with pytest.raises(SettingsError, match="code=<PreDiff clone>"):
        load(monkeypatch, windows, {k: v for k, v in options.items() if k != "code"})


@pytest.mark.e2e
def test_nowcast_eval_takes_the_prediff_backbone_and_refuses_untrusted_code(release, tmp_path):
    _, options = release
    (tmp_path / "data").mkdir()
    flags = [
        item
        for key, value in options.items()
        if key != "trust_code"
        for item in ("--backbone-option", f"{key}={value}")
    ]
    result = spanlift(
        tmp_path, "nowcast", "eval", "--data", "data", "--backbone", "prediff", *flags
    )
    assert result.returncode == 2, result.stderr
    assert "trust_code=true" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
