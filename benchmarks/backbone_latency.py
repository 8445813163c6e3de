"""Per-NFE latency and peak memory of each backbone class at its real size, and SpanLift's overhead.

Every network has random weights and its real architecture, in float32:

- EDM pixel networks: spanlift's EDM-preconditioned U-Net at the widths, depth and attention of
  EDM's CIFAR-10 DDPM++ network (128 channels, multipliers 2-2-2, 4 blocks per level, attention at
  16×16) and of its ImageNet-64 ADM network (`imagenet64_size()`): stand-ins with the real cost,
  their parameter counts printed beside EDM's published ones.
- SANA-600M at 512 px through spanlift's `sana` backbone: diffusers' SanaTransformer2DModel and
  AutoencoderDC at the released configurations (Sana_600M_512px, dc-ae-f32c32-sana-1.0), and one
  Gemma 2 layer of the real width as text encoder (300 tokens × 2304). One NFE is one transformer
  call on the CFG-doubled batch; prompts are encoded once, outside the timing.
- FLUX.1-dev at 1024 px through spanlift's `flux` backbone (one CLIP and one T5 layer of the real
  widths as text encoders). Its weights are first sized on the meta device; where they exceed the
  free memory the script says so instead of building them, and `--flux-blocks` then measures
  FLUX.1-dev's widths with 1 double-stream and 1 single-stream block: per-block figures, and the
  full depth (19 + 38 blocks) extrapolated from them.

Per NFE: one denoiser call that counts FLOPs (torch.utils.flop_counter, taught attention's CPU
kernel) and warms up, then the median of `--repeats` timed calls. Peak memory: the most in use
during the timed calls above what was in use before the networks were built (weights + one call's
working memory); on a GPU from torch.cuda.max_memory_allocated, on the CPU from the process's
resident set size sampled every 2 ms with psutil. The SANA and FLUX backbones hold their VAE and
text encoders too.

SpanLift's overhead against its base DyWeight at NFE 5 (default spatial operator): both solvers
roll out with the denoiser's output replayed from a fixed tensor, which measures their own
parameters, FLOPs and time; a rollout is the calls it makes × the measured call + that. Printed
beside the paper's figures (EDM ImageNet-64 on an A6000, batch 64).

    python benchmarks/backbone_latency.py [--only edm,sana,flux] [--device cpu] [--batch N]
        [--repeats 3] [--flux-blocks]

The default run (batch 16 for CIFAR-10, 4 for ImageNet-64, 1 for SANA and FLUX; 3 repeats) takes
1.5 minutes on 2 idle CPU cores and up to 4 on busy ones, most of it SANA's transformer calls and
DC-AE decodes at 512 px; `--flux-blocks` adds 2–5 minutes there, most of it FLUX's VAE decoding at
1024 px.
"""

import argparse
import ctypes
import gc
import json
import math
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil
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
from diffusers.utils import logging as diffusers_logging
from overhead import report  # benchmarks/ is on sys.path when run as a script
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    Gemma2Config,
    Gemma2Model,
    PreTrainedTokenizerFast,
    T5Config,
    T5EncoderModel,
)
from transformers.utils import logging as transformers_logging

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.flow_matching import FlowMatchingBackbone
from spanlift.backbones.flux import Flux
from spanlift.backbones.sana import Sana
from spanlift.backbones.unet import UNet, UNetConfig, imagenet64_size
from spanlift.cli.devices import device_option
from spanlift.platform.evaluation.metrics.overhead import parameter_count
from spanlift.solvers import NFECounter, SolverSpec, build_solver

NFE = 5
SOLVERS = (SolverSpec("dyweight", NFE), SolverSpec("spanlift", NFE, settings={"base": "dyweight"}))
SOLVER_REPEATS = 10
"""Timed solver-only rollouts per timed denoiser call (they take milliseconds)."""
PAPER = ("+0.04 %", "+0.24 %", "+3.1 %")
"""SpanLift's overhead in the paper: parameters, FLOPs, latency (EDM ImageNet-64, A6000, batch 64)."""

