"""Every metric spanlift logs: which way is better, and what its value is measured against.

Two values of a metric are comparable only when the params named in `against` are equal: two
RMSEs against different teachers, or two FIDs from different detectors, are different
quantities. The leaderboard groups runs by these params; a sweep may only search on a metric it
produces (`produced_by`).
"""

from dataclasses import dataclass

from spanlift.errors import SettingsError


@dataclass(frozen=True)
class Metric:
    name: str
    mode: str  # "min" or "max": which way is better
    description: str
    against: tuple[str, ...] = ()  # the run params that say what a value is relative to


SKILL_AGAINST = ("skill.reference", "skill.convention", "eval.samples")
THRESHOLDS = (16, 74, 133, 160, 181, 219)
SKILL_METRICS = (
    Metric("csi_m", "max", "CSI averaged over the VIL thresholds", SKILL_AGAINST),
    Metric("csi4", "max", "CSI after 4×4 max-pooling, mean over thresholds", SKILL_AGAINST),
    Metric("csi16", "max", "CSI after 16×16 max-pooling, mean over thresholds", SKILL_AGAINST),
    Metric("hss", "max", "Heidke skill score, mean over thresholds", SKILL_AGAINST),
    *(Metric(f"csi_{t}", "max", f"CSI at VIL ≥ {t}", SKILL_AGAINST) for t in THRESHOLDS),
)
"""Nowcasting skill against the observed frames (nowcasting/scores.py `summary`)."""


METRICS = {
    m.name: m
    for m in (
        Metric(
            "rmse", "min", "endpoint RMSE against the teacher", ("teacher", "teacher.test_seeds")
        ),
        Metric(
            "fid",
            "min",
            "Fréchet distance of detector features",
            ("fid.detector", "fid.reference", "fid.samples"),
        ),
        Metric(
            "lpips",
            "min",
            "LPIPS against the teacher's sample of the same seed",
            ("lpips.detector", "lpips.reference", "eval.samples"),
        ),
        Metric("image_reward", "max", "ImageReward score", ("image_reward.detector",)),
        *SKILL_METRICS,
        Metric("ms_per_image", "min", "sampling time per image, best of 3", ("eval.device",)),
        Metric("latency_ms_per_image", "min", "sampling time per image", ("eval.device",)),
        Metric(
            "throughput_images_per_s", "max", "images sampled and scored per s", ("eval.device",)
        ),
        Metric("out_of_span_ratio", "min", "mean ‖P⊥ Δ_op‖/‖Δ_op‖ over steps (SpanLift)"),
        Metric("fit_seconds", "min", "fit compute time, base fit included"),
        Metric("eval_seconds", "min", "evaluation time"),
        Metric("nfe", "min", "model evaluations spent"),
    )
}
TRIAL_METRICS = ("rmse", "ms_per_image", "nfe", "fit_seconds", "eval_seconds")
"""What every sweep trial reports, whatever its evaluation section asks."""

EVALUATION_METRICS = {
    "fid": ("fid", "latency_ms_per_image", "throughput_images_per_s"),
    "lpips": ("lpips", "latency_ms_per_image", "throughput_images_per_s"),
    "image_reward": ("image_reward", "latency_ms_per_image", "throughput_images_per_s"),
    "latency": ("latency_ms_per_image", "throughput_images_per_s"),
    "diagnostics": ("out_of_span_ratio",),
    "skill": (
        *(m.name for m in SKILL_METRICS),
        "latency_ms_per_image",
        "throughput_images_per_s",
    ),
}
"""The metrics each entry of an evaluation section adds."""

FIT_BUDGET = ("fit.iterations", "fit.batch_size", "fit.loss", "fit.lr", "teacher.train_samples")
"""The params that make two fits comparable in effort (`spanlift leaderboard --by-fit`)."""


def default_mode(metric: str) -> str:
    """ "max" for scores, "min" for errors, distances and times (and metrics not listed)."""
    return METRICS[metric].mode if metric in METRICS else "min"


def produced_by(evaluation: tuple[str, ...]) -> tuple[str, ...]:
    """The metrics a sweep trial reports when its evaluation section asks for `evaluation`."""
    extra = [m for name in evaluation for m in EVALUATION_METRICS.get(name, ())]
    return tuple(dict.fromkeys([*TRIAL_METRICS, *extra]))


def check_search_metric(metric: str, evaluation: tuple[str, ...]) -> None:
    """Refuse a search metric the sweep never reports: its trials would all look pruned."""
    produced = produced_by(evaluation)
    if metric not in produced:
        hint = next((name for name, adds in EVALUATION_METRICS.items() if metric in adds), None)
        raise SettingsError(
            f"{metric!r} is not a metric this sweep produces; it produces "
            f"{', '.join(produced)}"
            + (f" (add {hint!r} to evaluation.metrics for {metric!r})" if hint else "")
        )
