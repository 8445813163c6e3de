"""Peak memory and time of one fit update at the backbones' real size, for each memory setting.

The fit's own path (`objective` + `Optimization.step`, the memory plan of `FitSettings`) fits
SpanLift on DyWeight with AFS (spatial operator, the defaults) on random teacher endpoints, with
random-weight networks at their real architecture as benchmarks/backbone_latency.py builds them:
the EDM CIFAR-10- and ImageNet-64-size U-Nets with the mse loss, SANA-600M at 512 px (CFG, bfloat16
weights as sweeps/sana.yaml loads them) with the latent loss (DC-AE decode + a random DINOv2-base
written by benchmarks/random_pipelines.py). Per batch, NFE and setting (checkpoint none / calls /
blocks / selective, precision float32 / bfloat16, micro_batch):

- peak: the most one update holds above what was allocated before it (the resident weights),
  the fit's first update, optimizer state included: `device_peak` (TensorPeak on the CPU,
  torch.cuda.max_memory_allocated with --device cuda);
- kept/sample/NFE: what is still allocated when the loss's forward returns (what backward will
  use), per sample of a backward pass and per NFE;
- s/update: the median of --repeats updates after the measured one, interleaved with the other
  settings of that batch and NFE and with one backbone forward + its backward to the input at
  that batch, weights frozen ("f+b"; for SANA also the loss's forward + backward, "loss f+b");
- predicted: `FitProbe.peak` from the batch-1 probe (backbone call, solver, loss: the parts of
  `memory_plan.probe_fit`), and its error against the measured peak.

The summary checks issue 40's targets: with checkpoint calls, kept bytes per sample grow from NFE 3
to 5 by no more than the solver's own state (measured with a stand-in model that keeps nothing),
and an update costs ≤ 1.35 × the plain one; the plain update ≤ 1.2 × NFE × f+b; the prediction
within 15 % of the measured peak; with checkpoint selective an update costs ≤ 1.25 × the plain
one by the process's CPU time and keeps ≤ 0.35 × its bytes per sample (beside calls' figures).

FLUX.1-dev at 1024 px does not fit here: its widths with 1 double- and 1 single-stream block
(bfloat16) give per-block kept and peak bytes, with and without recomputation, and the full depth
(19 + 38 blocks) is extrapolated from them: kept = reduced + Σ (n − 1) · block, the transient of
backward as measured on the reduced network. Its latent loss is measured at 512 px and scaled by
4 (activations grow with pixels). From these, the peak of sweeps/flux.yaml's fit (batch 4, NFE 9)
per memory setting, weights sized on the meta device at the released configurations.

    python benchmarks/fit_memory.py [--only cifar,imagenet,sana,flux] [--device cpu|cuda]
        [--repeats 3] [--threads N] [--wide] [--batches 16,64] [--sana-batch 8]
        [--nfes 3,5] [--settings none,selective,calls]

The default run: the CIFAR-10-size net at batch 1, 2, 4 × NFE 3, 5 with checkpoint none, calls,
blocks and precision bfloat16, and at batch 4 also calls in bfloat16 and micro-batches of 2; the
ImageNet-64-size net at batch 1 × NFE 3 (none, calls, bfloat16) and NFE 5 (none, calls); 3 timed
updates each; SANA at batch 1 × NFE 3 (none, calls, blocks; 2 timed) and NFE 5 (calls; measured,
not timed); the FLUX blocks. About 30 minutes on 2 CPU cores, most of it SANA (its latent
loss decodes 512 px images with gradients) and FLUX at 1024 px. `--wide`: every setting at every
batch for the CIFAR-size net, batch 1, 2, 4 for ImageNet-64, SANA at NFE 5 with none and blocks,
bfloat16 autocast and batch 2 (hours on a CPU). `--repeats` caps the timed updates. On a GPU the
machine needs torch, diffusers and transformers (no Ray, MLflow or Optuna).
"""

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import torch
from backbone_latency import (  # benchmarks/ is on sys.path when run as a script
    FLUX_DEPTH,
    Networks,
    RandomEDM,
    cifar10_size,
    dc_ae_f32c32,
    flux_backbone,
    flux_transformer,
    flux_vae,
    quiet,
    sana_backbone,
    sana_transformer,
)
from random_pipelines import built_in, save_dinov2
from torch import Tensor, nn
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    Dinov2Config,
    Dinov2Model,
    T5Config,
    T5EncoderModel,
)

