"""A solver's sample metrics on evaluator actors, from one pass over its samples.

Each shard's samples are drawn once and every requested metric is computed on them;
the driver merges the states and turns them into

    fid                     ‖μ_s − μ_r‖² + tr(Σ_s + Σ_r − 2 (Σ_s Σ_r)^{1/2})  (reference cached)
    lpips                   (1/N) Σ_n d(x_n, x_n^teacher), the teacher sampling the same seed n;
                            with observations (nowcasting): the mean over frames of d(forecast
                            frame, observed frame)
    image_reward            (1/N) Σ_n r(x_n, prompt_n), prompt-conditioned backbones only
    skill                   CSI, HSS, POD, SUCR, BIAS from contingency counts summed over all
                            samples and pixels (nowcasting/scores.py): csi_m, csi4, csi16, hss,
                            csi_<threshold>; per lead time in `SampleReport.skill`
    latency_ms_per_image    1000 · Σ sampling seconds / N   (batches of `batch_size`)
    throughput_images_per_s N / wall seconds of the whole pass over all actors

A metric that cannot be computed here (LPIPS without AlexNet weights, ImageReward without its
files or on a backbone without prompts) is left out and reported unavailable with the reason, in
the report and as an `<metric>.unavailable` param.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanlift.backbones import Backbone
from spanlift.errors import MetricUnavailable
from spanlift.files import file_sha256
from spanlift.nowcasting.scores import ContingencyCounts, summary
from spanlift.platform.evaluation.evaluator import EvaluatorSetup
from spanlift.platform.evaluation.fid import FidResult, reference_moments
from spanlift.platform.evaluation.frechet import frechet_distance
from spanlift.platform.evaluation.image_reward import check_package, image_reward_files
from spanlift.platform.evaluation.lpips_metric import alexnet_weights, lpips_identity
from spanlift.platform.evaluation.pool import EvaluatorPool
from spanlift.platform.evaluation.reference import ReferenceSet
from spanlift.seeds import FID_FIRST_SEED
from spanlift.solvers import SolverSpec


@dataclass(frozen=True)
class SampleReport:
    samples: int
    device: str
    latency_ms_per_image: float
    throughput_images_per_s: float
    fid: FidResult | None = None
    means: dict[str, float] = field(default_factory=dict)  # lpips, image_reward
    measures: dict[str, str] = field(default_factory=dict)  # what each mean was measured with
    unavailable: dict[str, str] = field(default_factory=dict)  # metric → reason
    skill: ContingencyCounts | None = None  # per threshold, pool and lead time

    def metrics(self) -> dict[str, float]:
        return {
            "latency_ms_per_image": self.latency_ms_per_image,
            "throughput_images_per_s": self.throughput_images_per_s,
            **(self.fid.metrics() if self.fid else {}),
            **self.means,
            **(summary(self.skill.to_dataset()) if self.skill else {}),
        }

    def params(self) -> dict[str, Any]:
        return {
            "eval.samples": self.samples,
            "eval.device": self.device,
            **(self.fid.params() if self.fid else {}),
            **self.measures,
            **{f"{name}.unavailable": reason for name, reason in self.unavailable.items()},
        }


@dataclass(frozen=True)
class Traits:
    """What the evaluated backbone has: prompts (ImageReward), observations (skill, LPIPS)."""

    prompted: bool = False
    observed: bool = False
    identity: str = ""


def traits_of(backbone: Backbone) -> Traits:
    """The traits of a backbone loaded in this process (the evaluators answer the same)."""
    return Traits(
        prompted=backbone.prompts([0]) is not None,
        observed=backbone.observations([FID_FIRST_SEED]) is not None,
        identity=backbone.identity(),
    )


def check_available(metrics: tuple[str, ...], setup: EvaluatorSetup, backbone: Backbone) -> None:
    """Refuse metrics that were asked for and cannot be computed here, with each reason, before
    any sample is drawn."""
    _, unavailable = measures_of(metrics, setup, traits_of(backbone))
    if unavailable:
        raise MetricUnavailable("; ".join(unavailable.values()))


def lpips_measure(setup: EvaluatorSetup, traits: Traits) -> dict[str, str]:
    """What LPIPS values are relative to, for the leaderboard; MetricUnavailable without weights."""
    teacher = setup.teacher
    reference = f"teacher {teacher.label()} nfe={teacher.nfe}, same seeds"
    if traits.observed:
        reference = f"observed frames of {traits.identity}, per frame"
    return {
        "lpips.detector": lpips_identity(alexnet_weights(setup.lpips_weights)),
        "lpips.reference": reference,
    }


def image_reward_measure(setup: EvaluatorSetup, traits: Traits) -> dict[str, str]:
    """The checkpoint ImageReward scores with; MetricUnavailable without prompts, files, package."""
    if not traits.prompted:
        raise MetricUnavailable(
            f"ImageReward unavailable: backbone {setup.backbone!r} has no prompts "
            "(ImageReward scores prompt-conditioned backbones)"
        )
    checkpoint, _ = image_reward_files(setup.image_reward_weights)
    check_package()
    return {"image_reward.detector": f"imagereward:{file_sha256(checkpoint)[:12]}"}


def skill_measure(setup: EvaluatorSetup, traits: Traits) -> dict[str, str]:
    """Skill scores are measured against the backbone's observations, counted under the setup's
    convention (exact definitions, or Earthformer's: nowcasting/scores.py)."""
    if not traits.observed:
        raise MetricUnavailable(
            f"skill scores unavailable: backbone {setup.backbone!r} has no observations "
            "(they score nowcasting backbones)"
        )
    return {
        "skill.reference": f"observed frames of {traits.identity}",
        "skill.convention": setup.skill_convention,
    }


MEASURES = {"lpips": lpips_measure, "image_reward": image_reward_measure, "skill": skill_measure}
MEANS = ("lpips", "image_reward")


def measures_of(
    metrics: tuple[str, ...], setup: EvaluatorSetup, traits: Traits
) -> tuple[dict[str, str], dict[str, str]]:
    """(params describing each available metric, {metric: reason} of the unavailable ones)."""
    measures, unavailable = {}, {}
    for name in metrics:
        if name in MEASURES:
            try:
                measures.update(MEASURES[name](setup, traits))
            except MetricUnavailable as exc:
                unavailable[name] = str(exc)
    return measures, unavailable


def evaluate_samples(
    pool: EvaluatorPool,
    spec: SolverSpec,
    checkpoint: Path | None,
    samples: int,
    metrics: tuple[str, ...],
    reference: ReferenceSet,
    first_seed: int = FID_FIRST_SEED,
) -> SampleReport:
    """`metrics` (of SAMPLE_METRICS) of `samples` samples of the solver, seeds from `first_seed`,
    with the latency and throughput of the sampling itself."""
    traits = Traits(
        prompted="image_reward" in metrics and pool.call("prompted"),
        observed=pool.call("observed"),
        identity=pool.call("backbone_identity"),
    )
    measures, unavailable = measures_of(metrics, pool.setup, traits)
    wanted = tuple(m for m in metrics if m not in unavailable)
    ref = None
    if "fid" in wanted:
        detector = pool.call("identity")
        ref = reference_moments(pool, reference, detector)
    seeds = list(range(first_seed, first_seed + samples))
    start = time.perf_counter()
    states = pool.solver_states(spec, checkpoint, seeds, wanted, label(spec))
    wall = time.perf_counter() - start
    fid = None
    if ref is not None:
        fid = FidResult(
            frechet_distance(states["fid"], ref), samples, detector, reference.describe()
        )
    return SampleReport(
        samples=samples,
        device=pool.call("device_name"),
        latency_ms_per_image=1000 * states["sampling"].mean,
        throughput_images_per_s=samples / wall,
        fid=fid,
        means={name: states[name].mean for name in MEANS if name in states},
        measures=measures,
        unavailable=unavailable,
        skill=states.get("skill"),
    )


def label(spec: SolverSpec) -> str:
    return f"{spec.label()} nfe={spec.nfe}"
