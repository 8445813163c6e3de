"""One evaluator: a backbone and its metrics' networks loaded once, turning seed shards into
mergeable metric states.

A plain class, so it runs in-process as well as in a Ray actor (`pool.py` wraps it). Samples of
a shard are generated from the seeds' own noise (`seed_noise`), so a seed gives the same sample
whichever actor draws it, and merged states do not depend on how seeds were split. A metric's
network (the detector, LPIPS's AlexNet, …) loads when the metric first scores here
(`metrics/`): an evaluation loads only what its metrics need.
"""

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from spanlift.backbones.base import ACCELERATOR_BATCH
from spanlift.backbones.loaded import loaded_backbone
from spanlift.platform.evaluation.metrics import Batch, SampleMetric, Traits, chosen, made
from spanlift.platform.evaluation.metrics.states import MeanState, merge_states
from spanlift.platform.sampling.rollout import on_device, rollout, seed_noise
from spanlift.platform.sampling.score import GRID_COLUMNS, Score, score, score_batch
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER, read_teacher
from spanlift.platform.sampling.tensor_memory import PassCost, resolved_batch
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import load_solver

if TYPE_CHECKING:  # torch-fidelity (and torchvision) load only where a detector is asked for
    from spanlift.platform.detectors.registry import Detector


@dataclass(frozen=True)
class EvaluatorSetup:
    """What every evaluator of one evaluation loads: the backbone, the detector and its cache,
    CPU threads, the teacher metrics compare with, each metric's options."""

    backbone: str
    detector: str  # "": the backbone's own FID detector
    cache_dir: Path
    backbone_options: dict[str, Any] = field(default_factory=dict)
    detector_weights: Path | None = None
    threads: int | None = None
    batch_size: int | str = "auto"
    """Samples drawn, decoded and scored at once: a number, or "auto": the most (up to 256) a
    pass is predicted to hold in the device's free memory, measured at one and two samples the
    first time an evaluator draws a solver's samples (or scores images of a shape)."""
    teacher: SolverSpec = DEFAULT_TEACHER  # metrics compare with its samples from the same seeds
    options: dict[str, Any] = field(default_factory=dict)
    """Each metric's options by key, as its plug-in declares them (`metrics/`); a key left out
    is the metric's default."""