from spanlift.backbones import Backbone
from spanlift.backbones.base import conditioned
from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.unet import UNet, imagenet64_size
from spanlift.cli.devices import device_option
from spanlift.platform.fitting.fit import FitSettings, endpoint_loss, objective
from spanlift.platform.fitting.memory import MemoryPlan, blocks_recomputed, recomputed
from spanlift.platform.fitting.memory_plan import (
    BackboneProbe,
    CallCost,
    FitProbe,
    SolverProbe,
    call_cost,
    loss_cost,
    probe_backbone,
    probe_solver,
    weights_of,
)
from spanlift.platform.fitting.optimization import Optimization
from spanlift.platform.fitting.update_cost import timed
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.sampling.tensor_memory import (
    MARGIN,
    TensorPeak,
    device_peak,
    saved_for_backward,
)
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build

MIB, GIB = 2**20, 2**30
SOLVER = {"base": "dyweight", "base_settings": {"afs": True}}
"""SpanLift on DyWeight with the analytical first step (issue 40's fit)."""
TARGETS = {
    "calls_time": 1.35,
    "plain_time": 1.2,
    "prediction": 0.15,
    "selective_time": 1.25,
    "selective_kept": 0.35,
}
SCALARS = 64
"""Bytes of kept growth per added NFE read as the solver's own (a few float32 scalars per step,
such as its σ, beside the state-sized tensors the stand-in rollout counts)."""
STARTED = time.perf_counter()


def progress(text: str) -> None:
    print(f"[{time.perf_counter() - STARTED:5.0f} s] {text}", flush=True)


# --- what is measured ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """The memory settings of one fit."""

    checkpoint: str = "none"
    precision: str = "float32"
    micro_batch: int = 0

    def label(self) -> str:
        precision = "" if self.precision == "float32" else " bf16"
        micro = f" micro {self.micro_batch}" if self.micro_batch else ""
        return f"{self.checkpoint}{precision}{micro}"

    def plain(self) -> bool:
        return self == PLAIN


PLAIN = Setting()
CALLS, BLOCKS, SELECTIVE = Setting("calls"), Setting("blocks"), Setting("selective")
HALF, HALF_CALLS = Setting(precision="bfloat16"), Setting("calls", "bfloat16")


@dataclass(frozen=True)
class Group:
    """One batch and NFE, and the settings measured there (timed interleaved, `timed` times)."""

    batch: int
    nfe: int
    settings: tuple[Setting, ...]
    timed: int


@dataclass
class Model:
    """A built backbone, the loss its sweep fits with, the groups measured on it."""

    name: str
    backbone: Backbone
    loss: str
    loss_options: dict[str, Any]
    groups: list[Group]
    weights: str  # the weights' dtype, as printed


@dataclass
class Row:
    model: str
    batch: int
    nfe: int
    setting: Setting
    peak: int
    kept: int
    samples: int  # per backward pass
    predicted: int
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # the process's CPU time
    call_seconds: list[float] = field(default_factory=list)  # f+b at the batch
    loss_seconds: list[float] = field(default_factory=list)  # the loss's f+b (SANA)
    solver_kept: int = 0  # the solver's own kept bytes per sample (stand-in model)
    call_input: int = 0  # bytes of one call's input per sample (what a recomputed call keeps)

    def time(self) -> float:
        return statistics.median(self.seconds) if self.seconds else math.nan

    def error(self) -> float:
        return (self.predicted - self.peak) / self.peak


# --- one update ----------------------------------------------------------------------------------


