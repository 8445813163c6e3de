"""PreDiff's released checkpoints (Gao et al., NeurIPS 2023), built with PreDiff's own code.

PreDiff publishes plain state_dict files and the `cfg.yaml` they were trained with
(`scripts/prediff/sevirlr/prediff_sevirlr_v1.yaml` in its repository):

    vae        pretrained_sevirlr_vae_8x8x64_v1.pt               prediff.taming.AutoencoderKL
    unet       pretrained_sevirlr_earthformerunet_v1.pt          prediff.models.cuboid_transformer
                                                                   .CuboidTransformerUNet
    alignment  pretrained_sevirlr_alignment_avg_x_cuboid_v1.pt   prediff.diffusion.knowledge_alignment
                                                                   .models.NoisyCuboidTransformerEncoder

Each class is built from its `cfg.yaml` section exactly as PreDiff's training script does
(`model.vae`, `model.latent_model`, `model.align.model_args`) and the file loaded into it with
`load_state_dict` (weights only; torch.load never unpickles code). A Lightning checkpoint of
PreDiff's training module works too, one file for every part: its `state_dict` entry is read
and the prefix of the part (`torch_nn_module.`, `first_stage_model.`, `alignment_model.`)
removed; what else it holds (its omegaconf config in `hyper_parameters`) is read as inert
placeholders (checkpoint_tensors.py). Importing PreDiff's package runs code from
the user's clone, so it needs `trust_code=true`.

What the diffusion section must say (anything else is refused with the field named):
`parameterization: eps`, `beta_schedule: linear` (β = linspace(√linear_start, √linear_end, T)²),
and the latent scale `scale_factor` (PreDiff's 1.0, not AutoencoderKL's 0.18215): the generated
latents are divided by it before decoding, as in PreDiff's `decode_first_stage`; the
conditioning (the posterior mode of the past frames) is not scaled, as in its
`cond_stage_forward`.
"""

import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from torch import Tensor, nn

from spanlift.backbones.checkpoint_tensors import Placeholder, load_tensors, reason
from spanlift.backbones.nowcast_windows import INPUTS, OUTPUTS
from spanlift.backbones.pickles import make_importable
from spanlift.errors import CheckpointError, SettingsError

VAE_CLASS = ("prediff.taming", "AutoencoderKL")
UNET_CLASS = ("prediff.models.cuboid_transformer", "CuboidTransformerUNet")
ALIGNMENT_CLASS = ("prediff.diffusion.knowledge_alignment.models", "NoisyCuboidTransformerEncoder")

VAE_FIELDS = (
    "down_block_types", "in_channels", "block_out_channels", "act_fn", "latent_channels",
    "up_block_types", "norm_num_groups", "layers_per_block", "out_channels",
)  # fmt: skip
"""`model.vae` fields passed to AutoencoderKL, as PreDiff's training script passes them."""

UNET_FIELDS = (
    "input_shape", "target_shape", "base_units", "scale_alpha", "num_heads", "attn_drop",
    "proj_drop", "ffn_drop", "downsample", "downsample_type", "upsample_type",
    "upsample_kernel_size", "depth", "num_global_vectors", "use_global_vector_ffn",
    "use_global_self_attn", "separate_global_qkv", "global_dim_ratio", "ffn_activation",
    "gated_ffn", "norm_layer", "padding_type", "checkpoint_level", "pos_embed_type",
    "use_relative_pos", "self_attn_use_final_proj", "attn_linear_init_mode",
    "ffn_linear_init_mode", "ffn2_linear_init_mode", "attn_proj_linear_init_mode",
    "conv_init_mode", "global_proj_linear_init_mode", "norm_init_mode",
    "time_embed_channels_mult", "time_embed_use_scale_shift_norm", "time_embed_dropout",
    "unet_res_connect",
)  # fmt: skip
"""`model.latent_model` fields passed to CuboidTransformerUNet under their own names; the script
also maps `self_pattern` → `block_attn_patterns` (one per block) and `down_up_linear_init_mode`
→ `down_linear_init_mode` and `up_linear_init_mode`."""

PREFIXES = {
    "vae": "first_stage_model.",
    "unet": "torch_nn_module.",
    "alignment": "alignment_model.",
}
"""Where each part sits in PreDiff's LightningModule (the keys of its Lightning checkpoints)."""

DIFFUSION_DEFAULTS = {"timesteps": 1000, "scale_factor": 1.0}
"""PreDiff's defaults (`get_model_config`) for fields its released cfg.yaml leaves out."""

TRUST_HINT = "pass trust_code=true if you trust that clone"