FLUX_SHAPE = (16, 128, 128)  # latents at 1024 px (the transformer sees them packed 2×2)
FLUX_DEPTH = {"transformer_blocks.0": 19, "single_transformer_blocks.0": 38}
"""FLUX.1-dev's blocks of each kind, by the path of the first one."""
BLOCK_NAMES = {
    "transformer_blocks.0": "double-stream block",
    "single_transformer_blocks.0": "single-stream block",
}

WORDS = ["a", "photo", "of", "cat", "on", "red", "chair"]
PROMPTS = {
    "0": {"category": "animals", "prompt": "a photo of a cat"},
    "1": {"category": "animals", "prompt": "a red cat on a chair"},
}
"""An MJHQ-shaped prompts file for the text-conditioned backbones."""


# --- networks at their real configurations ------------------------------------------------------


def cifar10_size() -> UNetConfig:
    """Widths, depth and attention of EDM's CIFAR-10 DDPM++ network (one attention head)."""
    return UNetConfig(
        in_channels=3,
        channels=128,
        channel_mult=(2, 2, 2),
        blocks_per_level=4,
        attention_levels=(1,),
        heads_channels=256,
        groups=32,
    )


def sana_transformer() -> SanaTransformer2DModel:
    """Sana_600M_512px's transformer."""
    return SanaTransformer2DModel(
        in_channels=32,
        out_channels=32,
        num_attention_heads=36,
        attention_head_dim=32,
        num_layers=28,
        num_cross_attention_heads=16,
        cross_attention_head_dim=72,
        cross_attention_dim=1152,
        caption_channels=2304,
        mlp_ratio=2.5,
        attention_bias=False,
        sample_size=16,
        patch_size=1,
        norm_elementwise_affine=False,
        norm_eps=1e-6,
    )


def dc_ae_f32c32() -> AutoencoderDC:
    """dc-ae-f32c32-sana-1.0, as diffusers' conversion script configures it."""
    blocks = ("ResBlock",) * 3 + ("EfficientViTBlock",) * 3
    widths = (128, 256, 512, 512, 1024, 1024)
    scales = ((), (), (), (5,), (5,), (5,))
    return AutoencoderDC(
        latent_channels=32,
        encoder_block_types=blocks,
        decoder_block_types=blocks,
        encoder_block_out_channels=widths,
        decoder_block_out_channels=widths,
        encoder_qkv_multiscales=scales,
        decoder_qkv_multiscales=scales,
        encoder_layers_per_block=(2, 2, 2, 3, 3, 3),
        decoder_layers_per_block=(3, 3, 3, 3, 3, 3),
        downsample_block_type="conv",
        upsample_block_type="interpolate",
        decoder_norm_types="rms_norm",
        decoder_act_fns="silu",
        scaling_factor=0.41407,
    )


def flux_transformer(double: int, single: int) -> FluxTransformer2DModel:
    """FLUX.1-dev's transformer with `double` double-stream and `single` single-stream blocks."""
    return FluxTransformer2DModel(
        in_channels=64,
        num_layers=double,
        num_single_layers=single,
        attention_head_dim=128,
        num_attention_heads=24,
        joint_attention_dim=4096,
        pooled_projection_dim=768,
        guidance_embeds=True,
        axes_dims_rope=(16, 56, 56),
    )


def flux_vae() -> AutoencoderKL:
    """FLUX.1-dev's VAE."""
    return AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        latent_channels=16,
        sample_size=1024,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )


# --- small text encoders of the real widths ------------------------------------------------------

VOCABULARY = len(WORDS) + 4
SPECIAL_TOKENS = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}