class Allocated:
    """Bytes allocated on `device` since the block began, now and at most: the CUDA allocator's
    figures, or TensorPeak's on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.tracker = device, TensorPeak()

    def __enter__(self) -> "Allocated":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.tracker.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type != "cuda":
            self.tracker.__exit__(*exc)

    def now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) - self.base
        return self.tracker.live

    def peak(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return self.tracker.peak


class Update:
    """One fit's update with `setting` at `batch` samples: the fit's objective and optimizer."""

    def __init__(self, model: Model, group: Group, setting: Setting, loss: Callable) -> None:
        backbone, batch = model.backbone, group.batch
        self.backbone, self.setting = backbone, setting
        self.solver = build(SolverSpec("spanlift", group.nfe, settings=SOLVER), backbone).to(
            backbone_device(backbone)
        )
        self.teacher = random_teacher(backbone, batch)
        self.settings = FitSettings(
            batch_size=batch,
            loss=model.loss,
            loss_options=model.loss_options,
            checkpoint=setting.checkpoint,
            precision=setting.precision,
            micro_batch=setting.micro_batch,
        )
        self.plan = MemoryPlan.of(setting.checkpoint, setting.precision, setting.micro_batch, batch)
        params = [p for p in self.solver.parameters() if p.requires_grad]
        self.steps = Optimization.set_up(
            self.solver, params, self.teacher, self.settings, self.plan
        )
        self.objective = objective(self.solver, self.settings, backbone, self.plan, loss)
        self.after_forward: Callable[[], None] = lambda: None

    def loss(self, *args: Any) -> Tensor:
        value = self.objective(*args)
        self.after_forward()
        return value

    def run(self) -> None:
        with self.plan.blocks_of(self.backbone.blocks):
            self.steps.step(self.solver, self.solver, self.loss, self.teacher, 0, self.settings)

    def measured(self, device: torch.device) -> tuple[int, int]:
        """(peak, kept) of one update: its peak, and the most allocated when a pass's loss
        forward returned."""
        kept: list[int] = []
        with Allocated(device) as allocated:
            self.after_forward = lambda: kept.append(allocated.now())
            self.run()
            peak = allocated.peak()
        self.after_forward = lambda: None
        return peak, max(kept)


def backbone_device(backbone: Backbone) -> torch.device:
    return next(backbone.parameters()).device


def random_teacher(backbone: Backbone, samples: int) -> TeacherSet:
    """`samples` seeds with random noise and endpoints (their values do not change the cost)."""
    generator = torch.Generator().manual_seed(samples)
    noise = torch.randn(samples, *backbone.shape, generator=generator)
    endpoints = 0.5 * torch.randn(samples, *backbone.shape, generator=generator)
    cond = backbone.conditioning(list(range(samples)))
    return TeacherSet(torch.arange(samples), noise, endpoints, cond=cond)


def call_forward_backward(backbone: Backbone, batch: int) -> Callable[[], None]:
    """One backbone call at `batch` with its backward to the input (weights frozen)."""
    device = backbone_device(backbone)
    teacher = random_teacher(backbone, batch)
    x = backbone.prior(teacher.noise.to(device))
    cond = None if teacher.cond is None else teacher.cond.to(device)
    denoiser = conditioned(backbone, cond)
    sigma = torch.tensor(math.sqrt(backbone.sigma_min * backbone.sigma_max), device=device)

    def run() -> None:
        state = x.detach().requires_grad_(True)
        out = denoiser(state, sigma)
        torch.autograd.grad(out, state, torch.ones_like(out))

    return run


def loss_forward_backward(backbone: Backbone, loss: Callable, batch: int) -> Callable[[], None]:
    """The endpoint loss at `batch` with its backward to the student's endpoint."""
    device = backbone_device(backbone)
    target = random_teacher(backbone, batch).endpoints.to(device)

    def run() -> None:
        student = (target + 0.01).requires_grad_(True)
        torch.autograd.grad(loss(student, target), student)

    return run


# --- one backbone --------------------------------------------------------------------------------


class Probes:
    """The batch-1 probes of a model, each measured once (per precision)."""

    def __init__(self, model: Model, loss: Callable) -> None:
        self.model, self.loss = model, loss
        self.device = backbone_device(model.backbone)
        self.one = random_teacher(model.backbone, 1)
        self.backbone = cache(self.backbone_probe)
        self.losses = cache(self.loss_probe)

    def backbone_probe(self, precision: str) -> BackboneProbe:
        progress(f"{self.model.name}: probing one call at batch 1, {precision}")
        return probe_backbone(self.model.backbone, self.one, precision, self.device)

    def loss_probe(self, precision: str) -> CallCost:
        target = self.one.endpoints.to(self.device)
        return loss_cost(self.loss, target, precision, self.device, weights_of(self.model.backbone))

    def solver(self, update: Update) -> SolverProbe:
        x = self.model.backbone.prior(self.one.noise.to(self.device))
        return probe_solver(update.solver, x)

    def fit(self, update: Update) -> FitProbe:
        precision = update.setting.precision
        return FitProbe(self.backbone(precision), self.solver(update), self.losses(precision))


