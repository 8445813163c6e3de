"""The SANA and FLUX backbones on tiny pipelines of the real diffusers classes, saved to folders:
MJHQ prompt splits, the σ-form against the raw transformer calls and against the pipelines' own
Euler sampling, NFE under guidance, decoding, a fit, and every bad input's error."""

import inspect
import json
import random
import shutil
import sys
from pathlib import Path

import pytest
import torch
from diffusers import (
    AutoencoderDC,
    AutoencoderKL,
    DPMSolverMultistepScheduler,
    FlowMatchEulerDiscreteScheduler,
    FluxPipeline,
    FluxTransformer2DModel,
    SanaPipeline,
    SanaTransformer2DModel,
)
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch import Tensor
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    Gemma2Config,
    Gemma2Model,
    PreTrainedTokenizerFast,
    T5Config,
    T5EncoderModel,
)

from spanlift.backbones import BACKBONES, load_backbone
from spanlift.backbones.base import conditioned
from spanlift.backbones.flux import Flux
from spanlift.backbones.prompts import read_mjhq
from spanlift.backbones.sana import Sana
from spanlift.errors import CheckpointError, DataError, SettingsError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.seeds import FID_FIRST_SEED, REFERENCE_FIRST_SEED, TEST_SEED_OFFSET
from spanlift.solvers import NFECounter, SolverSpec, build_solver
from spanlift.solvers.euler import Euler

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

WORDS = [
    *("a", "an", "the", "cat", "dog", "red", "blue", "green", "house", "tree", "sky", "over"),
    *("under", "big", "small", "photo", "of", "in"),
]
PROMPTS = 34  # 5 training prompts, 29 evaluation prompts (29 does not divide 10⁹)
SEEDS = [0, 3, TEST_SEED_OFFSET + 1, FID_FIRST_SEED + 2]
SANA_RESOLUTION, FLUX_RESOLUTION = 32, 16  # latents 4×8×8 for both


def tiny_tokenizer(max_length: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over WORDS that adds <s> … </s>, built offline."""
    vocab = {word: i for i, word in enumerate(["<pad>", "<unk>", "<s>", "</s>", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=max_length,
    )


VOCAB = len(WORDS) + 4


def sana_pipeline() -> SanaPipeline:
    """SANA's classes at toy sizes: AutoencoderDC downsampling 4, Gemma 2 of width 16."""
    torch.manual_seed(0)
    gemma = Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    vae = AutoencoderDC(
        latent_channels=4,
        attention_head_dim=2,
        encoder_block_out_channels=(8, 8, 8),
        decoder_block_out_channels=(8, 8, 8),
        encoder_layers_per_block=(1, 1, 1),
        decoder_layers_per_block=(1, 1, 1),
        encoder_qkv_multiscales=((), (), ()),
        decoder_qkv_multiscales=((), (), ()),
        scaling_factor=0.41407,
    )
    transformer = SanaTransformer2DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=4,
        num_layers=1,
        num_cross_attention_heads=2,
        cross_attention_head_dim=4,
        cross_attention_dim=8,
        caption_channels=16,
        sample_size=8,
    )
    scheduler = DPMSolverMultistepScheduler(
        use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0
    )
    return SanaPipeline(
        tokenizer=tiny_tokenizer(300),
        text_encoder=Gemma2Model(gemma),
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )


def flux_pipeline() -> FluxPipeline:
    """FLUX's classes at toy sizes: AutoencoderKL downsampling 2, CLIP and T5 of width 8."""
    torch.manual_seed(1)
    clip = CLIPTextConfig(
        vocab_size=VOCAB,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=77,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    t5 = T5Config(
        vocab_size=VOCAB,
        d_model=8,
        d_ff=16,
        d_kv=4,
        num_layers=1,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=3,
    )
    vae = AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 8),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=16,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    transformer = FluxTransformer2DModel(
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=8,
        pooled_projection_dim=8,
        guidance_embeds=True,
        axes_dims_rope=(4, 2, 2),
    )
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    return FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=CLIPTextModel(clip),
        tokenizer=tiny_tokenizer(77),
        text_encoder_2=T5EncoderModel(t5),
        tokenizer_2=tiny_tokenizer(512),
        transformer=transformer,
    )


