"""One evaluator: a backbone and its metric networks loaded once, turning seed shards into
mergeable metric states.

A plain class, so it runs in-process as well as in a Ray actor (`pool.py` wraps it). Samples of
a shard are generated from the seeds' own noise (`seed_noise`), so a seed gives the same sample
whichever actor draws it, and merged states do not depend on how seeds were split. The detector
and the LPIPS network load on first use: an evaluation loads only what its metrics need.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from spanlift.backbones.base import ACCELERATOR_BATCH
from spanlift.backbones.loaded import loaded_backbone
from spanlift.backbones.nowcast_windows import sample_to_vil
from spanlift.errors import SettingsError
from spanlift.nowcasting.scores import contingency_counts
from spanlift.platform.evaluation.frechet import FeatureMoments, merge_all
from spanlift.platform.evaluation.image_reward import image_reward_state, load_image_reward
from spanlift.platform.evaluation.lpips_metric import alexnet_weights, load_lpips, lpips_state
from spanlift.platform.evaluation.states import MeanState, merge_states
from spanlift.platform.sampling.rollout import on_device, rollout, seed_noise
from spanlift.platform.sampling.score import GRID_COLUMNS, Score, score, score_batch
from spanlift.platform.sampling.teacher import DEFAULT_TEACHER, read_teacher
from spanlift.platform.sampling.tensor_memory import resolved_batch
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import load_solver

if TYPE_CHECKING:  # torch-fidelity (and torchvision) load only where FID is asked for
    from spanlift.platform.detectors.registry import Detector

SAMPLE_METRICS = ("fid", "lpips", "image_reward", "skill")  # from solver samples, by shard


@dataclass(frozen=True)
class EvaluatorSetup:
    """What every evaluator of one evaluation loads: backbone, detector, cache, CPU threads."""

    backbone: str
    detector: str  # "": the backbone's own FID detector
    cache_dir: Path
    backbone_options: dict[str, Any] = field(default_factory=dict)
    detector_weights: Path | None = None
    threads: int | None = None
    batch_size: int | str = "auto"
    """Samples drawn, decoded and scored at once: a number, or "auto": the most (up to 256) a
    pass is predicted to hold in the device's free memory, measured at one and two samples."""
    lpips_weights: Path | None = None  # AlexNet; None: torch's hub cache
    teacher: SolverSpec = DEFAULT_TEACHER  # LPIPS compares with its samples from the same seeds
    image_reward_weights: Path | None = None  # folder of ImageReward.pt, med_config.json
    skill_convention: str = "exact"  # or "earthformer": how skill is counted (nowcasting/scores.py)


