"""A solver's full description (name, NFE, schedule, settings) and how to build it.

    spec = SolverSpec("spanlift", nfe=3, settings={"base": "dyweight", "kernel_size": 5})
    solver = build_solver(spec, sigma_min=0.002, sigma_max=80.0, channels=3)

The number of steps is derived from the NFE through the solver's own NFE accounting, so a
solver always spends exactly the NFE it is built for, or building it fails with the NFEs it can.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from spanlift.errors import SettingsError, UnreachableNFEError
from spanlift.solvers.base import Solver
from spanlift.solvers.capabilities import ExplainsSettings, free_steps
from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.schedules import EDM_SIGMA_MAX, EDM_SIGMA_MIN, SCHEDULES


@dataclass(frozen=True)
class SolverSpec:
    name: str
    nfe: int
    schedule: str = "edm"
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SolverSpec":
        return cls(
            data["name"],
            int(data["nfe"]),
            data.get("schedule", "edm"),
            dict(data.get("settings") or {}),
        )

    def key(self) -> str:
        """A short digest that is equal for equal solvers, defaults filled in."""
        settings = {**solver_settings(SOLVERS.get(self.name)), **self.settings}
        content = json.dumps(
            [self.name, self.nfe, self.schedule, settings], sort_keys=True, default=str
        )
        return hashlib.sha256(content.encode()).hexdigest()[:12]

    def label(self) -> str:
        """A short human-readable name, e.g. `spanlift[dyweight,spatial,k3]` or `ipndm[order=3]`."""
        if not self.settings:
            return self.name
        inner = ",".join(
            f"{k}={v}" for k, v in sorted(self.settings.items()) if k != "base_checkpoint"
        )
        return f"{self.name}[{inner}]"


def solver_settings(cls: type[Solver]) -> dict[str, Any]:
    """The settings a solver class accepts and their defaults (`Solver.default_settings`: its
    constructor's keywords, or another library's arguments for a peer solver)."""
    return cls.default_settings()


def check_settings(name: str, settings: dict[str, Any]) -> None:
    """Every key of `settings` is one of the solver's settings; a solver on a base (settings
    `base` and `base_settings`) has its base's settings checked the same way."""
    cls = SOLVERS.get(name)
    accepted = solver_settings(cls)
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        hint = cls.setting_hint(unknown[0]) if issubclass(cls, ExplainsSettings) else ""
        raise SettingsError(
            f"solver {name!r} has no setting {unknown[0]!r}{f' ({hint})' if hint else ''}; "
            f"its settings are: {', '.join(accepted) or 'none'}"
        )
    if "base" in accepted and settings.get("base_settings"):
        check_settings(settings.get("base", accepted["base"]), settings["base_settings"])


def ends_at_zero(schedule: str) -> bool:
    """Whether the schedule's last step goes to σ = 0 (`edm_to_zero`), read off a 2-step grid."""
    return bool(SCHEDULES.get(schedule)(2, EDM_SIGMA_MIN, EDM_SIGMA_MAX)[-1] == 0)


def steps_for_nfe(name: str, nfe: int, settings: dict[str, Any], schedule: str = "edm") -> int:
    """The number of steps with which solver `name` on `schedule` spends exactly `nfe` model
    evaluations."""
    if not isinstance(nfe, int) or isinstance(nfe, bool) or nfe < 1:
        raise UnreachableNFEError(f"nfe must be a positive integer, got {nfe!r}")
    cls, to_zero = SOLVERS.get(name), ends_at_zero(schedule)
    longest = nfe + 2 + free_steps(cls, settings)
    spend = {steps: cls.nfe_for_steps(steps, settings, to_zero) for steps in range(1, longest + 1)}
    for steps, used in spend.items():
        if used == nfe:
            return steps
    reachable = sorted({n for n in spend.values() if n >= 1})
    raise UnreachableNFEError(
        f"solver {name!r} with {settings or 'default settings'} cannot spend exactly nfe={nfe}; "
        f"it can spend {', '.join(map(str, reachable[:6]))}, …"
    )


def build_solver(
    spec: SolverSpec, sigma_min: float, sigma_max: float, channels: int, seed: int = 0
) -> Solver:
    """The solver of `spec` on its schedule's grid over [σ_min, σ_max].

    Its initial weights are a pure function of the spec and `seed` (a fit passes its own): they
    are drawn as torch draws them after `torch.manual_seed(seed)`, whatever random numbers the
    process drew before, and the process's random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _build(spec, sigma_min, sigma_max, channels)


def _build(spec: SolverSpec, sigma_min: float, sigma_max: float, channels: int) -> Solver:
    check_settings(spec.name, spec.settings)
    steps = steps_for_nfe(spec.name, spec.nfe, spec.settings, spec.schedule)
    if not 0 < sigma_min < sigma_max:
        raise SettingsError(f"need 0 < sigma_min < sigma_max, got {sigma_min} and {sigma_max}")
    sigmas = SCHEDULES.get(spec.schedule)(steps, sigma_min, sigma_max)
    solver = SOLVERS.get(spec.name).build(sigmas, channels, **spec.settings)
    if solver.nfe != spec.nfe:  # a grid ending at σ = 0 can save an evaluation (AMED, EPD)
        raise UnreachableNFEError(
            f"solver {spec.name!r} on schedule {spec.schedule!r} spends {solver.nfe} evaluations "
            f"in the {steps} steps that nfe={spec.nfe} asks for; use a schedule that ends above "
            "σ = 0 for it"
        )
    solver.spec = spec
    return solver
