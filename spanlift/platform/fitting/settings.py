"""What a fit is asked and what it gives back: its settings (one typed source for the sweep
file's `fit:` section, `spanlift fit`'s options and `--help`), its result, and the shapes of what
passes between the fit's parts."""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch

from spanlift.errors import SettingsError
from spanlift.platform.fitting.losses import check_loss_options
from spanlift.platform.fitting.memory import MEMORY_ONLY, check_memory_settings

FitState = dict[str, Any]
"""Everything a fit needs to continue exactly: next iteration, solver, optimizer, lr schedule and
batch-sampler state, losses so far. Plain tensors and numbers, so it loads with weights_only."""

Report = Callable[[dict[str, float], FitState | None], None]
"""Called with metrics every `log_every` iterations; with the state too at checkpoint iterations."""


TARGETS = ("teacher", "observed")
"""What a fit matches: the teacher's endpoints, or the backbone's observations."""


@dataclass(frozen=True)
class FitSettings:
    iterations: int = 300
    """Optimizer steps of the fit."""
    batch_size: int = 32
    """Teacher samples per step."""
    lr: float = 5e-3
    """Peak learning rate (after the warm-up, before the cosine decay)."""
    warmup: int = 20
    """Steps of linear learning-rate warm-up."""
    grad_clip: float = 1.0
    """Largest gradient norm; larger gradients are scaled down to it."""
    loss: str = "mse"
    """The endpoint loss ℓ; `loss_options` are its keyword arguments."""
    target: str = "teacher"
    """What the endpoint is matched to: "teacher" endpoints or, decoded, the backbone's
    "observed" data."""
    seed: int = 0
    """Seeds the solver's initial weights and the batches drawn."""
    log_every: int = 25
    """Steps between metric reports."""
    checkpoint_every: int = 50
    """Steps between full-state reports a fit can resume from."""
    loss_options: dict[str, Any] = field(default_factory=dict, hash=False)
    """Keyword arguments of the loss, e.g. `{dinov2_path: /models/dinov2-base, c: 0.1}` for
    `latent`; {} for the losses that take none. (A dict is not hashable: left out of the hash.)"""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay; 0 is Adam."""
    validation: float = 0.1
    """Fraction of the teacher set held out to choose the kept state when no validation set is
    given (a sweep and `spanlift fit` give one: their validation seeds); 0: keep the last
    state."""
    validate_every: int = 25
    """Steps between validation losses."""
    deterministic: bool = False
    """PyTorch's deterministic algorithms during the fit (on a GPU, with the cuBLAS workspace
    they need); without it a GPU fit may differ in its last bits from run to run."""
    checkpoint: str = "none"
    """What backward recomputes instead of keeping: none, calls (each backbone call and the loss
    networks), blocks (each block inside the backbone), selective (within each call and the loss
    networks, the cheap operations between the kept outputs of convolutions, matmuls and
    attention), or auto (chosen with micro_batch by a probe of one call on the fit's device;
    platform/fitting/memory.py)."""
    precision: str = "float32"
    """The backbone's and the loss networks' precision under autocast: float32, bfloat16 or
    float16 (the solver, its state and the loss reduction stay float32)."""
    micro_batch: int = 0
    """Samples per backward pass, gradients accumulated over the batch (the same update to float
    rounding); 0: the whole batch in one pass (with checkpoint auto: as the probe chooses)."""
    patience: int = 0
    """Validations without a gain beyond the noise after which the fit stops (before
    `iterations`, which stays the cap): a validation gains when it beats the last state that
    gained (at first the starting state) by more than one paired standard error, as a kept state
    must beat the starting one; 0: no stopping rule. Needs validation seeds."""

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "log_every", "checkpoint_every", "validate_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise SettingsError(
                    f"fit setting {name} must be a positive integer, got {getattr(self, name)!r}"
                )
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise SettingsError(f"fit setting lr must be a positive number, got {self.lr!r}")
        if not 0 <= self.weight_decay < math.inf:
            raise SettingsError(
                f"fit setting weight_decay must be a number ≥ 0, got {self.weight_decay!r}"
            )
        if not 0 <= self.validation < 1:
            raise SettingsError(
                f"fit setting validation must be a fraction in [0, 1), got {self.validation!r}"
            )
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SettingsError(
                f"fit setting warmup must be a non-negative integer, got {self.warmup!r}"
            )
        if (
            not isinstance(self.patience, int)
            or isinstance(self.patience, bool)
            or self.patience < 0
        ):
            raise SettingsError(
                f"fit setting patience must be a non-negative integer, got {self.patience!r}"
            )
        if not isinstance(self.deterministic, bool):
            raise SettingsError(
                f"fit setting deterministic must be true or false, got {self.deterministic!r}"
            )
        if not isinstance(self.loss_options, dict):
            raise SettingsError(
                f"fit setting loss_options must be a mapping of option names to values, "
                f"got {self.loss_options!r}"
            )
        check_loss_options(self.loss, self.loss_options)
        check_memory_settings(self.checkpoint, self.precision, self.micro_batch)
        if self.target not in TARGETS:
            raise SettingsError(
                f"fit setting target must be one of {', '.join(TARGETS)}, got {self.target!r}"
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The names of the settings, as a sweep file's `fit:` section may give them."""
        return tuple(f.name for f in fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data, the identity of a fit (fit and run keys, sweep state).
        `loss_options` only when there are some, so a fit without them keeps the keys of the
        checkpoints and runs already stored."""
        data = asdict(self)
        if not self.loss_options:
            del data["loss_options"]
        for name, default in UNSTATED.items():
            if data[name] == default:
                del data[name]
        return data

    def identity(self) -> dict[str, Any]:
        """What determines the fitted weights: `to_dict` without the settings that change only
        memory and time (`memory.MEMORY_ONLY`), so a fit found again is found whatever they were."""
        return {k: v for k, v in self.to_dict().items() if k not in MEMORY_ONLY}

    def updated(self, changes: dict[str, Any]) -> "FitSettings":
        """These settings with `changes` on top. Loss options belong to their loss: changing the
        loss without giving its options starts from none."""
        if changes.get("loss", self.loss) != self.loss and "loss_options" not in changes:
            changes = {**changes, "loss_options": {}}
        return replace(self, **changes)


UNSTATED = {
    "deterministic": False,
    "checkpoint": "none",
    "precision": "float32",
    "micro_batch": 0,
    "patience": 0,
}
"""Settings left out of `to_dict` at these values, so fits made before they existed keep their
keys."""


@dataclass
class FitResult:
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    """Wall seconds of the fit: the solver's own search before its first update (`prepare`), the
    starting state's validation, the updates and validations (of every part of a resumed fit)."""
    validation: dict[int, float] = field(default_factory=dict)
    """Validation loss by iteration (0: before the first update)."""
    best_iteration: int = 0
    """The iteration whose state the fit kept (the last one when nothing is held out)."""
    iterations_run: int = 0
    """The iterations the fit ran: `iterations`, or fewer when the stopping rule ended it."""
    stopped_by: str = ""
    """What ended the fit: "rule" (`patience` validations without a gain) or "cap"
    (`iterations`); empty while it runs."""
    validation_resolves: float | None = None
    """The smallest relative gain over the starting state its validation seeds resolve
    (`resolution.py`); None without validation seeds."""
    validation_seeds: int | None = None
    """The validation seeds its comparisons used (blocks are added while one is undecided,
    `sequential.py`); None without validation seeds."""
    memory: dict[str, Any] = field(default_factory=dict)
    """The memory plan it ran with and, where measured, the peak of its first update
    (`MemoryPlan.params`, `fit.memory.measured_peak_mib`)."""
    validation_seconds: dict[int, float] = field(default_factory=dict)
    """Fit seconds at each validation, by iteration (0: before the first update), so the
    validation curve can be drawn against time."""
    kept: list["KeptState"] = field(default_factory=list)
    """The kept state each time it changed, oldest first (`fit.keep_state`)."""


Objective = Callable[..., torch.Tensor]
"""(model, batch of the teacher set, input slack δ or None[, groups]) → the scalar loss of the
batch, or with `groups` (index tensors into the batch) the loss of each group, from one rollout."""


KeptState = dict[str, Any]
"""One state the fit kept on its way: `iteration`, fit `seconds` when it was kept, its
validation loss `val_loss` (NaN without validation seeds) and the solver's weights `state`."""


@dataclass(frozen=True, eq=False)
class Best:
    """The kept state so far, and what later states are compared with (`fit.judged`,
    `fit.patience_counted`). A fit's saved state holds it as a plain dict (`to_dict`), so the
    state loads with weights_only; `from_dict` reads that dict, as saved by any version."""

    iteration: int
    """The iteration whose state is kept (with nothing held out: the last, `iterations`)."""
    loss: float
    """Its validation loss on the first block of validation seeds (inf with nothing held out)."""
    state: dict[str, torch.Tensor] | None = None
    """The solver's weights then; None with nothing held out (the last state is kept)."""
    start: list[torch.Tensor] | None = None
    """The starting state's group losses, one tensor per block of validation seeds it was
    measured on, that every later state is compared with; None without validation seeds."""
    start_state: dict[str, torch.Tensor] | None = None
    """The starting state's weights, to measure it on blocks added later."""
    kept_groups: list[torch.Tensor] | None = None
    """The kept state's group losses by block; None while the kept state is the starting one."""
    gained: list[torch.Tensor] | None = None
    """For the stopping rule: the group losses of the last state that gained (None: the starting
    state, `start`)."""
    stale: int = 0
    """For the stopping rule: the validations since a state last gained."""

    @property
    def last_gain(self) -> list[torch.Tensor]:
        """The group losses of the last state that gained: at first the starting state's."""
        return self.start if self.gained is None else self.gained

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a saved fit state (the tensors not copied); `gained` left out while it
        is the starting state's, as fits saved it before this type (so they read it too)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.gained is None:
            del data["gained"]
        return data

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> "Best":
        """`to_dict`'s inverse, for any saved state: missing fields take their defaults, and group
        losses saved as one tensor (before validation came in blocks) become one block."""
        data = {f.name: saved[f.name] for f in fields(cls) if f.name in saved}
        for name in ("start", "gained"):
            if isinstance(data.get(name), torch.Tensor):
                data[name] = [data[name]]
        return cls(**data)