def tokenizer(max_length: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over WORDS that adds <s> … </s>, built offline."""
    vocabulary = {word: i for i, word in enumerate(["<pad>", "<unk>", "<s>", "</s>", *WORDS])}
    model = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    model.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=model,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=max_length,
    )


def gemma_encoder() -> Gemma2Model:
    """One Gemma 2 layer of SANA's text width (2304)."""
    config = Gemma2Config(
        vocab_size=VOCABULARY,
        hidden_size=2304,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        **SPECIAL_TOKENS,
    )
    return Gemma2Model(config)


def clip_encoder() -> CLIPTextModel:
    """One CLIP text layer of FLUX's pooled width (768)."""
    config = CLIPTextConfig(
        vocab_size=VOCABULARY,
        hidden_size=768,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=77,
        **SPECIAL_TOKENS,
    )
    return CLIPTextModel(config)


def t5_encoder() -> T5EncoderModel:
    """One T5 layer of FLUX's text width (4096)."""
    config = T5Config(
        vocab_size=VOCABULARY,
        d_model=4096,
        d_ff=16,
        d_kv=8,
        num_layers=1,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=3,
    )
    return T5EncoderModel(config)


# --- backbones -----------------------------------------------------------------------------------


@dataclass
class Networks:
    """The networks that set a backbone's cost: the denoising network and the VAE."""

    denoiser: nn.Module
    vae: nn.Module | None = None

    def weight_bytes(self) -> int:
        modules = [self.denoiser] + ([self.vae] if self.vae is not None else [])
        return sum(p.numel() * p.element_size() for m in modules for p in m.parameters())


class RandomEDM(Backbone):
    """An EDM-preconditioned U-Net with random weights."""

    sigma_min, sigma_max = 0.002, 80.0

    def __init__(self, net: nn.Module, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.net, self.shape = net, shape
        self.freeze()

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        return self.net(x, sigma)

    def identity(self) -> str:
        return "random-edm-unet"


def in_memory(adapter: type[FlowMatchingBackbone], pipeline: Any) -> FlowMatchingBackbone:
    """`adapter`'s backbone around `pipeline`, taken from memory: the folder it checks holds only
    model_index.json and empty component folders, beside an MJHQ-shaped prompts file."""

    class InMemory(adapter):
        def load_pipeline(self, folder: Path, dtype: torch.dtype) -> Any:
            return pipeline

    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        (folder / "model_index.json").write_text(json.dumps({"_class_name": adapter.pipeline_name}))
        for component in adapter.components:
            (folder / component).mkdir()
        prompts = folder / "meta_data.json"
        prompts.write_text(json.dumps(PROMPTS))
        return InMemory(path=folder, prompts=prompts)


def sana_backbone(networks: Networks) -> Backbone:
    scheduler = DPMSolverMultistepScheduler(
        use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0
    )
    pipeline = SanaPipeline(
        tokenizer=tokenizer(300),
        text_encoder=gemma_encoder(),
        vae=networks.vae,
        transformer=networks.denoiser,
        scheduler=scheduler,
    )
    return in_memory(Sana, pipeline)


def flux_backbone(networks: Networks) -> Backbone:
    pipeline = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=networks.vae,
        text_encoder=clip_encoder(),
        tokenizer=tokenizer(77),
        text_encoder_2=t5_encoder(),
        tokenizer_2=tokenizer(512),
        transformer=networks.denoiser,
    )
    return in_memory(Flux, pipeline)


@dataclass(frozen=True)
class Case:
    """One backbone to measure."""

    group: str  # what --only selects
    name: str
    published: str  # the real network's parameter count, as published
    pixels: int  # the image side
    shape: tuple[int, int, int]  # one sample's (C, H, W)
    batch: int  # images per call unless --batch
    networks: Callable[[], Networks]  # built on the current default device
    assemble: Callable[[Networks], Backbone]
    depth: dict[str, int] = field(default_factory=dict)
    """Built with one block of each kind: their module paths and counts at full depth."""


def edm_case(name: str, config: UNetConfig, pixels: int, published: str, batch: int) -> Case:
    shape = (config.in_channels, pixels, pixels)
    return Case(
        "edm",
        name,
        published,
        pixels,
        shape,
        batch,
        lambda: Networks(EDMPrecond(UNet(config))),
        lambda networks: RandomEDM(networks.denoiser, shape),
    )


def cases() -> list[Case]:
    return [
        edm_case("EDM CIFAR-10 DDPM++ size, 32 px", cifar10_size(), 32, "55.7 M", 16),
        edm_case("EDM ImageNet-64 ADM size, 64 px", imagenet64_size(), 64, "295.9 M", 4),
        Case(
            "sana",
            "SANA-600M, 512 px, CFG (2 × batch)",
            "0.6 B",
            512,
            (32, 16, 16),
            1,
            lambda: Networks(sana_transformer(), dc_ae_f32c32()),
            sana_backbone,
        ),
        Case(
            "flux",
            "FLUX.1-dev, 1024 px",
            "12 B",
            1024,
            FLUX_SHAPE,
            1,
            lambda: Networks(flux_transformer(19, 38), flux_vae()),
            flux_backbone,
        ),
    ]


def flux_blocks_case() -> Case:
    return Case(
        "flux",
        "FLUX.1-dev, 1024 px, extrapolated",
        "12 B",
        1024,
        FLUX_SHAPE,
        1,
        lambda: Networks(flux_transformer(1, 1), flux_vae()),
        flux_backbone,
        FLUX_DEPTH,
    )


# --- measuring -----------------------------------------------------------------------------------

STARTED = time.perf_counter()


def progress(text: str) -> None:
    print(f"[{time.perf_counter() - STARTED:5.0f} s] {text}", flush=True)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    call()
    synchronize(device)
    return time.perf_counter() - start


def memory_in_use(device: torch.device) -> int:
    """Bytes in use now, after collecting garbage and handing freed memory back."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        return torch.cuda.memory_allocated(device)
    with suppress(OSError, AttributeError):  # glibc keeps freed heap memory resident until trimmed
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return psutil.Process().memory_info().rss


def memory_free(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return psutil.virtual_memory().available


class PeakMemory:
    """The most memory in use while the block runs, in bytes (see the module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak = device, 0
        self.stop = threading.Event()
        self.sampler = threading.Thread(target=self.sample, daemon=True)

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.sampler.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self.device.type == "cuda":
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self.stop.set()
            self.sampler.join()

    def sample(self) -> None:
        process = psutil.Process()
        while not self.stop.is_set():
            self.peak = max(self.peak, process.memory_info().rss)
            self.stop.wait(0.002)


class BlockClock:
    """Wall time of every call of one module (synchronised on a GPU), from forward hooks."""

    def __init__(self, module: nn.Module, device: torch.device) -> None:
        self.device, self.start = device, 0.0
        self.seconds: list[float] = []
        module.register_forward_pre_hook(self.begin)
        module.register_forward_hook(self.end)

    def begin(self, *_: object) -> None:
        synchronize(self.device)
        self.start = time.perf_counter()

    def end(self, *_: object) -> None:
        synchronize(self.device)
        self.seconds.append(time.perf_counter() - self.start)


def cpu_attention_flops(
    query: torch.Size, key: torch.Size, value: torch.Size, *_: object, **__: object
) -> int:
    return sdpa_flop_count(query, key, value)


def flop_counter() -> FlopCounterMode:
    """torch's FLOP counter, also counting scaled_dot_product_attention's CPU kernel, which it
    leaves out (it counts the GPU kernels)."""
    cpu_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return FlopCounterMode(display=False, custom_mapping={cpu_attention: cpu_attention_flops})


@dataclass
class Cost:
    """A call's cost: median milliseconds, GFLOPs (also by module), peak memory in MB."""

    ms: float
    gflops: float
    peak_mb: float = math.nan
    module_gflops: dict[str, float] = field(default_factory=dict)


@torch.no_grad()
def measure_call(
    call: Callable[[], object], device: torch.device, repeats: int, baseline: int
) -> Cost:
    """One FLOP-counting warm-up call, then the median of `repeats` timed calls."""
    with flop_counter() as counter:
        call()
    with PeakMemory(device) as memory:
        seconds = [timed(call, device) for _ in range(repeats)]
    by_module = {name: sum(ops.values()) / 1e9 for name, ops in counter.get_flop_counts().items()}
    return Cost(
        1000 * statistics.median(seconds),
        counter.get_total_flops() / 1e9,
        (memory.peak - baseline) / 1e6,
        by_module,
    )


@torch.no_grad()
def rollouts(
    backbone: Backbone, params: int, call: Cost, batch: int, device: torch.device, repeats: int
) -> list[dict[str, float]]:
    """DyWeight's and SpanLift's rollouts per image (params, gflops, ms), as overhead.report takes
    them: each solver's own cost with the denoiser's output replayed, plus its calls × `call`."""
    noise = torch.randn(batch, *backbone.shape, generator=torch.Generator().manual_seed(0))
    x = backbone.prior(noise.to(device))
    replayed = torch.randn_like(x)

    def replay(x: Tensor, sigma: Tensor) -> Tensor:
        return replayed

    solvers = [
        build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0]).to(device)
        for spec in SOLVERS
    ]
    results, seconds = [], [[] for _ in solvers]
    with default_device(device):
        for solver in solvers:
            calls = NFECounter(replay)
            with flop_counter() as counter:
                solver(calls, x)
            gflops = calls.calls * call.gflops + counter.get_total_flops() / 1e9
            results.append({"params": params + parameter_count(solver), "gflops": gflops})
            results[-1]["calls"] = calls.calls
        for _ in range(SOLVER_REPEATS * repeats):
            for solver, record in zip(solvers, seconds, strict=True):
                record.append(timed(partial(solver, replay, x), device))
    for result, record in zip(results, seconds, strict=True):
        result["ms"] = result.pop("calls") * call.ms + 1000 * statistics.median(record)
        result["gflops"] /= batch
        result["ms"] /= batch
    return results