def mjhq_entries(count: int, seed: int = 0) -> dict[str, dict[str, str]]:
    """An MJHQ-shaped mapping: random hex ids → {category, prompt} of WORDS."""
    generator = random.Random(seed)
    return {
        f"{generator.getrandbits(128):032x}": {
            "category": generator.choice(["animals", "people"]),
            "prompt": " ".join(generator.choices(WORDS, k=generator.randint(2, 8))),
        }
        for _ in range(count)
    }


def write_json(path: Path, content: object) -> Path:
    path.write_text(json.dumps(content))
    return path


@pytest.fixture(scope="module")
def entries() -> dict[str, dict[str, str]]:
    return mjhq_entries(PROMPTS)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, entries) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("flow")
    sana_pipeline().save_pretrained(root / "sana")
    flux_pipeline().save_pretrained(root / "flux")
    return {
        "sana": root / "sana",
        "flux": root / "flux",
        "prompts": write_json(root / "meta_data.json", entries),
    }


@pytest.fixture(scope="module")
def sana(folders) -> Sana:
    return load_backbone(
        "sana", path=str(folders["sana"]), prompts=folders["prompts"], resolution=SANA_RESOLUTION
    )


@pytest.fixture(scope="module")
def sana_unguided(folders) -> Sana:
    """guidance ≤ 1 turns classifier-free guidance off, as in SanaPipeline."""
    return Sana(
        path=folders["sana"], prompts=folders["prompts"], resolution=SANA_RESOLUTION, guidance=1.0
    )


@pytest.fixture(scope="module")
def flux(folders) -> Flux:
    return Flux(path=folders["flux"], prompts=folders["prompts"], resolution=FLUX_RESOLUTION)


@pytest.fixture(scope="module")
def sana_reference(folders) -> SanaPipeline:
    """The saved SANA pipeline loaded apart from the backbone, stepping with Euler."""
    pipeline = SanaPipeline.from_pretrained(folders["sana"], local_files_only=True)
    pipeline.scheduler = FlowMatchEulerDiscreteScheduler()  # shift 1: the s grid as given
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


@pytest.fixture(scope="module")
def flux_reference(folders) -> FluxPipeline:
    pipeline = FluxPipeline.from_pretrained(folders["flux"], local_files_only=True)
    pipeline.scheduler = FlowMatchEulerDiscreteScheduler()  # no resolution shift: s as given
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def sana_call_defaults() -> dict:
    """SanaPipeline.__call__'s prompt-encoding defaults, read from its signature."""
    parameters = inspect.signature(SanaPipeline.__call__).parameters
    names = ("clean_caption", "max_sequence_length", "complex_human_instruction")
    return {name: parameters[name].default for name in names}


def random_latents(n: int, seed: int) -> Tensor:
    return torch.randn(n, 4, 8, 8, generator=torch.Generator().manual_seed(seed))


def test_mjhq_split_and_seed_rule(entries, folders) -> None:
    split = read_mjhq(folders["prompts"])
    ordered = [entries[key]["prompt"] for key in sorted(entries)]
    assert split.train == tuple(ordered[:5]) and split.evaluation == tuple(ordered[5:])
    assert split.index(7) == 7 % 5 and split.texts[split.index(7)] == ordered[2]
    assert split.index(TEST_SEED_OFFSET + 30) == 5 + 1
    for first in (TEST_SEED_OFFSET, FID_FIRST_SEED, REFERENCE_FIRST_SEED):
        assert split.indices(range(first, first + 29)).tolist() == list(range(5, 34))


def test_the_real_sized_file_splits_5k_25k_and_fid_seeds_meet_every_prompt(tmp_path) -> None:
    path = write_json(tmp_path / "meta_data.json", mjhq_entries(30_000, seed=1))
    split = read_mjhq(path)
    assert (len(split.train), len(split.evaluation)) == (5000, 25_000)
    fid = split.indices(range(FID_FIRST_SEED, FID_FIRST_SEED + 25_000))
    assert sorted(fid.tolist()) == list(range(5000, 30_000))
    assert split.indices(range(4999, 5001)).tolist() == [4999, 0]