MESHGRID_WARNING = r"torch\.meshgrid: in an upcoming release"
"""What torch says (two lines, once per process) when PreDiff's cuboid attention calls
torch.meshgrid without `indexing` (its default, "ij", is what PreDiff means); not for the user."""


@dataclass(frozen=True)
class Schedule:
    """The diffusion section: T, β_start, β_end (linear in √β) and the latent scale."""

    timesteps: int
    linear_start: float
    linear_end: float
    scale_factor: float


@dataclass
class PreDiffRelease:
    """The parts of a released PreDiff, built and loaded (CPU, eval mode)."""

    unet: nn.Module
    autoencoder: "PosteriorModeAutoencoder"
    schedule: Schedule
    alignment: nn.Module | None
    guide_scale: float


class PosteriorModeAutoencoder(nn.Module):
    """PreDiff's VAE with the interface of `latent_nowcast`: encode → the posterior mode (the
    distribution's `.mode()`, unscaled, as PreDiff's `cond_stage_forward` encodes its
    conditioning), decode(z / scale) (as its `decode_first_stage` decodes generated latents)."""

    def __init__(self, vae: nn.Module, scale_factor: float) -> None:
        super().__init__()
        self.vae, self.scale_factor = vae, scale_factor

    def encode(self, frames: Tensor) -> Tensor:
        posterior = self.vae.encode(frames)
        return posterior.mode() if hasattr(posterior, "mode") else posterior

    def decode(self, latents: Tensor) -> Tensor:
        decoded = self.vae.decode(latents / self.scale_factor)
        return getattr(decoded, "sample", decoded)  # diffusers' DecoderOutput or a tensor


def load_release(
    code: str | Path,
    cfg: str | Path,
    vae: str | Path,
    unet: str | Path,
    alignment: str | Path | None,
    trust_code: object,
    guide_scale: float | None,
) -> PreDiffRelease:
    """Build PreDiff's classes from `cfg` with the package in `code` and load each file."""
    if trust_code is not True:
        raise CheckpointError(
            f"building PreDiff's model imports and runs the code in {code}: {TRUST_HINT}"
        )
    config = read_config(Path(cfg))
    make_importable(package_root(Path(code)), "prediff")
    schedule = diffusion_schedule(config, Path(cfg))
    vae_module = build(VAE_CLASS, vae_kwargs(section(config, "model.vae", cfg)), code)
    unet_module = build(UNET_CLASS, unet_kwargs(section(config, "model.latent_model", cfg)), code)
    load_part(vae_module, Path(vae), "vae")
    load_part(unet_module, Path(unet), "unet")
    align = section(config, "model.align", cfg) if alignment is not None else {}
    alignment_module = None
    if alignment is not None:
        args = dict(align.get("model_args") or {})
        alignment_module = build(ALIGNMENT_CLASS, args, code)
        load_part(alignment_module, Path(alignment), "alignment")
    scale = float(align.get("guide_scale", 1.0)) if guide_scale is None else float(guide_scale)
    autoencoder = PosteriorModeAutoencoder(vae_module, schedule.scale_factor)
    return PreDiffRelease(unet_module, autoencoder, schedule, alignment_module, scale)


def package_root(code: Path) -> Path:
    """The folder that holds the `prediff` package: `<clone>/src` in PreDiff's layout."""
    return code / "src" if (code / "src" / "prediff").is_dir() else code


def read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(
            f"PreDiff config not found: {path}; pass cfg=<the cfg.yaml the checkpoints were "
            f"trained with, e.g. scripts/prediff/sevirlr/prediff_sevirlr_v1.yaml of the clone>"
        )
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SettingsError(f"PreDiff config {path} is not YAML: {exc}".splitlines()[0]) from None
    if not isinstance(config, dict):
        raise SettingsError(f"PreDiff config {path} is not a mapping of sections")
    return config


def section(config: Mapping[str, Any], dotted: str, cfg: str | Path) -> dict[str, Any]:
    node: Any = config
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        raise SettingsError(f"PreDiff config {cfg} has no section {dotted}")
    return dict(node)