def default_device(device: torch.device) -> AbstractContextManager:
    """`device` as the default device off the CPU: SpanLift makes part of its step features
    (ξ's step fraction) with torch.tensor on the default device."""
    return nullcontext() if device.type == "cpu" else torch.device(device)


def solver_params(channels: int) -> tuple[int, int]:
    """DyWeight's and SpanLift's parameters on data with `channels` channels."""
    base, lifted = (parameter_count(build_solver(spec, 1e-3, 1e3, channels)) for spec in SOLVERS)
    return base, lifted


# --- one backbone --------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    params: int  # the denoising network's
    batch: int
    solver_params: tuple[int, int]  # DyWeight's, SpanLift's
    call: Cost | None = None  # None: not measured
    decode: Cost | None = None
    decoder_params: int = 0
    rollouts: list[dict[str, float]] | None = None  # DyWeight's, SpanLift's
    blocks: dict[str, tuple[int, Cost]] = field(default_factory=dict)  # path: (params, cost)
    reduced: Cost | None = None  # the call of the network with one block of each kind
    note: str = ""


@dataclass(frozen=True)
class Settings:
    device: torch.device
    batch: int | None
    repeats: int


def sized(case: Case) -> tuple[int, int]:
    """The denoising network's parameters and the float32 bytes of all the case's networks,
    from building them on the meta device (no memory)."""
    with torch.device("meta"):
        networks = case.networks()
    return parameter_count(networks.denoiser), networks.weight_bytes()


