"""`spanlift doctor --memory SWEEP`: each configuration's peak memory per GPU, for its fit and its
evaluation, predicted from a probe of the sweep's own backbone before any GPU hour is spent.

    fit   weights (backbone, the loss's networks, solver) + FitProbe.peak at the fit's memory
          settings and batch per worker (platform/fitting/memory_plan.py)
    eval  weights (backbone, detector and metric networks) + a pass of `evaluation.batch_size`
          samples: measured at one and two samples, linear beyond (`PassCost`); each
          solver's rollout measured, what follows it (decoding, metrics) once (`EvaluationProbe`;
          on a CPU one backbone call per input shape runs, `replayed_calls.py`)

A fit that does not fit the GPU with MARGIN to spare is a FAIL line naming the settings that
`checkpoint: auto` would choose there, and their peak; an evaluation names the batch that fits.
The probe runs where the doctor runs: on its GPU, or on the CPU with the real architecture (a
tensor takes the same bytes on either; CUDA's own context, about 0.5 GiB, and the allocator's
rounding are not in the figures, which MARGIN covers).
"""

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from spanlift.backbones import Backbone
from spanlift.backbones.loaded import loaded_backbone
from spanlift.errors import SpanliftError
from spanlift.platform.doctor.replayed_calls import ReplayedCalls, rollout_peak
from spanlift.platform.doctor.report import Outcome
from spanlift.platform.evaluation.evaluator import Evaluator
from spanlift.platform.evaluation.metrics import SampleMetric, chosen
from spanlift.platform.evaluation.sample_metrics import measures_of
from spanlift.platform.fitting.fit import FitSettings, endpoint_loss
from spanlift.platform.fitting.losses import loss_networks
from spanlift.platform.fitting.memory_plan import (
    FitProbe,
    candidate_checkpoints,
    choose,
    loss_cost,
    probe_backbone,
    probe_solver,
    weights_of,
)
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.platform.sampling.teacher import TeacherSet
from spanlift.platform.sampling.tensor_memory import MARGIN, device_peak, halvings, module_bytes
from spanlift.platform.sweep.config import SweepConfig
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build, is_learnable

GIB = 2**30


def gib(size: float) -> str:
    """A size in GiB, or in MiB below one GiB."""
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size / 2**20:.0f} MiB"


def probe_sample(backbone: Backbone) -> TeacherSet:
    """One sample to probe with: seed 0's noise and conditioning, an endpoint of its shape."""
    noise = seed_noise([0], backbone.shape)
    cond = backbone.conditioning([0])
    return TeacherSet(torch.tensor([0]), noise, 0.5 * noise, cond=cond)


@dataclass
class SweepProbe:
    """The sweep's backbone on the probing device and what was measured of it, each once."""

    config: SweepConfig
    device: torch.device
    gpu_bytes: int

    def __post_init__(self) -> None:
        backbone = loaded_backbone(self.config.backbone, self.config.backbone_options)
        self.backbone = backbone.to(self.device)  # the copy the evaluator uses too
        self.one = probe_sample(self.backbone)
        self.budget = int(self.gpu_bytes * (1 - MARGIN))
        self.calls = cache(self.call_probe)
        self.losses = cache(self.loss_probe)

    def call_probe(self, precision: str) -> Any:
        return probe_backbone(self.backbone, self.one, precision, self.device)

    def loss_probe(self, settings: FitSettings) -> tuple[Any, int]:
        """The loss's cost on one sample and the bytes of its networks."""
        loss = endpoint_loss(settings, self.backbone)
        target = self.one.endpoints.to(self.device)
        networks = module_bytes(*loss_networks(loss)) if loss_networks(loss) else 0
        weights = weights_of(self.backbone)
        return loss_cost(loss, target, settings.precision, self.device, weights), networks

    def fit(self, spec: SolverSpec, settings: FitSettings) -> Outcome:
        """The fit of `spec` with `settings`: its predicted peak against the GPU."""
        solver = build(spec, self.backbone).to(self.device)
        name = f"fit {spec.label()} nfe={spec.nfe}"
        if not is_learnable(solver):
            return Outcome("skip", name, "nothing to fit")
        loss, networks = self.losses(settings)
        x = self.backbone.prior(self.one.noise.to(self.device))
        probe = FitProbe(self.calls(settings.precision), probe_solver(solver, x), loss)
        weights = module_bytes(self.backbone) + networks + module_bytes(solver)
        batch = settings.batch_size // self.config.resources.workers
        asked = f"{asked_settings(settings)}, batch {batch}"
        if settings.checkpoint != "auto":
            samples = settings.micro_batch or batch
            peak = weights + probe.peak(settings.checkpoint, samples)
            if peak <= self.budget:
                return Outcome("pass", name, f"{gib(peak)} with {asked}")
            return Outcome(
                "FAIL", name, f"{gib(peak)} with {asked}; {self.plan(probe, batch, weights)}"
            )
        return Outcome("pass", name, f"{asked}: {self.plan(probe, batch, weights)}")

    def plan(self, probe: FitProbe, batch: int, weights: int) -> str:
        """What `checkpoint: auto` chooses on the GPU, or why nothing fits."""
        checkpoints = candidate_checkpoints(bool(self.backbone.blocks()))
        try:
            checkpoint, samples = choose(
                probe, batch, self.budget - weights, checkpoints, halvings(batch)
            )
        except SpanliftError as exc:
            return f"nothing fits: {exc}"
        micro = f", micro_batch {samples}" if samples < batch else ""
        peak = weights + probe.peak(checkpoint, samples)
        return f"fits with checkpoint {checkpoint}{micro}: {gib(peak)}"