class Evaluator:
    def __init__(self, setup: EvaluatorSetup) -> None:
        if setup.threads:
            torch.set_num_threads(setup.threads)
        self.setup = setup
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.backbone = loaded_backbone(setup.backbone, setup.backbone_options).to(self.device)
        self.networks: dict[str, Any] = {}
        """Each metric's network, by metric name, once it has scored here."""
        self.pass_costs: dict[Hashable, PassCost] = {}
        """What a pass of each solver's samples (or of images of a shape) holds here, measured
        once (`batch_size`)."""

    @cached_property
    def detector(self) -> "Detector":
        """The evaluation's feature detector (the backbone's own unless the setup names one)."""
        from spanlift.platform.detectors.registry import load_detector

        setup = self.setup
        name = setup.detector or self.backbone.fid_detector
        return load_detector(name, setup.cache_dir, setup.detector_weights).to(self.device)

    @cached_property
    def teacher(self) -> torch.nn.Module:
        """The solver whose samples metrics compare with (LPIPS without observations)."""
        return load_solver(self.setup.teacher, None, self.backbone).to(self.device)

    def teacher_samples(self, noise: Tensor, cond: Tensor | None) -> Tensor:
        """The teacher's samples from `noise`, decoded and clipped as solver samples are."""
        return self.backbone.decode(rollout(self.teacher, self.backbone, noise, cond)).clamp(-1, 1)

    def network(self, metric: SampleMetric) -> Any:
        """`metric`'s network on this evaluator, loaded on first use."""
        if metric.name not in self.networks:
            self.networks[metric.name] = metric.load(self)
        return self.networks[metric.name]

    def load_networks(self, metrics: Sequence[str]) -> None:
        """Load the networks of `metrics` now rather than in their first pass."""
        for metric in chosen(metrics, self.setup.options, SampleMetric):
            self.network(metric)

    def loaded_modules(self) -> list[torch.nn.Module]:
        """The networks loaded here so far: the backbone, the teacher, the detector's, each
        metric's (`doctor --memory` counts their bytes)."""
        loaded = [self.backbone, *(self.__dict__[k] for k in ("teacher",) if k in self.__dict__)]
        if "detector" in self.__dict__:
            loaded.append(self.detector.extractor)
        return loaded + [n for n in self.networks.values() if isinstance(n, torch.nn.Module)]

    def identity(self) -> str:
        return self.detector.identity

    def traits(self) -> Traits:
        """What the backbone has (`metrics.Traits`): prompts, observations, its identity."""
        return Traits(self.prompted(), self.observed(), self.backbone_identity())

    def prompted(self) -> bool:
        """Whether the backbone gives its samples text prompts (ImageReward needs them)."""
        return self.backbone.prompts([0]) is not None

    def observed(self) -> bool:
        """Whether the backbone has observations (skill scores and LPIPS compare with them)."""
        return self.backbone.observations([FID_FIRST_SEED]) is not None

    def backbone_identity(self) -> str:
        return self.backbone.identity()

    def device_name(self) -> str:
        """The device samples are drawn on, as timings should be read: GPU model or CPU threads."""
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return f"cpu ({torch.get_num_threads()} threads)"

    @torch.no_grad()
    def solver_states(
        self,
        spec: SolverSpec,
        checkpoint: Path | None,
        seeds: Sequence[int],
        metrics: Sequence[str],
    ) -> dict[str, Any]:
        """The state of each of `metrics` (and of those every pass reports) of the solver's
        samples from `seeds` (`metrics/`), and always `sampling`: seconds spent in the solver
        (model evaluations included) and the number of samples."""
        solver = load_solver(spec, checkpoint, self.backbone).to(self.device)
        self.load_networks(metrics)  # before a pass is measured: their bytes are not a pass's
        drawn = (spec.label(), spec.nfe, str(checkpoint), tuple(metrics))
        size = self.batch_size(
            drawn, lambda n: self.shard_part(solver, seeds[:n], metrics), len(seeds)
        )
        parts = [
            self.shard_part(solver, seeds[start : start + size], metrics)
            for start in range(0, len(seeds), size)
        ]
        return merge_states(parts)

    def batch_size(self, key: Hashable, run: Callable[[int], Any], samples: int) -> int:
        """The setup's batch size, or with "auto" the most samples a pass of `run` holds here (at
        most `samples`, up to ACCELERATOR_BATCH): its `PassCost` measured the first time `key`
        (what the pass draws and scores) comes to this evaluator, not again for each shard."""

        def measure(run: Callable[[int], Any], device: torch.device) -> PassCost:
            if key not in self.pass_costs:
                self.pass_costs[key] = PassCost.measured(run, device)
            return self.pass_costs[key]

        setting = self.setup.batch_size
        return resolved_batch(setting, run, samples, self.device, ACCELERATOR_BATCH, measure)

    def shard_part(
        self, solver: torch.nn.Module, batch: Sequence[int], metrics: Sequence[str]
    ) -> dict[str, Any]:
        """The metric states of the samples of the seeds `batch`, drawn at once (`solver_states`)."""
        noise, cond = self.shard_inputs(batch)
        seconds, endpoints = self.timed_rollout(solver, noise, cond)
        return self.sample_states(batch, noise, cond, endpoints, seconds, metrics)

    def shard_inputs(self, batch: Sequence[int]) -> tuple[Tensor, Tensor | None]:
        """The noise and conditioning of the seeds `batch` on this evaluator's device."""
        noise = seed_noise(batch, self.backbone.shape).to(self.device)
        return noise, on_device(self.backbone.conditioning(batch), self.device)

    def sample_states(
        self,
        batch: Sequence[int],
        noise: Tensor,
        cond: Tensor | None,
        endpoints: Tensor,
        seconds: float,
        metrics: Sequence[str],
    ) -> dict[str, Any]:
        """The metric states of the rollout's `endpoints` (what follows the rollout in
        `shard_part`: decoding and the metrics, the same whichever solver drew them)."""
        # Clipped as the EDM protocol clips (x·127.5 + 128 into [0, 255]; clamping first changes
        # no pixel): a poor solver's overshoot is a bad sample, not images of the wrong range.
        samples = self.backbone.decode(endpoints).clamp(-1, 1)
        shard = Batch(list(batch), samples, self, noise, cond)
        part: dict[str, Any] = {"sampling": MeanState(seconds, len(batch))}
        for metric in chosen(metrics, self.setup.options, SampleMetric):
            state = metric.state(shard, self.network(metric))
            if state is not None:
                part[metric.name] = state
        return part

    @torch.no_grad()
    def score(
        self,
        spec: SolverSpec,
        checkpoint: Path | None,
        test: Path,
        validation: Path | None = None,
        images: int = GRID_COLUMNS,
    ) -> tuple[Score, dict[str, Tensor]]:
        """The solver's errors against the teacher set in folder `test` (and its RMSE against the
        one in `validation`), latency per image, and the first `images` samples of teacher and
        solver (uint8) for a sample grid (`sampling.score.score`)."""
        solver = load_solver(spec, checkpoint, self.backbone).to(self.device)
        held = None if validation is None else read_teacher(validation)
        test_set = read_teacher(test)
        size = score_batch(self.setup.batch_size, solver, self.backbone, test_set, self.device)
        return score(solver, self.backbone, test_set, images, self.device, held, size)

    def timed_rollout(
        self, solver: torch.nn.Module, noise: Tensor, cond: Tensor | None = None
    ) -> tuple[float, Tensor]:
        """Wall seconds of one batched rollout on this evaluator's device, and its endpoints."""
        synchronize = torch.cuda.synchronize if self.device.type == "cuda" else lambda: None
        synchronize()
        start = time.perf_counter()
        endpoints = rollout(solver, self.backbone, noise, cond)
        synchronize()
        return time.perf_counter() - start, endpoints

    @torch.no_grad()
    def image_states(self, images: Tensor, metrics: Sequence[str]) -> dict[str, Any]:
        """The state of each of `metrics` of given [-1, 1] images (a dataset shard), for those
        that score images alone (FID's feature moments)."""
        return {
            metric.name: self.image_state(metric, images)
            for metric in made(metrics, self.setup.options)
        }

    def image_state(self, metric: SampleMetric, images: Tensor) -> Any:
        """`metric`'s state of `images`, in batches of `batch_size`."""
        network = self.network(metric)

        def state(batch: Tensor) -> Any:
            return {metric.name: metric.image_state(network, batch.to(self.device))}

        size = self.batch_size(
            (metric.name, *images.shape[1:]), lambda n: state(images[:n]), len(images)
        )
        return merge_states([state(batch) for batch in images.split(size)])[metric.name]