def run_case(case: Case, settings: Settings) -> Result:
    device, batch = settings.device, settings.batch or case.batch
    progress(f"{case.name}: sizing the weights on the meta device")
    params, needs = sized(case)
    baseline, free = memory_in_use(device), memory_free(device)
    if needs > free:
        note = (
            f"does not fit: needs {needs / 1e9:.1f} GB (float32 weights; "
            f"{needs / 2e9:.1f} GB in bfloat16), {free / 1e9:.1f} GB available"
        )
        progress(f"{case.name}: {note}")
        return Result(case, params, batch, solver_params(case.shape[0]), note=note)
    progress(f"{case.name}: building with random weights ({needs / 1e9:.1f} GB)")
    torch.manual_seed(0)
    with torch.device(device):  # the weights go straight to the device
        networks = case.networks()
    backbone = case.assemble(networks).to(device)
    result = Result(case, params, batch, solver_params(case.shape[0]))
    return measure(networks, backbone, result, settings, baseline)


def measure(
    networks: Networks, backbone: Backbone, result: Result, settings: Settings, baseline: int
) -> Result:
    """Per-NFE cost, decoding cost and the solvers' rollouts of one built backbone."""
    case, device, repeats, batch = result.case, settings.device, settings.repeats, result.batch
    blocks = {path: networks.denoiser.get_submodule(path) for path in case.depth}
    clocks = {path: BlockClock(block, device) for path, block in blocks.items()}
    noise = torch.randn(batch, *backbone.shape, generator=torch.Generator().manual_seed(1))
    x, sigma = noise.to(device), torch.tensor(1.0, device=device)
    denoiser = conditioned(backbone, backbone.conditioning(list(range(batch))))
    progress(f"{case.name}: per-NFE latency, batch {batch}, 1 counted + {repeats} timed calls")
    result.call = measure_call(partial(denoiser, x, sigma), device, repeats, baseline)
    if clocks:
        result.reduced = result.call
        result.call = full_depth(result, networks, clocks)
    if networks.vae is not None:
        progress(f"{case.name}: decoding latency, batch {batch}, 1 counted + {repeats} timed")
        result.decode = measure_call(partial(backbone.decode, x), device, repeats, baseline)
        result.decoder_params = parameter_count(networks.vae.decoder)
    progress(f"{case.name}: DyWeight and SpanLift at NFE {NFE}, solver-only rollouts")
    result.rollouts = rollouts(backbone, result.params, result.call, batch, device, repeats)
    report(f"{case.name}, batch {batch}", *result.rollouts)
    return result