def diffusion_schedule(config: Mapping[str, Any], cfg: Path) -> Schedule:
    """The checked diffusion section. YAML 1.1 reads `1e-4` as text (OmegaConf, which PreDiff
    uses, reads it as a number), so numbers are converted here."""
    diffusion = {**DIFFUSION_DEFAULTS, **section(config, "model.diffusion", cfg)}
    for field, expected in (("parameterization", "eps"), ("beta_schedule", "linear")):
        if diffusion.get(field, expected) != expected:
            raise SettingsError(
                f"PreDiff config {cfg}: model.diffusion.{field} is {diffusion[field]!r}; the "
                f"prediff backbone reads {field} {expected!r} models only"
            )
    layout = config.get("layout") or {}
    lengths = (layout.get("in_len", INPUTS), layout.get("out_len", OUTPUTS))
    if tuple(lengths) != (INPUTS, OUTPUTS):
        raise SettingsError(
            f"PreDiff config {cfg}: layout in_len/out_len are {lengths}; SEVIR-LR windows are "
            f"{INPUTS} past and {OUTPUTS} future frames"
        )
    try:
        return Schedule(
            int(diffusion["timesteps"]),
            float(diffusion["linear_start"]),
            float(diffusion["linear_end"]),
            float(diffusion["scale_factor"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SettingsError(
            f"PreDiff config {cfg}: model.diffusion needs numeric linear_start, linear_end "
            f"(and timesteps, scale_factor): {exc}"
        ) from None


def vae_kwargs(vae: Mapping[str, Any]) -> dict[str, Any]:
    return {field: required(vae, field, "model.vae") for field in VAE_FIELDS}


def unet_kwargs(latent: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = {field: required(latent, field, "model.latent_model") for field in UNET_FIELDS}
    pattern = required(latent, "self_pattern", "model.latent_model")
    depth = kwargs["depth"]
    kwargs["block_attn_patterns"] = [pattern] * len(depth) if isinstance(pattern, str) else pattern
    linear_mode = required(latent, "down_up_linear_init_mode", "model.latent_model")
    kwargs["down_linear_init_mode"] = kwargs["up_linear_init_mode"] = linear_mode
    return kwargs


def required(fields: Mapping[str, Any], field: str, where: str) -> Any:
    if field not in fields:
        raise SettingsError(f"PreDiff config: {where}.{field} is missing")
    return fields[field]


def build(where: tuple[str, str], kwargs: dict[str, Any], code: str | Path) -> nn.Module:
    """PreDiff's class `where` (module, name) from the clone, built with `kwargs`."""
    module_name, class_name = where
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(
            f"cannot import {module_name}.{class_name} from the PreDiff clone {code}: "
            f"{type(exc).__name__}: {exc}; pass code=<a clone of PreDiff's repository>"
        ) from None
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", MESHGRID_WARNING, UserWarning)
            return cls(**kwargs)
    except Exception as exc:  # the user's code: any failure is the config's
        raise SettingsError(
            f"PreDiff's {class_name} cannot be built from the config: {type(exc).__name__}: {exc}"
        ) from None


def load_part(module: nn.Module, path: Path, part: str) -> None:
    """Load the state dict in `path` (plain, or a Lightning checkpoint's with the part's prefix)
    into `module`; then freeze it in eval mode."""
    if not path.is_file():
        raise CheckpointError(
            f"PreDiff {part} checkpoint not found: {path}; download PreDiff's released "
            f"{part} file (see docs/nowcasting.md) and pass {part}=<file>"
        )
    what = f"PreDiff {part} checkpoint {path}"
    try:
        stored = load_tensors(path)
    except Exception as exc:
        raise CheckpointError(f"cannot read {what}: {reason(exc)}") from None
    state = part_state(stored, PREFIXES[part], what)
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[1:2] or [str(exc)]
        raise CheckpointError(
            f"{what} does not fit the model of the config: {first[0].strip()}"
        ) from None
    module.eval().requires_grad_(False)


def part_state(stored: object, prefix: str, what: str) -> dict[str, Tensor]:
    """The state dict of one part: a Lightning checkpoint's `state_dict`, keys under `prefix`
    with it removed; a plain state dict as it is. Every value must be a tensor."""
    if isinstance(stored, Mapping) and isinstance(stored.get("state_dict"), Mapping):
        stored = stored["state_dict"]
    if not isinstance(stored, Mapping):
        raise CheckpointError(f"{what} holds {described(stored)}, not a state dict")
    if any(key.startswith(prefix) for key in stored):
        stored = {
            key.removeprefix(prefix): v for key, v in stored.items() if key.startswith(prefix)
        }
    for key, value in stored.items():
        if not isinstance(value, Tensor):
            raise CheckpointError(f"{what} holds {described(value)} under {key}, not a tensor")
    return dict(stored)


def described(value: object) -> str:
    """`a <type>`, the name in the file for an object read as a placeholder."""
    name = value.source if isinstance(value, Placeholder) else type(value).__name__
    return f"a {name}"
