"""A run's resolved configuration: everything re-running it needs, as `configuration.json`.

    backbone, backbone_options     the frozen model, as loaded
    solver                         the solver spec as fitted (a two-stage SpanLift names its base)
    teacher                        the teacher solver spec
    seeds                          [first, stop) of each role: train, validation, test
    fit, workers                   the fit settings (its seed included) and the worker count
    threads, device                where it ran (float rounding may depend on both)

`spanlift rerun RUN_ID` reads it back from the run's artifacts, fits and scores the same
configuration again and compares (cli/rerun.py).
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESOLVED_FILE = "configuration.json"


@dataclass(frozen=True)
class ResolvedConfiguration:
    backbone: str
    backbone_options: dict[str, Any]
    solver: dict[str, Any]
    teacher: dict[str, Any]
    seeds: dict[str, list[int]]
    fit: dict[str, Any]
    workers: int = 1
    threads: int = 1
    device: str = "cpu"
    validation_blocks: bool = False
    """Whether the validation seeds came in blocks added while a comparison was undecided
    (`sampling/validation_blocks.py`, as `spanlift fit` uses them); False: used whole."""

    def seed_range(self, role: str) -> range:
        first, stop = self.seeds[role]
        return range(first, stop)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ResolvedConfiguration":
        return cls(**data)


def write_resolved(folder: Path, resolved: ResolvedConfiguration) -> Path:
    """`folder/configuration.json`."""
    path = Path(folder) / RESOLVED_FILE
    path.write_text(json.dumps(asdict(resolved), indent=2, default=str))
    return path


def read_resolved(path: Path) -> ResolvedConfiguration:
    return ResolvedConfiguration.from_dict(json.loads(Path(path).read_text()))
