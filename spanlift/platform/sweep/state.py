"""A sweep's saved state: the validated sweep file kept beside the Tune state it belongs to.

`--resume` continues a Tune state only with the sweep it was made for (the restored searcher's
trial indices point into that sweep's grid), or starts a sweep interrupted before its Tune state
existed; `--restart` replaces it; otherwise it is protected.
"""

import shutil
from pathlib import Path

import yaml
from ray import tune

from spanlift.errors import SettingsError
from spanlift.platform.configuration import digest
from spanlift.platform.sweep.config import SweepConfig

TUNE_NAME = "tune"
SWEEP_FILE = "sweep.yaml"


def check_restart(root: Path, config: SweepConfig, resume: bool, restart: bool) -> bool:
    """An earlier Tune state is continued (--resume, only with an unchanged sweep), replaced
    (--restart) or protected; a new or restarted sweep's validated file is stored. Returns
    whether there is a Tune state to restore.

    --resume of a sweep interrupted before its first configuration started (its file stored, no
    Tune state yet) starts it."""
    state = root / TUNE_NAME
    if resume:
        check_unchanged(root / SWEEP_FILE, config, state)
        return tune.Tuner.can_restore(str(state))
    if state.exists():
        if not restart:
            raise SettingsError(
                f"this sweep already ran at {state}: pass --resume to continue it, or --restart "
                "to run it again (finished configurations are taken from MLflow, not refitted)"
            )
        shutil.rmtree(state)
    store_sweep(root, config)
    return False


def store_sweep(root: Path, config: SweepConfig) -> Path:
    """The validated sweep (defaults filled in) beside its Tune state, its hash in the header."""
    data = config.as_dict()
    path = root / SWEEP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"# validated from {config.source}; sha256 {digest(data, 64)}\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return path


def flatten(data: object, prefix: str = "") -> dict[str, object]:
    """Nested mappings as `{"a.b.c": value}`, to name what changed between two sweeps."""
    if not isinstance(data, dict) or not data:
        return {prefix.rstrip("."): data}
    return {
        k: v for key, value in data.items() for k, v in flatten(value, f"{prefix}{key}.").items()
    }


def changes(before: dict, now: dict) -> list[str]:
    """`key: old -> new` for every setting that differs."""
    old, new = flatten(before), flatten(now)
    return [
        f"{key}: {old.get(key, '(unset)')} -> {new.get(key, '(unset)')}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def check_unchanged(stored: Path, config: SweepConfig, state: Path) -> None:
    """Refuse to resume with a sweep other than the one the Tune state was made for."""
    if not stored.is_file():
        if tune.Tuner.can_restore(str(state)):
            raise SettingsError(
                f"--resume: {stored} is missing, so the sweep cannot be checked; --restart it"
            )
        raise SettingsError(f"--resume: there is no interrupted sweep to continue at {state}")
    changed = changes(yaml.safe_load(stored.read_text()), config.as_dict())
    if changed:
        shown = "; ".join(changed[:10]) + ("; …" if len(changed) > 10 else "")
        raise SettingsError(
            f"--resume: {config.source} changed since this sweep started ({shown}). Undo the "
            "change to resume, or --restart to run the changed sweep (finished configurations "
            "are taken from MLflow)"
        )