def test_bad_prompts_files_name_the_file_and_the_expected_shape(tmp_path) -> None:
    cases = {
        "missing.json": None,
        "text.json": "not json at all",
        "list.json": json.dumps([{"prompt": "a cat"}]),
        "numbers.json": json.dumps({"b": {"prompt": "a cat"}, "a": {"prompt": 3}}),
        "one.json": json.dumps({"a": {"category": "x", "prompt": "a cat"}}),
    }
    messages = {
        "missing.json": "not found",
        "text.json": "is not JSON",
        "list.json": "holds a JSON list",
        "numbers.json": "entry 'a' has no string 'prompt'",
        "one.json": "holds 1 prompts; at least 2",
    }
    for name, content in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content)
        with pytest.raises(DataError, match=messages[name]) as error:
            read_mjhq(tmp_path / name)
        assert name in str(error.value) and "MJHQ-30K meta_data.json" in str(error.value)


def test_loading_gives_latent_shapes_sigma_range_and_pure_conditioning(sana, flux, folders) -> None:
    assert BACKBONES.get("sana") is Sana and BACKBONES.get("flux") is Flux
    assert sana.shape == (4, 8, 8) and flux.shape == (4, 8, 8)
    for backbone in (sana, flux):
        assert backbone.sigma_min == pytest.approx(1 / 999) and backbone.sigma_max == 999
        assert not backbone.training
        assert not any(p.requires_grad for p in backbone.parameters())
        cond = backbone.conditioning(SEEDS)
        assert cond.dtype == torch.int64 and cond.tolist() == [0, 3, 6, 7]
        assert torch.equal(backbone.conditioning(SEEDS[::-1]), cond.flip(0))
        split = read_mjhq(folders["prompts"])
        expected = [split.train[0], split.train[3], split.evaluation[1], split.evaluation[2]]
        assert backbone.prompts(SEEDS) == expected
    again = Sana(path=folders["sana"], prompts=folders["prompts"], resolution=SANA_RESOLUTION)
    assert torch.equal(again.conditioning(SEEDS), sana.conditioning(SEEDS))
    assert "hf download" in Sana.needs and "prompts=" in Flux.needs


