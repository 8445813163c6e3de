"""The run key of a shipped sweep's configuration stays what it was: the evaluation settings that
enter it keep their content, so finished runs are found again (reuse, `--resume`) whatever moves
in the code that reads the sweep file."""

import json
from types import SimpleNamespace

import pytest

from spanlift.platform.sweep.config import load_sweep
from spanlift.platform.sweep.context import SweepContext, for_replicate
from spanlift.platform.sweep.evaluation import evaluation_settings
from spanlift.platform.sweep.replicate import configuration
from tests.cli_run import ROOT

SWEEPS = ROOT / "sweeps"
TEACHERS = SimpleNamespace(
    **{role: SimpleNamespace(name=f"{role}-entry") for role in ("train", "validation", "test")}
)
"""Stand-ins for the sweep's teacher cache entries: only their names enter a run key."""

DEFAULTS = {
    "samples": 1000,
    "validation_samples": None,
    "evaluators": 1,
    "detector": None,
    "reference": "dataset",
    "reference_samples": 10_000,
    "lpips_weights": None,
    "image_reward_weights": None,
    "skill_convention": "exact",
}


@pytest.mark.parametrize(
    ("name", "section"),
    [
        ("demo", None),
        ("digits_fid", {"metrics": ["fid", "diagnostics"], "samples": 1000}),
        (
            "digits_paper",
            {"metrics": ["fid", "diagnostics"], "samples": 10_000, "detector": "digits_eval"},
        ),
        ("digits_all_solvers", {"metrics": ["fid"], "samples": 2000, "detector": "digits_eval"}),
        ("nowcast_synth", {"metrics": ["skill", "lpips"], "samples": 64}),
        (
            "flux",
            {
                "metrics": ["fid", "image_reward"],
                "samples": 10_000,
                "evaluators": 4,
                "detector": "inception",
                "reference": "teacher",
                "image_reward_weights": str(ROOT / "models" / "ImageReward"),
            },
        ),
    ],
)
def test_the_evaluation_settings_in_the_run_key_keep_their_content(name, section) -> None:
    settings = evaluation_settings(load_sweep(SWEEPS / f"{name}.yaml"))
    expected = {} if section is None else {**DEFAULTS, **section}
    assert as_keyed(settings) == expected


def as_keyed(settings: dict) -> dict:
    """The settings as they enter a run key's digest (`configuration.digest`): JSON, paths as
    text."""
    return json.loads(json.dumps(settings, default=str))


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("digits_fid", ("881ad6106502aca8b125", "6fa7e5c4211993c3cde4")),
        ("digits_paper", ("093db871811522b6c89e", "4d710361d4daddb4f0c2")),
        ("demo", ("20f792119de75a96090d", "c02d5435fdf6feafe11a")),  # 100 fit iterations
    ],
)
def test_a_shipped_sweeps_run_keys_are_unchanged(name, keys) -> None:
    """The run keys of the first and last configuration of the grid (first fit seed); sweeps
    whose backbone options hold no path (a path enters the key as the absolute one)."""
    config = load_sweep(SWEEPS / f"{name}.yaml")
    context = SweepContext(config, ROOT, TEACHERS, "")
    grid = config.grid()
    found = tuple(
        configuration(spec, for_replicate(context, entry, config.replicate_seeds(entry)[0])).key()
        for entry, spec in (grid[0], grid[-1])
    )
    assert found == keys


def test_a_later_metric_s_options_key_a_run_only_where_it_is_asked_for_or_set() -> None:
    """Adding a metric plug-in leaves every earlier sweep's run keys alone."""
    import yaml

    from spanlift.platform.sweep.config import parse_sweep

    data = yaml.safe_load((SWEEPS / "digits_fid.yaml").read_text())

    def keyed(**evaluation) -> dict:
        changed = {**data, "evaluation": {**data["evaluation"], **evaluation}}
        return evaluation_settings(parse_sweep(changed, folder=SWEEPS))

    assert "fd_dinov2_weights" not in keyed()
    asked = keyed(metrics=["fid", "fd_dinov2"])
    assert asked["fd_dinov2_weights"] is None and "fd_dinov2_statistics" in asked
    assert keyed(fd_dinov2_weights="/models/dinov2-large")["fd_dinov2_weights"] is not None


def test_a_statistics_file_is_read_once_per_sweep_not_per_replicate(tmp_path, monkeypatch) -> None:
    """Its digest enters every run key; the sweep's plan reads it when the context is made."""
    import numpy as np
    import yaml

    from spanlift.platform.evaluation.metrics import reference
    from spanlift.platform.sweep.config import parse_sweep

    statistics = tmp_path / "digits-8x8.npz"
    np.savez(statistics, mu=np.zeros(64), sigma=np.eye(64))
    data = yaml.safe_load((SWEEPS / "digits_fid.yaml").read_text())
    data["evaluation"] = {**data["evaluation"], "reference": str(statistics)}
    config = parse_sweep(data, folder=SWEEPS)
    context = SweepContext(config, ROOT, TEACHERS, "")
    reads = []
    monkeypatch.setattr(reference, "file_sha256", lambda path: reads.append(path) or "0" * 64)
    keys = {
        configuration(spec, for_replicate(context, entry, seed)).key()
        for entry, spec in config.grid()[:3]
        for seed in (0, 1)
    }
    assert len(keys) == 6 and reads == []
    described = context.plan.evaluation_key["reference"]
    assert described.startswith("file digits-8x8.npz sha256:") and "0000" not in described