@dataclass
class EvaluationProbe:
    """The memory of the sweep's evaluation passes, per solver. A pass is a rollout, then the
    decoding and metrics of its samples (`Evaluator.shard_part`); the second part is the same
    whichever solver drew the samples, so it is measured once (with the first solver's samples)
    and each solver's rollout on its own. A pass's peak is the larger of the two parts', the
    second on top of the rollout's noise, conditioning and endpoints that it holds."""

    probe: SweepProbe
    evaluator: Evaluator

    def __post_init__(self) -> None:
        self.metrics, self.missing = available_metrics(self.probe.config, self.evaluator)
        self.after: dict[int, int] = {}
        self.replayed = ReplayedCalls(self.evaluator.backbone)
        self.evaluator.load_networks(self.metrics)  # their bytes are the weights', not a pass's

    @torch.no_grad()
    def peak(self, solver: torch.nn.Module, samples: int) -> int:
        """Peak bytes of a pass over `samples` seeds with `solver`."""
        seeds, kept = list(range(samples)), {}

        def rollout() -> None:
            noise, cond = self.evaluator.shard_inputs(seeds)
            kept["pass"] = (noise, cond, *self.evaluator.timed_rollout(solver, noise, cond))

        during = rollout_peak(self.probe.device, self.replayed, rollout)
        if samples not in self.after:
            noise, cond, seconds, endpoints = kept["pass"]
            held = sum(
                t.untyped_storage().nbytes() for t in (noise, cond, endpoints) if t is not None
            )

            def after() -> Any:
                states = self.evaluator.sample_states
                return states(seeds, noise, cond, endpoints, seconds, self.metrics)

            self.after[samples] = held + device_peak(self.probe.device, after)
        return max(during, self.after[samples])

    def outcome(self, spec: SolverSpec) -> Outcome:
        """A pass of the evaluation's batch of `spec`'s samples, and the batch that fits."""
        name = f"eval {spec.label()} nfe={spec.nfe}"
        solver = build(spec, self.probe.backbone).to(self.probe.device)
        one, two = (self.peak(solver, samples) for samples in (1, 2))
        weights = module_bytes(*evaluator_networks(self.evaluator))
        per_sample = max(two - one, 1)
        setting = self.probe.config.evaluation.batch_size
        budget = self.probe.budget
        fitting = [b for b in halvings(256) if weights + one + (b - 1) * per_sample <= budget]
        fits = max(fitting or [0])
        batch = fits if setting == "auto" else int(setting)
        peak = weights + one + (max(batch, 1) - 1) * per_sample
        skipped = (
            f" (left out, unavailable here: {', '.join(self.missing)})" if self.missing else ""
        )
        detail = f"{gib(peak)} at batch {batch} ({setting}); at most {fits} fit{skipped}"
        return Outcome("pass" if batch and peak <= budget else "FAIL", name, detail)


def asked_settings(settings: FitSettings) -> str:
    micro = f", micro_batch {settings.micro_batch}" if settings.micro_batch else ""
    return f"checkpoint {settings.checkpoint}{micro}, {settings.precision}"


def available_metrics(config: SweepConfig, evaluator: Evaluator) -> tuple[list[str], list[str]]:
    """The sweep's sample metrics this machine can compute, and those it cannot (e.g. ImageReward
    without its files): named, and left out of the probe."""
    asked = chosen(config.evaluation.metrics, config.evaluation.options, SampleMetric)
    wanted = [metric.name for metric in asked]
    _, unavailable = measures_of(wanted, evaluator.setup, evaluator.traits())
    return [m for m in wanted if m not in unavailable], list(unavailable)


def evaluator_networks(evaluator: Evaluator) -> list[torch.nn.Module]:
    """The networks an evaluator has loaded: its backbone and whichever metric networks ran."""
    return evaluator.loaded_modules()


def memory_outcomes(config: SweepConfig, gpu_bytes: int, device: torch.device) -> Iterator[Outcome]:
    """One line per configuration's fit, then per evaluation (one per distinct rows per call)."""
    from spanlift.platform.sweep.evaluation import evaluator_setup

    probe = SweepProbe(config, device, gpu_bytes)
    for entry, spec in config.grid():
        yield probe.fit(spec, config.fit_of(entry))
    if not config.evaluation.metrics:
        return
    with tempfile.TemporaryDirectory() as folder:  # the evaluator's caches
        evaluation = EvaluationProbe(probe, Evaluator(evaluator_setup(config, Path(folder))))
        for spec in distinct_rollouts(config.trials(), probe.backbone):
            yield evaluation.outcome(spec)


def distinct_rollouts(specs: list[SolverSpec], backbone: Backbone) -> list[SolverSpec]:
    """One spec per solver, its lowest NFE: without gradients a rollout's memory depends on the
    rows of one call, not on how many calls it makes."""
    lowest: dict[str, SolverSpec] = {}
    for spec in sorted(specs, key=lambda s: s.nfe):
        lowest.setdefault(spec.name, spec)
    return list(lowest.values())