def full_depth(result: Result, networks: Networks, clocks: dict[str, BlockClock]) -> Cost:
    """The full-depth call extrapolated from one block of each kind: call + Σ (n − 1) · block.
    Records each block's parameters and cost, and counts the full depth's parameters."""
    call = result.reduced
    ms, gflops = call.ms, call.gflops
    for path, clock in clocks.items():
        extra = result.case.depth[path] - 1
        block = networks.denoiser.get_submodule(path)
        flops = next(v for k, v in call.module_gflops.items() if k.endswith(f".{path}"))
        cost = Cost(1000 * statistics.median(clock.seconds[1:]), flops)  # [0]: the warm-up
        result.blocks[path] = (parameter_count(block), cost)
        result.params += extra * parameter_count(block)
        ms, gflops = ms + extra * cost.ms, gflops + extra * cost.gflops
    return Cost(ms, gflops)


# --- tables --------------------------------------------------------------------------------------

NAME = 40  # width of the first column


def params_text(n: float) -> str:
    if n < 1e6:
        return f"{n:,.0f}"
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def percent(new: float, old: float) -> str:
    """The increase in percent, to 3 significant digits."""
    return f"{100 * (new - old) / old:+.3g} %"


def cost_columns(cost: Cost, batch: int) -> str:
    peak = "—" if math.isnan(cost.peak_mb) else f"{cost.peak_mb:.0f}"
    return f"{cost.gflops / batch:>11.1f}{cost.ms:>10.0f}{cost.ms / batch:>10.0f}{peak:>10}"


def print_latency(results: list[Result], device: torch.device) -> None:
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    print(f"\nPer NFE: one denoiser call, float32, {device}{threads}")
    columns = ("params", "published", "sample", "batch", "GFLOPs/img")
    print(f"{'backbone':<{NAME}}{''.join(f'{c:>11}' for c in columns)}", end="")
    print(f"{'ms/call':>10}{'ms/img':>10}{'peak MB':>10}")
    for r in results:
        sample = "×".join(map(str, r.case.shape))
        row = f"{r.case.name:<{NAME}}{params_text(r.params):>11}{r.case.published:>11}{sample:>11}"
        if r.call is None:
            print(f"{row}   {r.note}")
            continue
        print(f"{row}{r.batch:>11}{cost_columns(r.call, r.batch)}")
        if r.decode is not None:
            side = r.case.pixels
            row = f"{'  VAE decode':<{NAME}}{params_text(r.decoder_params):>11}{'':>11}"
            print(f"{row}{f'3×{side}×{side}':>11}{r.batch:>11}{cost_columns(r.decode, r.batch)}")