class Evaluator:
    def __init__(self, setup: EvaluatorSetup) -> None:
        if setup.threads:
            torch.set_num_threads(setup.threads)
        self.setup = setup
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.backbone = loaded_backbone(setup.backbone, setup.backbone_options).to(self.device)

    @cached_property
    def detector(self) -> "Detector":
        from spanlift.platform.detectors.registry import load_detector

        setup = self.setup
        name = setup.detector or self.backbone.fid_detector
        return load_detector(name, setup.cache_dir, setup.detector_weights).to(self.device)

    @cached_property
    def teacher(self) -> torch.nn.Module:
        """The solver whose samples LPIPS compares with."""
        return load_solver(self.setup.teacher, None, self.backbone).to(self.device)

    @cached_property
    def lpips(self) -> torch.nn.Module:
        return load_lpips(alexnet_weights(self.setup.lpips_weights)).to(self.device)

    @cached_property
    def image_reward(self) -> torch.nn.Module:
        return load_image_reward(self.setup.image_reward_weights, self.device)

    def identity(self) -> str:
        return self.detector.identity

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
        metrics: Sequence[str] = ("fid",),
    ) -> dict[str, Any]:
        """States of the solver's samples from `seeds`: `fid` feature moments, `lpips` summed
        distance to the observations of the seeds (frame by frame) or else to the teacher's
        samples from the same seeds, `image_reward` summed reward for the seeds' prompts, `skill`
        contingency counts per threshold, pool and lead time against the observations, and always
        `sampling`: seconds spent in the solver (model evaluations included) and the number of
        samples."""
        solver = load_solver(spec, checkpoint, self.backbone).to(self.device)
        size = self.batch_size(lambda n: self.shard_part(solver, seeds[:n], metrics), len(seeds))
        parts = [
            self.shard_part(solver, seeds[start : start + size], metrics)
            for start in range(0, len(seeds), size)
        ]
        return merge_states(parts)

    def batch_size(self, run: Callable[[int], Any], samples: int) -> int:
        """The setup's batch size, or with "auto" the most samples a pass of `run` holds here
        (`batch_that_fits`; a pass of at most `samples`, up to ACCELERATOR_BATCH)."""
        return resolved_batch(self.setup.batch_size, run, samples, self.device, ACCELERATOR_BATCH)

    def shard_part(
        self, solver: torch.nn.Module, batch: Sequence[int], metrics: Sequence[str]
    ) -> dict[str, Any]:
        """The metric states of the samples of the seeds `batch`, drawn at once (`solver_states`)."""
        noise = seed_noise(batch, self.backbone.shape).to(self.device)
        cond = on_device(self.backbone.conditioning(batch), self.device)
        seconds, endpoints = self.timed_rollout(solver, noise, cond)
        # Clipped as the EDM protocol clips (x·127.5 + 128 into [0, 255]; clamping first changes
        # no pixel): a poor solver's overshoot is a bad sample, not images of the wrong range.
        samples = self.backbone.decode(endpoints).clamp(-1, 1)
        observed = on_device(self.backbone.observations(batch), self.device)
        part: dict[str, Any] = {"sampling": MeanState(seconds, len(batch))}
        if "fid" in metrics:
            part["fid"] = FeatureMoments.of(self.detector.features(samples))
        if "lpips" in metrics:
            part["lpips"] = self.lpips_against_reference(samples, observed, noise, cond)
        if "image_reward" in metrics:
            prompts = self.backbone.prompts(batch)
            part["image_reward"] = image_reward_state(self.image_reward, samples, prompts)
        if "skill" in metrics:
            self.check_observed(observed)
            part["skill"] = contingency_counts(
                sample_to_vil(samples),
                sample_to_vil(observed),
                per_lead=True,
                convention=self.setup.skill_convention,
            )
        return part

    def check_observed(self, observed: Tensor | None) -> None:
        if observed is None:
            raise SettingsError(
                f"skill scores compare forecasts with observations; backbone "
                f"{self.setup.backbone!r} has none (use a nowcasting backbone)"
            )

    def lpips_against_reference(
        self, samples: Tensor, observed: Tensor | None, noise: Tensor, cond: Tensor | None
    ) -> MeanState:
        """LPIPS of each observed frame against the forecast frame (frames as grey images), or,
        without observations, of each sample against the teacher's sample from the same seed."""
        if observed is not None:
            per_frame = (*samples.shape[:2], 1, *samples.shape[2:])
            return lpips_state(
                self.lpips,
                samples.reshape(per_frame).flatten(0, 1),
                observed.reshape(per_frame).flatten(0, 1),
            )
        reference = self.backbone.decode(rollout(self.teacher, self.backbone, noise, cond))
        return lpips_state(self.lpips, samples, reference)

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
    def image_moments(self, images: Tensor) -> dict[str, FeatureMoments]:
        """`fid` feature moments of given [-1, 1] images (a dataset shard)."""
        size = self.batch_size(
            lambda n: self.detector.features(images[:n].to(self.device)), len(images)
        )
        parts = [
            FeatureMoments.of(self.detector.features(batch.to(self.device)))
            for batch in images.split(size)
        ]
        return {"fid": merge_all(parts)}