def measure_group(model: Model, group: Group, probes: Probes, repeats: int) -> list[Row]:
    """Every setting of `group`: measured once, then timed in interleaved repeats."""
    device, rows, updates = probes.device, [], []
    for setting in group.settings:
        update = Update(model, group, setting, probes.loss)
        progress(f"{model.name}: batch {group.batch}, NFE {group.nfe}, {setting.label()}")
        peak, kept = update.measured(device)
        samples = setting.micro_batch or group.batch
        fit_probe = probes.fit(update)
        predicted = fit_probe.peak(setting.checkpoint, samples)
        solver_kept = fit_probe.solver.rollout.kept
        rows.append(
            Row(model.name, group.batch, group.nfe, setting, peak, kept, samples, predicted)
        )
        rows[-1].solver_kept = solver_kept
        rows[-1].call_input = fit_probe.backbone.input
        updates.append(update)
    call = call_forward_backward(model.backbone, group.batch)
    loss = None
    if model.loss != "mse":
        loss = loss_forward_backward(model.backbone, probes.loss, group.batch)
    for repeat in range(min(repeats, group.timed)):
        progress(f"{model.name}: batch {group.batch}, NFE {group.nfe}, timed round {repeat + 1}")
        rows[0].call_seconds.append(timed(device, call))
        if loss is not None:
            rows[0].loss_seconds.append(timed(device, loss))
        for row, update in zip(rows, updates, strict=True):
            started = time.process_time()
            row.seconds.append(timed(device, update.run))
            row.cpu_seconds.append(time.process_time() - started)
    return rows


def measure_model(model: Model, repeats: int, labels: str | None = None) -> list[Row]:
    """Every group of `model`, of its settings those whose label is in the comma-separated
    `labels` (all when None)."""
    if labels is not None:
        wanted = set(labels.split(","))
        kept = [
            replace(group, settings=tuple(s for s in group.settings if s.label() in wanted))
            for group in model.groups
        ]
        model.groups = [group for group in kept if group.settings]
    loss = endpoint_loss(
        FitSettings(loss=model.loss, loss_options=model.loss_options), model.backbone
    )
    probes = Probes(model, loss)
    return [row for group in model.groups for row in measure_group(model, group, probes, repeats)]


# --- the backbones -------------------------------------------------------------------------------


class BlockedEDM(RandomEDM):
    """The EDM-size U-Net stand-in with its residual and attention blocks exposed, so that
    `checkpoint: blocks` recomputes them one at a time."""

    def blocks(self) -> list[nn.Module]:
        return self.net.net.blocks()


def edm_model(name: str, config: Any, pixels: int, groups: list[Group], device: Any) -> Model:
    torch.manual_seed(0)
    with torch.device(device):
        net = EDMPrecond(UNet(config))
    backbone = BlockedEDM(net, (config.in_channels, pixels, pixels))
    return Model(name, backbone, "mse", {}, groups, "float32")