def test_sana_denoiser_is_x0_of_the_guided_velocity_from_separate_calls(
    sana, sana_reference
) -> None:
    """D(x̃, σ) = x_s − s(v_u + g(v_c − v_u)), v_u and v_c from one-sample transformer calls."""
    cond = sana.conditioning(SEEDS)
    x = random_latents(len(SEEDS), 2) * 3
    sigma = torch.tensor([0.05, 0.8, 4.0, 150.0])
    embeds, mask, negative, negative_mask = sana_reference.encode_prompt(
        sana.prompts(SEEDS),
        do_classifier_free_guidance=True,
        negative_prompt="",
        device=torch.device("cpu"),
        **sana_call_defaults(),
    )
    expected = []
    with torch.no_grad():
        for i in range(len(SEEDS)):
            s = sigma[i] / (1 + sigma[i])
            x_s = x[i : i + 1] / (1 + sigma[i])

            def velocity(e: Tensor, m: Tensor, x_s: Tensor = x_s, s: Tensor = s) -> Tensor:
                timestep = (s * 1000).reshape(1)
                out = sana_reference.transformer(
                    x_s, encoder_hidden_states=e, encoder_attention_mask=m, timestep=timestep
                )
                return out.sample

            v_c = velocity(embeds[i : i + 1], mask[i : i + 1])
            v_u = velocity(negative[i : i + 1], negative_mask[i : i + 1])
            expected.append(x_s - s * (v_u + 4.5 * (v_c - v_u)))
        denoised = sana.denoise(x, sigma, cond)
        torch.testing.assert_close(denoised, torch.cat(expected), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(sana.denoise(x, sigma, cond.float()), denoised)


def test_flux_denoiser_is_x0_of_the_distilled_velocity_from_a_raw_call(
    flux, flux_reference
) -> None:
    """D = x_s − s·v, v from the transformer on the pipeline's packing, ids and guidance."""
    cond = flux.conditioning(SEEDS)
    x = random_latents(len(SEEDS), 3) * 2
    sigma = torch.tensor([0.01, 0.5, 7.0, 900.0])
    embeds, pooled, text_ids = flux_reference.encode_prompt(
        flux.prompts(SEEDS), prompt_2=None, device=torch.device("cpu")
    )
    image_ids = FluxPipeline._prepare_latent_image_ids(1, 4, 4, torch.device("cpu"), torch.float32)
    s = sigma / (1 + sigma)
    x_s = x / (1 + sigma[:, None, None, None])
    with torch.no_grad():
        tokens = flux_reference.transformer(
            hidden_states=FluxPipeline._pack_latents(x_s, len(SEEDS), 4, 8, 8),
            timestep=s,
            guidance=torch.full((len(SEEDS),), 3.5),
            pooled_projections=pooled,
            encoder_hidden_states=embeds,
            txt_ids=text_ids,
            img_ids=image_ids,
        ).sample
        v = FluxPipeline._unpack_latents(tokens, FLUX_RESOLUTION, FLUX_RESOLUTION, 2)
        expected = x_s - s[:, None, None, None] * v
        torch.testing.assert_close(flux.denoise(x, sigma, cond), expected, rtol=1e-4, atol=1e-5)


def euler_from(backbone, x_start: Tensor, s_grid: Tensor, cond: Tensor) -> Tensor:
    """Euler in σ-form over σ = s/(1 − s) of the s grid, then to σ = 0, from x_s at s_grid[0]."""
    sigmas = torch.cat([s_grid / (1 - s_grid), torch.zeros(1, dtype=s_grid.dtype)])
    with torch.no_grad():
        return Euler(sigmas)(conditioned(backbone, cond), x_start / (1 - s_grid[0]))


def test_sana_euler_is_the_pipelines_flow_match_euler_sampling(sana, sana_reference) -> None:
    s_grid = [0.95, 0.7, 0.4, 0.15]
    x_start = random_latents(len(SEEDS), 4)
    reference = sana_reference(
        prompt=sana.prompts(SEEDS),
        sigmas=s_grid,
        num_inference_steps=len(s_grid),
        guidance_scale=4.5,
        height=SANA_RESOLUTION,
        width=SANA_RESOLUTION,
        latents=x_start,
        output_type="latent",
        use_resolution_binning=False,
    ).images
    assert torch.allclose(sana_reference.scheduler.sigmas[:-1], torch.tensor(s_grid))
    ours = euler_from(sana, x_start, torch.tensor(s_grid), sana.conditioning(SEEDS))
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4)


def test_flux_euler_is_the_pipelines_flow_match_euler_sampling(flux, flux_reference) -> None:
    s_grid = [0.9, 0.6, 0.3]
    x_start = random_latents(len(SEEDS), 5)
    packed = FluxPipeline._pack_latents(x_start, len(SEEDS), 4, 8, 8)
    reference = flux_reference(
        prompt=flux.prompts(SEEDS),
        sigmas=s_grid,
        num_inference_steps=len(s_grid),
        height=FLUX_RESOLUTION,
        width=FLUX_RESOLUTION,
        latents=packed,
        output_type="latent",
    ).images
    unpacked = FluxPipeline._unpack_latents(reference, FLUX_RESOLUTION, FLUX_RESOLUTION, 2)
    ours = euler_from(flux, x_start, torch.tensor(s_grid), flux.conditioning(SEEDS))
    torch.testing.assert_close(ours, unpacked, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("name", "per_call"), [("sana", 2), ("sana_unguided", 1), ("flux", 1)])
@pytest.mark.parametrize("solver", ["euler", "ipndm"])
def test_nfe_is_transformer_calls_and_guidance_doubles_each_batch(
    request, name: str, per_call: int, solver: str
) -> None:
    backbone = request.getfixturevalue(name)
    batches: list[int] = []

    def record(module, args, kwargs) -> None:
        batches.append(len(args[0] if args else kwargs["hidden_states"]))

    spec = SolverSpec(solver, 4)
    built = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    counter = NFECounter(conditioned(backbone, backbone.conditioning(SEEDS[:3])))
    hook = backbone.transformer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.no_grad():
            sample = built(counter, backbone.prior(random_latents(3, 6)))
    finally:
        hook.remove()
    assert counter.calls == built.nfe == 4
    assert batches == [per_call * 3] * 4
    assert sample.shape == (3, *backbone.shape) and sample.isfinite().all()