def print_blocks(result: Result) -> None:
    """The blocks measured and the full depth extrapolated from them."""
    batch, reduced = result.batch, result.reduced
    print(f"\n{result.case.name}: measured with 1 block of each kind, batch {batch}")
    print(f"{'':<{NAME}}{'params':>11}{'GFLOPs/img':>11}{'ms/call':>10}{'peak MB':>10}")
    for path, (params, cost) in result.blocks.items():
        print(f"{BLOCK_NAMES.get(path, path):<{NAME}}{params_text(params):>11}", end="")
        print(f"{cost.gflops / batch:>11.1f}{cost.ms:>10.0f}")
    depth = result.case.depth
    one_each = result.params - sum((depth[p] - 1) * n for p, (n, _) in result.blocks.items())
    print(f"{'network with one block of each kind':<{NAME}}{params_text(one_each):>11}", end="")
    print(f"{reduced.gflops / batch:>11.1f}{reduced.ms:>10.0f}{reduced.peak_mb:>10.0f}")
    label = f"{' + '.join(map(str, depth.values()))} blocks, extrapolated"
    print(f"{label:<{NAME}}{params_text(result.params):>11}", end="")
    print(f"{result.call.gflops / batch:>11.1f}{result.call.ms:>10.0f}")


def print_overhead(results: list[Result]) -> None:
    print(f"\nSpanLift against DyWeight at NFE {NFE}: its operator's parameters, and the increase")
    print(f"{'backbone':<{NAME}}{'operator':>12}{'params':>12}{'FLOPs':>12}{'latency':>12}")
    for r in results:
        base, lifted = r.solver_params
        row = f"{r.case.name:<{NAME}}{params_text(lifted - base):>12}"
        row += f"{percent(r.params + lifted, r.params + base):>12}"
        if r.rollouts is None:
            print(f"{row}{'—':>12}{'—':>12}")
            continue
        old, new = r.rollouts
        row += f"{percent(new['gflops'], old['gflops']):>12}"
        print(f"{row}{percent(new['ms'], old['ms']):>12}")
    label = "paper: EDM ImageNet-64, A6000, batch 64"
    print(f"{label:<{NAME}}{'':>12}{''.join(f'{p:>12}' for p in PAPER)}")


# --- main ----------------------------------------------------------------------------------------


def selected(only: str) -> list[Case]:
    groups = {group.strip() for group in only.split(",")}
    unknown = groups - {"edm", "sana", "flux"}
    if unknown:
        raise SystemExit(f"--only takes edm, sana and flux; unknown: {', '.join(sorted(unknown))}")
    return [case for case in cases() if case.group in groups]


def quiet() -> None:
    """Leave out the libraries' notes on random weights and deprecations."""
    diffusers_logging.set_verbosity_error()
    transformers_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="edm,sana,flux", help="comma-separated: edm, sana, flux")
    p.add_argument("--device", default="cpu", type=device_option, help="cpu or cuda (cuda:N)")
    p.add_argument("--batch", type=int, help="images per call for every backbone")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per measurement (median)")
    p.add_argument(
        "--flux-blocks",
        action="store_true",
        help="where FLUX.1-dev does not fit, measure its widths with 1 + 1 blocks",
    )
    args = p.parse_args()
    quiet()
    settings = Settings(torch.device(args.device), args.batch, args.repeats)
    results = []
    for case in selected(args.only):
        results.append(run_case(case, settings))
        if case.group == "flux" and results[-1].call is None and args.flux_blocks:
            results.append(run_case(flux_blocks_case(), settings))
    print_latency(results, settings.device)
    for result in results:
        if result.blocks:
            print_blocks(result)
    print_overhead(results)
    progress("done")


if __name__ == "__main__":
    main()