def batch_groups(batches: list[int], nfes: tuple[int, ...] = (3, 5)) -> list[Group]:
    """Every setting at each of `batches` × `nfes` (`--batches`: the batches a GPU fits at)."""
    settings = (PLAIN, CALLS, BLOCKS, SELECTIVE, HALF, HALF_CALLS)
    return [
        Group(batch, nfe, (*settings, Setting(micro_batch=max(batch // 2, 1))), 3)
        for batch in batches
        for nfe in nfes
    ]


def cifar_groups(wide: bool) -> list[Group]:
    groups = []
    for batch in (1, 2, 4):
        more = (HALF_CALLS, Setting(micro_batch=batch // 2)) if batch == 4 or wide else ()
        more = more if batch > 1 else more[:1]
        for nfe in (3, 5):
            groups.append(Group(batch, nfe, (PLAIN, CALLS, BLOCKS, SELECTIVE, HALF, *more), 3))
    return groups


def imagenet_groups(wide: bool) -> list[Group]:
    if wide:
        return [
            Group(batch, nfe, (PLAIN, CALLS, BLOCKS, HALF, HALF_CALLS), 3)
            for batch in (1, 2, 4)
            for nfe in (3, 5)
        ]
    return [Group(1, 3, (PLAIN, CALLS, HALF), 3), Group(1, 5, (PLAIN, CALLS), 3)]


def sana_groups(wide: bool) -> list[Group]:
    if wide:
        return [
            Group(1, 3, (PLAIN, CALLS, BLOCKS, HALF_CALLS), 2),
            Group(1, 5, (PLAIN, CALLS, BLOCKS), 2),
            Group(2, 3, (PLAIN, CALLS), 2),
        ]
    return [Group(1, 3, (PLAIN, CALLS, BLOCKS), 2), Group(1, 5, (CALLS,), 0)]


def sana_batch_groups(batch: int) -> list[Group]:
    """sweeps/sana.yaml's fit at `batch`: every checkpoint setting at NFE 3, calls at NFE 7."""
    return [Group(batch, 3, (PLAIN, CALLS, BLOCKS), 2), Group(batch, 7, (CALLS,), 2)]


def sana_model(groups: list[Group], dinov2: Path, device: Any) -> Model:
    """SANA-600M at 512 px in bfloat16 with the latent loss (DINOv2 from `dinov2`)."""
    torch.manual_seed(0)
    with torch.device(device), built_in(torch.bfloat16):
        networks = Networks(sana_transformer(), dc_ae_f32c32())
    backbone = sana_backbone(networks).to(device)
    options = {"dinov2_path": str(dinov2), "c": 0.1}
    return Model("SANA-600M 512 px", backbone, "latent", options, groups, "bfloat16")


# --- FLUX: per block, extrapolated ---------------------------------------------------------------


@dataclass
class BlockFigures:
    """One block's bytes at batch 1: kept for backward, peak through backward, and its inputs
    (what it keeps when recomputed)."""

    kept: int
    peak: int
    inputs: int


def block_inputs(block: nn.Module, run: Callable[[], Any]) -> tuple[tuple, dict]:
    """The arguments `block` is called with during `run()`."""
    seen: dict[str, Any] = {}

    def keep(module: nn.Module, args: tuple, kwargs: dict) -> None:
        seen.update(args=args, kwargs=kwargs)

    handle = block.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    return seen["args"], seen["kwargs"]


def block_figures(block: nn.Module, kwargs: dict, device: torch.device) -> BlockFigures:
    """A block alone with gradients to its hidden states (module docstring)."""
    names = ("hidden_states", "encoder_hidden_states")
    shared = [t for k, t in kwargs.items() if k not in names and isinstance(t, Tensor)]
    shared += [t for t in kwargs.get("image_rotary_emb") or () if isinstance(t, Tensor)]
    figures = {}

    def run() -> None:
        inputs = {k: kwargs[k].detach().requires_grad_(True) for k in names}
        with saved_for_backward([*weights_of(block), *shared]) as kept:
            out = block(**{**kwargs, **inputs})
        figures["kept"] = kept["bytes"]
        outputs = [t for t in out if isinstance(t, Tensor)]
        torch.autograd.grad(outputs, list(inputs.values()), [torch.ones_like(t) for t in outputs])

    peak = device_peak(device, run)
    inputs = sum(kwargs[k].numel() * kwargs[k].element_size() for k in names)
    return BlockFigures(figures["kept"], peak, inputs)


def untimed_probe(
    backbone: Backbone, call: Callable[[Tensor], Tensor], x: Tensor, device: torch.device
) -> BackboneProbe:
    """`probe_backbone`'s memory figures of `call` (float32 settings: no autocast), without its
    timed calls."""
    weights = weights_of(backbone)
    with blocks_recomputed(backbone.blocks()):
        blocks = call_cost(call, x, weights, device)
    plain = call_cost(call, x, weights, device)
    selective = call_cost(recomputed(call, selective=True), x, weights, device)
    with torch.no_grad():
        nograd = device_peak(device, lambda: call(x))
    return BackboneProbe(plain, blocks, selective, nograd, x.numel() * x.element_size(), 0)


def full_depth(reduced: BackboneProbe, blocks: dict[str, BlockFigures]) -> BackboneProbe:
    """FLUX.1-dev's call from the network with one block of each kind (module docstring); with
    selective recomputation the reduced network's share of kept bytes, scaled with the plain."""
    extra = {path: FLUX_DEPTH[path] - 1 for path in blocks}
    kept = reduced.call.kept + sum(n * blocks[p].kept for p, n in extra.items())
    inputs = reduced.blocks.kept + sum(n * blocks[p].inputs for p, n in extra.items())
    call = CallCost(kept, kept + reduced.call.peak - reduced.call.kept)
    by_block = CallCost(inputs, inputs + reduced.blocks.peak - reduced.blocks.kept)
    share = reduced.selective.kept * kept // reduced.call.kept
    selective = CallCost(share, share + reduced.selective.peak - reduced.selective.kept)
    return BackboneProbe(
        call, by_block, selective, reduced.nograd, reduced.input, reduced.fixed_rows
    )


def released_weights() -> dict[str, int]:
    """Parameters of FLUX.1-dev's networks at the released configurations (meta device): the
    transformer, the VAE, T5-XXL's encoder and CLIP-L's text model; and DINOv2-base."""
    with torch.device("meta"):
        networks = {
            "transformer": flux_transformer(19, 38),
            "vae": flux_vae(),
            "t5": T5EncoderModel(
                T5Config(
                    vocab_size=32128,
                    d_model=4096,
                    d_ff=10240,
                    d_kv=64,
                    num_heads=64,
                    num_layers=24,
                    feed_forward_proj="gated-gelu",
                )
            ),
            "clip": CLIPTextModel(
                CLIPTextConfig(
                    hidden_size=768,
                    intermediate_size=3072,
                    num_attention_heads=12,
                    projection_dim=768,
                )
            ),
            "dinov2": Dinov2Model(Dinov2Config()),
        }
    return {name: sum(p.numel() for p in net.parameters()) for name, net in networks.items()}


@dataclass
class FluxFigures:
    reduced: BackboneProbe
    blocks: dict[str, BlockFigures]
    full: BackboneProbe
    loss: CallCost  # at 1024 px, scaled from 512 px
    decode_nograd: int  # at 1024 px, scaled from 512 px
    solvers: dict[int, SolverProbe]
    weights: dict[str, int]


def measure_flux(device: torch.device, dinov2: Path) -> FluxFigures:
    progress("FLUX.1-dev widths, 1 + 1 blocks, bfloat16: building")
    torch.manual_seed(0)
    with torch.device(device), built_in(torch.bfloat16):
        networks = Networks(flux_transformer(1, 1), flux_vae())
    backbone = flux_backbone(networks).to(device)
    one = random_teacher(backbone, 1)
    x = backbone.prior(one.noise.to(device))
    sigma = torch.tensor(1.0, device=device)
    denoiser = conditioned(backbone, one.cond.to(device))
    progress("FLUX: the reduced network's call at 1024 px")
    reduced = untimed_probe(backbone, lambda state: denoiser(state, sigma), x, device)
    blocks = {}
    for path in FLUX_DEPTH:
        progress(f"FLUX: {path} alone, with gradients")
        block = networks.denoiser.get_submodule(path)
        _, kwargs = block_inputs(block, lambda: denoiser(x, sigma))
        blocks[path] = block_figures(block, kwargs, device)
    progress("FLUX: the latent loss and a decode at 512 px")
    settings = FitSettings(loss="latent", loss_options={"dinov2_path": str(dinov2), "c": 0.1})
    loss = endpoint_loss(settings, backbone)
    latent = torch.randn(1, 16, 64, 64, device=device)
    half = loss_cost(loss, latent, "float32", device, weights_of(backbone))
    with torch.no_grad():
        decode = device_peak(device, lambda: backbone.decode(latent))
    solvers = {
        nfe: probe_solver(
            build(SolverSpec("spanlift", nfe, settings=SOLVER), backbone).to(device), x
        )
        for nfe in (5, 9)
    }
    loss_1024 = CallCost(4 * half.kept, 4 * half.peak)
    return FluxFigures(
        reduced,
        blocks,
        full_depth(reduced, blocks),
        loss_1024,
        4 * decode,
        solvers,
        released_weights(),
    )


# --- printing ------------------------------------------------------------------------------------


def mib(size: float) -> str:
    return f"{size / MIB:,.0f}"


def size_text(size: float) -> str:
    """Bytes, KiB or MiB, whichever reads best."""
    if abs(size) < 2**10:
        return f"{size:.0f} bytes"
    return f"{size / 2**10:.1f} KiB" if abs(size) < MIB else f"{size / MIB:.1f} MiB"


def print_rows(rows: list[Row], device: torch.device) -> None:
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    print(f"\nOne fit update, SpanLift on DyWeight (AFS), on {device}{threads}")
    header = (
        "model", "batch", "NFE", "setting", "peak MiB", "kept/smp/NFE", "predicted", "error",
        "s/update", "× plain", "f+b s", "plain/(NFE·f+b)",
    )  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    plain = {(r.model, r.batch, r.nfe): r for r in rows if r.setting.plain()}
    for row in rows:
        base = plain.get((row.model, row.batch, row.nfe))
        ratio = row.time() / base.time() if base and not row.setting.plain() else math.nan
        cells = [
            row.model,
            str(row.batch),
            str(row.nfe),
            row.setting.label(),
            mib(row.peak),
            f"{row.kept / (row.samples * row.nfe) / MIB:.1f}",
            mib(row.predicted),
            f"{100 * row.error():+.1f} %",
            f"{row.time():.2f}",
            "" if math.isnan(ratio) else f"{ratio:.2f}",
            f"{statistics.median(row.call_seconds):.2f}" if row.call_seconds else "",
            plain_ratio(row),
        ]
        print("| " + " | ".join(cells) + " |")


def plain_ratio(row: Row) -> str:
    """plain / (NFE · f+b), and with the loss's f+b in the denominator where timed."""
    if not row.setting.plain() or not row.call_seconds or not row.seconds:
        return ""
    call = statistics.median(row.call_seconds)
    text = f"{row.time() / (row.nfe * call):.2f}"
    if row.loss_seconds:
        loss = statistics.median(row.loss_seconds)
        text += f" ({row.time() / (row.nfe * call + loss):.2f} with loss f+b {loss:.1f} s)"
    return text


def print_targets(rows: list[Row]) -> None:
    """Each target of issue 40 as measured: met or missed, and by how much."""
    print("\nTargets")
    by_key = {(r.model, r.batch, r.nfe, r.setting): r for r in rows}
    for row in rows:
        if row.setting.checkpoint != "calls" or row.nfe != 5:
            continue
        low = by_key.get((row.model, row.batch, 3, row.setting))
        if low is None:
            continue
        growth = (row.kept / row.samples - low.kept / low.samples) / 2
        state = (row.solver_kept - low.solver_kept) / 2
        over = growth - (state + row.call_input)
        verdict = "met" if over <= SCALARS else f"missed by {size_text(over)}"
        verdict += f" ({size_text(over)} beyond them)" if over > 0 else ""
        print(
            f"  kept growth per sample per added NFE, {row.model} batch {row.batch} "
            f"{row.setting.label()}: {growth / MIB:.3f} MiB against the solver's own state "
            f"{state / MIB:.3f} MiB + the call's input {row.call_input / MIB:.3f} MiB: {verdict}"
        )
    plain = {(r.model, r.batch, r.nfe): r for r in rows if r.setting.plain()}
    for row in rows:
        base = plain.get((row.model, row.batch, row.nfe))
        if base is None or not row.seconds or not base.seconds:
            continue
        if row.setting.checkpoint in ("calls", "blocks") and row.setting.precision == "float32":
            ratio = row.time() / base.time()
            limit = TARGETS["calls_time"]
            verdict = "met" if ratio <= limit else f"missed by {ratio - limit:.2f}"
            print(
                f"  {row.setting.label()} / plain, {row.model} batch {row.batch} NFE {row.nfe}: "
                f"{ratio:.2f} (≤ {limit}): {verdict}"
            )
        if row.setting.plain() and row.call_seconds:
            ratio = row.time() / (row.nfe * statistics.median(row.call_seconds))
            limit = TARGETS["plain_time"]
            verdict = "met" if ratio <= limit else f"missed by {ratio - limit:.2f}"
            print(
                f"  plain / (NFE × f+b), {row.model} batch {row.batch} NFE {row.nfe}: "
                f"{ratio:.2f} (≤ {limit}): {verdict}"
            )
    print_selective(rows, plain)
    errors = [abs(row.error()) for row in rows]
    worst = max(rows, key=lambda row: abs(row.error()))
    inside = sum(e <= TARGETS["prediction"] for e in errors)
    print(
        f"  prediction within 15 %: {inside} of {len(rows)} rows; the worst "
        f"{100 * worst.error():+.1f} % ({worst.model} batch {worst.batch} NFE {worst.nfe} "
        f"{worst.setting.label()})"
    )


def print_selective(rows: list[Row], plain: dict[tuple, Row]) -> None:
    """`selective` against the plain update: process CPU time (the median of the timed updates;
    the machine's other load does not count in it) and bytes kept per sample, with `calls`'s."""
    for row in rows:
        base = plain.get((row.model, row.batch, row.nfe))
        if row.setting.precision != "float32" or row.setting.micro_batch or base is None:
            continue
        if row.setting.checkpoint not in ("selective", "calls") or not row.cpu_seconds:
            continue
        time_ratio = statistics.median(row.cpu_seconds) / statistics.median(base.cpu_seconds)
        kept_ratio = (row.kept / row.samples) / (base.kept / base.samples)
        verdict = ""
        if row.setting.checkpoint == "selective":
            met = (
                time_ratio <= TARGETS["selective_time"] and kept_ratio <= TARGETS["selective_kept"]
            )
            verdict = ": met" if met else ": missed"
            verdict += f" (≤ {TARGETS['selective_time']}, ≤ {TARGETS['selective_kept']})"
        print(
            f"  {row.setting.label()} / plain, {row.model} batch {row.batch} NFE {row.nfe}: "
            f"CPU time {time_ratio:.2f}, kept per sample {kept_ratio:.2f}{verdict}"
        )


def print_flux(flux: FluxFigures) -> None:
    print("\nFLUX.1-dev at 1024 px, bfloat16, batch 1: blocks measured alone")
    print("| block | kept MiB | peak MiB | inputs MiB (kept when recomputed) |")
    print("|---|---|---|---|")
    for path, figures in flux.blocks.items():
        print(
            f"| {path} (× {FLUX_DEPTH[path]}) | {mib(figures.kept)} | {mib(figures.peak)} | "
            f"{figures.inputs / MIB:.1f} |"
        )
    reduced, full = flux.reduced, flux.full
    print("\n| call | kept MiB | peak MiB | with blocks recomputed: kept | peak |")
    print("|---|---|---|---|---|")
    for name, probe in (("1 + 1 blocks, measured", reduced), ("19 + 38, extrapolated", full)):
        print(
            f"| {name} | {mib(probe.call.kept)} | {mib(probe.call.peak)} | "
            f"{mib(probe.blocks.kept)} | {mib(probe.blocks.peak)} |"
        )
    print(
        f"latent loss (decode + DINOv2) at 1024 px, scaled ×4 from 512 px: peak "
        f"{mib(flux.loss.peak)} MiB; a decode without gradients {mib(flux.decode_nograd)} MiB"
    )
    print_flux_plan(flux)


def print_flux_plan(flux: FluxFigures) -> None:
    """sweeps/flux.yaml's fit (batch 4) on one 80 GB GPU, per memory setting."""
    weights = flux.weights
    bf16 = 2 * (weights["transformer"] + weights["vae"] + weights["t5"] + weights["clip"])
    resident = bf16 + 4 * weights["dinov2"]
    budget = int(80 * GIB * (1 - MARGIN))
    print(
        f"\nsweeps/flux.yaml: resident weights {resident / GIB:.1f} GiB (transformer "
        f"{weights['transformer'] / 1e9:.2f} B, T5-XXL encoder {weights['t5'] / 1e9:.2f} B, CLIP-L,"
        f" VAE in bfloat16; DINOv2-base float32); one 80 GB GPU less 15 %: "
        f"{budget / GIB:.1f} GiB"
    )
    print("| NFE | checkpoint | samples per pass | predicted peak GiB | fits |")
    print("|---|---|---|---|---|")
    for nfe, solver in flux.solvers.items():
        probe = FitProbe(flux.full, solver, flux.loss)
        for checkpoint in ("none", "calls", "blocks"):
            for samples in (4, 2, 1):
                peak = resident + probe.peak(checkpoint, samples)
                fits = "yes" if peak <= budget else "no"
                print(f"| {nfe} | {checkpoint} | {samples} | {peak / GIB:.1f} | {fits} |")
    per_sample = max(flux.full.nograd, flux.decode_nograd)
    fitting = [b for b in (32, 16, 8, 4, 2, 1) if resident + b * per_sample <= budget]
    print(
        f"evaluation without gradients: {per_sample / GIB:.2f} GiB per sample (the larger of a "
        f"call and a decode); at most {max(fitting or [0])} samples per pass fit"
    )


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="cifar,imagenet,sana,flux", help="comma-separated")
    p.add_argument("--device", default="cpu", type=device_option, help="cpu or cuda (cuda:N)")
    p.add_argument("--repeats", type=int, default=3, help="timed updates per setting (at most)")
    p.add_argument("--wide", action="store_true", help="more batches and settings (docstring)")
    p.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's own)")
    p.add_argument("--sana-batch", type=int, help="SANA at this batch (sweeps/sana.yaml: 8)")
    p.add_argument(
        "--batches", help="comma-separated batches for the EDM-size nets, every setting at each"
    )
    p.add_argument("--nfes", default="3,5", help="NFEs with --batches (comma-separated)")
    p.add_argument(
        "--settings", help="comma-separated settings to measure (labels: none,selective,calls…)"
    )
    args = p.parse_args()
    quiet()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, only = torch.device(args.device), set(args.only.split(","))
    batches = [int(b) for b in args.batches.split(",")] if args.batches else []
    nfes = tuple(int(n) for n in args.nfes.split(","))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        dinov2 = save_dinov2(Path(folder) / "dinov2-base") if only & {"sana", "flux"} else None
        if "cifar" in only:
            groups = batch_groups(batches, nfes) if batches else cifar_groups(args.wide)
            model = edm_model("CIFAR-10-size U-Net", cifar10_size(), 32, groups, device)
            rows += measure_model(model, args.repeats, args.settings)
        if "imagenet" in only:
            groups = batch_groups(batches, nfes) if batches else imagenet_groups(args.wide)
            model = edm_model("ImageNet-64-size U-Net", imagenet64_size(), 64, groups, device)
            rows += measure_model(model, args.repeats, args.settings)
        if "sana" in only:
            groups = (
                sana_batch_groups(args.sana_batch) if args.sana_batch else sana_groups(args.wide)
            )
            rows += measure_model(sana_model(groups, dinov2, device), args.repeats, args.settings)
        flux = measure_flux(device, dinov2) if "flux" in only else None
    if rows:
        print_rows(rows, device)
        print_targets(rows)
    if flux is not None:
        print_flux(flux)
    progress("done")


if __name__ == "__main__":
    main()