@pytest.mark.parametrize(("name", "resolution"), [("sana", SANA_RESOLUTION), ("flux", 16)])
def test_decode_is_the_vae_on_unscaled_latents_clamped_and_differentiable(
    request, name: str, resolution: int
) -> None:
    backbone = request.getfixturevalue(name)
    config = backbone.vae.config
    shift = config.shift_factor if name == "flux" else 0.0
    x = random_latents(2, 7).requires_grad_(True)
    images = backbone.decode(x)
    raw = backbone.vae.decode(x.detach() / config.scaling_factor + shift).sample
    assert images.shape == (2, 3, resolution, resolution)
    assert images.min() >= -1 and images.max() <= 1
    torch.testing.assert_close(images.detach(), raw.clamp(-1, 1))
    images.square().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert backbone.to_images(x.detach()).dtype == torch.uint8


def test_a_fit_on_sana_lowers_its_endpoint_error(sana) -> None:
    train = generate_teacher(sana, range(8), SolverSpec("ipndm", 8), progress=False)
    assert train.cond is not None and train.cond.tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    torch.manual_seed(0)  # the operator's initial weights
    solver = build_solver(SolverSpec("spanlift", 3), sana.sigma_min, sana.sigma_max, 4)
    settings = FitSettings(iterations=20, batch_size=8, lr=2e-3, warmup=2)

    def error() -> float:
        with torch.no_grad():
            endpoint = rollout(solver, sana, train.noise, train.cond)
            return (endpoint - train.endpoints).square().mean().item()

    before = error()
    fit(solver, sana, train, settings, progress=False)
    assert error() < 0.7 * before


