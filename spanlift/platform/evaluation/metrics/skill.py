"""skill: SEVIR nowcasting skill of forecasts against the backbone's observed frames, on the
VIL scale 0–255, from 2×2 contingency counts per threshold, pool and lead time summed over all
samples and pixels (`nowcasting/scores.py`):

    CSI = H / (H + M + F)     HSS = 2(HR − FM) / ((H + M)(M + R) + (H + F)(F + R))

reported as csi_m, hss (pool 1), csi4, csi16 (pools 4 and 16), each a mean over thresholds, and
csi_<τ> per threshold; the per-lead-time scores are kept as `skill-scores.nc`.
"""

from dataclasses import dataclass
from typing import Any

from spanlift.backbones.nowcast_windows import sample_to_vil
from spanlift.errors import MetricUnavailable, OptionError, SettingsError
from spanlift.nowcasting.scores import (
    CONVENTIONS,
    THRESHOLDS,
    ContingencyCounts,
    contingency_counts,
    summary,
)
from spanlift.platform.evaluation.metrics.base import (
    METRICS,
    Batch,
    Done,
    Finished,
    Options,
    Row,
    SampleMetric,
    Setup,
    Traits,
)

FILE = "skill-scores.nc"
AGAINST = ("skill.reference", "skill.convention", "eval.samples")


@dataclass(frozen=True)
class SkillOptions(Options):
    skill_convention: str = "exact"
    """How nowcasting skill is counted: exact, or earthformer (Earthformer's and PreDiff's
    tables; nowcasting/scores.py)."""

    def __post_init__(self) -> None:
        if self.skill_convention not in CONVENTIONS:
            raise OptionError(
                "skill_convention", self.skill_convention, f"one of {', '.join(CONVENTIONS)}"
            )


@METRICS.register("skill")
class Skill(SampleMetric):
    Options = SkillOptions
    rows = (
        Row("csi_m", "max", "CSI averaged over the VIL thresholds", AGAINST),
        Row("csi4", "max", "CSI after 4×4 max-pooling, mean over thresholds", AGAINST),
        Row("csi16", "max", "CSI after 16×16 max-pooling, mean over thresholds", AGAINST),
        Row("hss", "max", "Heidke skill score, mean over thresholds", AGAINST),
        *(Row(f"csi_{t}", "max", f"CSI at VIL ≥ {t}", AGAINST) for t in THRESHOLDS),
    )

    def measures(self, setup: Setup, traits: Traits) -> dict[str, Any]:
        """The observations the forecasts are scored against, and how they are counted."""
        if not traits.observed:
            raise MetricUnavailable(
                f"skill scores unavailable: backbone {setup.backbone!r} has no observations "
                "(they score nowcasting backbones)"
            )
        return {
            "skill.reference": f"observed frames of {traits.identity}",
            "skill.convention": self.options.skill_convention,
        }

    def state(self, batch: Batch, network: Any) -> ContingencyCounts:
        if batch.observed is None:
            raise SettingsError(
                f"skill scores compare forecasts with observations; backbone "
                f"{batch.host.setup.backbone!r} has none (use a nowcasting backbone)"
            )
        return contingency_counts(
            sample_to_vil(batch.samples),
            sample_to_vil(batch.observed),
            per_lead=True,
            convention=self.options.skill_convention,
        )

    def finish(self, state: ContingencyCounts, prepared: Any, done: Done) -> Finished:
        """The paper table's numbers, and the per-lead-time scores as NetCDF."""
        files = ()
        if done.folder is not None:
            path = done.folder / FILE
            state.to_dataset().to_netcdf(path, engine="h5netcdf")
            files = (path,)
        return Finished(summary(state.to_dataset()), files=files)