@pytest.mark.parametrize("name", ["sana", "flux"])
def test_prompts_are_encoded_in_the_encoders_precision_under_a_fits_autocast(
    name, folders, request
) -> None:
    """A half-precision fit runs the backbone under autocast; the prompts it is the first to
    need are encoded as without it, since their encoding is kept for every later call."""
    backbone = request.getfixturevalue(name)
    fresh = type(backbone)(
        path=folders[name], prompts=folders["prompts"], resolution=backbone.resolution
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first = fresh.embeddings([0, 1])
    for kept, plain in zip(first, backbone.embeddings([0, 1]), strict=True):
        assert kept.dtype == plain.dtype
        assert torch.equal(kept, plain)


def test_identity_follows_weights_prompts_and_options(sana, folders, entries, tmp_path) -> None:
    options = {"path": folders["sana"], "prompts": folders["prompts"]}
    same = Sana(**options, resolution=SANA_RESOLUTION)
    assert same.identity() == sana.identity()
    changed = SanaPipeline.from_pretrained(folders["sana"], local_files_only=True)
    with torch.no_grad():
        changed.transformer.proj_out.bias.add_(1e-3)
    changed.save_pretrained(tmp_path / "changed")
    other_prompts = write_json(tmp_path / "meta_data.json", mjhq_entries(PROMPTS, seed=9))
    others = [
        Sana(**options, resolution=64),
        Sana(**options, resolution=SANA_RESOLUTION, guidance=2.0),
        Sana(**options, resolution=SANA_RESOLUTION, sigma_max=80.0),
        Sana(**{**options, "prompts": other_prompts}, resolution=SANA_RESOLUTION),
        Sana(**{**options, "path": tmp_path / "changed"}, resolution=SANA_RESOLUTION),
    ]
    identities = {backbone.identity() for backbone in [sana, *others]}
    assert len(identities) == len(others) + 1
    assert others[0].shape == (4, 16, 16) and others[2].sigma_max == 80.0


def test_bfloat16_weights_give_float32_denoised_latents_close_to_float32(sana, folders) -> None:
    half = Sana(
        path=folders["sana"],
        prompts=folders["prompts"],
        resolution=SANA_RESOLUTION,
        dtype="bfloat16",
    )
    assert half.transformer.dtype == torch.bfloat16
    cond, x = sana.conditioning(SEEDS), random_latents(len(SEEDS), 8)
    with torch.no_grad():
        low, full = (
            half.denoise(x, torch.tensor(1.0), cond),
            sana.denoise(x, torch.tensor(1.0), cond),
        )
    assert low.dtype == torch.float32
    assert (low - full).abs().max() < 0.1 * full.abs().max()


def copy_without(folder: Path, component: str, target: Path) -> Path:
    shutil.copytree(folder, target)
    shutil.rmtree(target / component)
    return target


def test_bad_inputs_are_one_clear_error(sana, folders, tmp_path, monkeypatch) -> None:
    prompts = folders["prompts"]
    with pytest.raises(CheckpointError, match=r"not found: .*nowhere.*Sana_600M_512px_diffusers"):
        Sana(path=tmp_path / "nowhere", prompts=prompts)
    no_vae = copy_without(folders["sana"], "vae", tmp_path / "no_vae")
    with pytest.raises(CheckpointError, match=r"no_vae lacks its vae/ folder.*hf download"):
        Sana(path=no_vae, prompts=prompts)
    no_t5 = copy_without(folders["flux"], "text_encoder_2", tmp_path / "no_t5")
    with pytest.raises(CheckpointError, match=r"lacks its text_encoder_2/ folder.*FLUX\.1-dev"):
        Flux(path=no_t5, prompts=prompts)
    no_index = tmp_path / "no_index"
    shutil.copytree(folders["sana"], no_index)
    (no_index / "model_index.json").unlink()
    with pytest.raises(CheckpointError, match=r"no readable model_index\.json"):
        Sana(path=no_index, prompts=prompts)
    with pytest.raises(CheckpointError, match="holds a SanaPipeline, not a FluxPipeline"):
        Flux(path=folders["sana"], prompts=prompts)
    no_weights = tmp_path / "no_weights"
    shutil.copytree(folders["sana"], no_weights)
    (no_weights / "transformer" / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"cannot load the SanaPipeline in .*no_weights"):
        Sana(path=no_weights, prompts=prompts, resolution=SANA_RESOLUTION)

    with pytest.raises(SettingsError, match=r"resolution must be a multiple of 4.*got 30"):
        Sana(path=folders["sana"], prompts=prompts, resolution=30)
    with pytest.raises(SettingsError, match=r"resolution must be a multiple of 4.*got 18"):
        Flux(path=folders["flux"], prompts=prompts, resolution=18)
    with pytest.raises(SettingsError, match=r"prompts=<MJHQ-30K meta_data.json>"):
        load_backbone("sana", path=folders["sana"])
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match=r"bad\.json is not JSON"):
        Sana(path=folders["sana"], prompts=tmp_path / "bad.json")
    with pytest.raises(SettingsError, match="dtype must be one of float32, bfloat16, float16"):
        Sana(path=folders["sana"], prompts=prompts, dtype="int8")
    with pytest.raises(SettingsError, match="0 < sigma_min < sigma_max < inf"):
        Sana(path=folders["sana"], prompts=prompts, resolution=32, sigma_min=5, sigma_max=2)

    x = random_latents(2, 9)
    with pytest.raises(SettingsError, match=r"cond \(prompt indices .*\) is required"):
        sana.denoise(x, torch.tensor(1.0))
    with pytest.raises(SettingsError, match=r"integers in \[0, 33\]"):
        sana.denoise(x, torch.tensor(1.0), torch.tensor([0, 34]))
    with pytest.raises(SettingsError, match=r"integers in \[0, 33\]"):
        sana.denoise(x, torch.tensor(1.0), torch.tensor([0.5, 2.0]))

    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(SettingsError, match=r"pip install 'spanlift\[diffusers\]'"):
        Sana(path=folders["sana"], prompts=prompts, resolution=SANA_RESOLUTION)


def test_pack_is_the_pipelines_packing() -> None:
    from spanlift.backbones.flux import image_ids, pack, unpack

    x = random_latents(2, 10)
    packed = pack(x)
    assert torch.equal(packed, FluxPipeline._pack_latents(x, 2, 4, 8, 8))
    assert torch.equal(unpack(packed, 8, 8), x)
    ids = FluxPipeline._prepare_latent_image_ids(1, 4, 4, torch.device("cpu"), torch.float32)
    assert torch.equal(image_ids(4, 4), ids)
