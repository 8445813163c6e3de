"""What every evaluation metric is: a class registered by name, one file each in this package.

A metric declares

    Options          its options: a frozen dataclass whose fields are keys of a sweep's
                     `evaluation:` section and options of `spanlift eval`, which both read them
                     from here (`__post_init__` refuses a value with `OptionError`)
    rows             its catalogue rows: name, which way is better, and the run params a value is
                     measured against (the leaderboard compares values only where they are equal)
    measures(setup, traits)
                     the params that say what its values are measured against, or
                     MetricUnavailable where it does not apply here (a backbone without prompts
                     or observations, weights that are not there)
    check(setup, reference, backbone)
                     what `spanlift eval` refuses before any work beyond that (a statistics file
                     that does not fit)
    networks(params)  the pretrained networks its values in a run with `params` were measured
                     with, named as a fit's loss names them (`fit.loss_networks`): the leaderboard
                     marks a value measured with a network the fit's loss used

A `SampleMetric` is computed from the solver's samples, shard by shard, on the evaluators:

    prepare(shards, reference)     what it compares with, before any sample (FID's reference)
    load(host)                     its network, on an evaluator, when it first scores there
    state(batch, network)          the mergeable state of one shard's samples (None: nothing)
    image_state(network, images)   the same of given images (a dataset shard), where it can
    finish(state, prepared, done)  its metrics, params, files and console lines

A `SolverMetric` is computed from the solver itself, in the calling process:

    applies_to(solver)             whether the solver has what it reads
    of_solver(solver, backbone, folder, name)  its metrics, params, files and console lines

A new metric is one file here and its test; nothing else names it (docs/evaluation.md).
"""

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
from torch import Tensor

from spanlift.platform.evaluation.metrics.states import MeanState
from spanlift.platform.sampling.rollout import on_device
from spanlift.registry import ClassRegistry

if TYPE_CHECKING:
    from spanlift.backbones import Backbone
    from spanlift.platform.evaluation.metrics.reference import ReferenceSet
    from spanlift.solvers import Solver, SolverSpec


@dataclass(frozen=True)
class Row:
    """A metric as the catalogue lists it (`tracking/metrics.py`)."""

    name: str
    mode: str  # "min" or "max": which way is better
    description: str
    against: tuple[str, ...] = ()  # the run params that say what a value is relative to


@dataclass(frozen=True)
class Options:
    """A metric's options (none here). Fields typed `Path | None` are paths: written in a sweep
    file they are relative to its folder, on the command line they must exist."""

    def within(self, folder: Path) -> "Options":
        """The options as written in a file in `folder`: its relative paths made absolute."""
        paths = {
            f.name: (folder / Path(value).expanduser()).resolve()
            for f in fields(self)
            if f.name in path_fields(type(self)) and (value := getattr(self, f.name))
        }
        return replace(self, **paths)


def path_fields(options: type[Options]) -> tuple[str, ...]:
    """The fields of an options class that hold a path (typed `Path` or `Path | None`)."""
    hints = typing.get_type_hints(options)
    return tuple(
        f.name for f in fields(options) if Path in (hints[f.name], *typing.get_args(hints[f.name]))
    )


@dataclass(frozen=True)
class Traits:
    """What the evaluated backbone has: prompts (ImageReward), observations (skill, LPIPS)."""

    prompted: bool = False
    observed: bool = False
    identity: str = ""


class Setup(Protocol):
    """An evaluation's setup as metrics read it (`evaluator.EvaluatorSetup`)."""

    backbone: str  # the registered name
    backbone_options: dict[str, Any]
    detector: str  # "": the backbone's own
    cache_dir: Path
    teacher: "SolverSpec"  # the solver whose samples metrics compare with
    options: dict[str, Any]  # every metric's options, by key


class Host(Protocol):
    """Where a metric's network lives and a shard is drawn: an evaluator (`evaluator.py`)."""

    setup: "Setup"
    device: torch.device

    @property
    def backbone(self) -> "Backbone": ...
    @property
    def detector(self) -> Any: ...  # the evaluation's feature detector (`detectors/`)
    def teacher_samples(self, noise: Tensor, cond: Tensor | None) -> Tensor: ...


class Shards(Protocol):
    """The evaluators as a metric's `prepare` asks them (`pool.EvaluatorPool`)."""

    setup: "Setup"

    def call(self, method: str, *args: Any) -> Any: ...
    def image_states(self, images: Tensor, metrics: Sequence[str], desc: str) -> dict: ...
    def solver_states(self, spec: Any, checkpoint: Any, seeds: Any, metrics: Any, desc: str): ...


@dataclass
class Batch:
    """A shard's samples (decoded, clipped to [-1, 1]) and what metrics compare them with, each
    made once, when first asked."""

    seeds: list[int]
    samples: Tensor
    host: Host
    noise: Tensor | None = None
    cond: Tensor | None = None

    @cached_property
    def observed(self) -> Tensor | None:
        """The backbone's observations of the seeds (the frames a forecast should match)."""
        return on_device(self.host.backbone.observations(self.seeds), self.host.device)

    @cached_property
    def prompts(self) -> list[str] | None:
        return self.host.backbone.prompts(self.seeds)

    @cached_property
    def teacher(self) -> Tensor:
        """The teacher's samples from the same seeds, decoded and clipped as the samples are."""
        return self.host.teacher_samples(self.noise, self.cond)


@dataclass(frozen=True)
class Done:
    """A finished pass over the solver's samples, as its metrics finish it."""

    samples: int
    wall: float  # seconds of the whole pass, over all evaluators
    sampling: MeanState | None  # solver seconds per sample; None: no sample was drawn
    device: str
    evaluators: int = 1
    folder: Path | None = None  # where its files go; None: no files
    measures: Mapping[str, Any] = field(default_factory=dict)  # what the metrics measured against


@dataclass(frozen=True)
class Finished:
    """What a metric leaves: metrics, params, files, and what the console says of it."""

    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    files: tuple[Path, ...] = ()
    lines: tuple[str, ...] = ()


class EvaluationMetric:
    """A metric with its options (`made` from the values of every metric's options)."""

    name: ClassVar[str]
    """The name it is registered under (`METRICS.register`), which sets it."""
    Options: ClassVar[type[Options]] = Options
    rows: ClassVar[tuple[Row, ...]] = ()
    default: ClassVar[bool] = False
    """Computed by `spanlift eval` when `--metrics` names none."""

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or self.Options()

    @classmethod
    def made(cls, values: Mapping[str, Any]) -> "EvaluationMetric":
        """The metric with its options read from `values` (option key → value; what it leaves
        out is the default)."""
        return cls(cls.Options(**{k: values[k] for k in cls.option_names() if k in values}))

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls.Options)]

    @classmethod
    def produces(cls) -> tuple[str, ...]:
        """The metrics a run that asks for it reports."""
        return tuple(row.name for row in cls.rows)

    def measures(self, setup: "Setup", traits: Traits) -> dict[str, Any]:
        """Params saying what its values are measured against; MetricUnavailable where it does
        not apply here."""
        return {}

    def check(self, setup: "Setup", reference: "ReferenceSet", backbone: "Backbone") -> None:
        """Refuse, before any work, what it could not be computed with."""

    @classmethod
    def networks(cls, params: Mapping[str, str]) -> frozenset[str]:
        """The pretrained networks (`inception`, `digits_eval`, `dinov2`, …) its values in a run
        that recorded `params` were measured with; none by default."""
        return frozenset()


class SampleMetric(EvaluationMetric):
    """A metric of the solver's samples, merged over shards."""

    every_pass: ClassVar[bool] = False
    """Reported by every pass over samples, asked for or not (the sampling time)."""

    @classmethod
    def produces(cls) -> tuple[str, ...]:
        """Its rows' metrics and those every pass over samples reports."""
        passes = [m for _, m in METRICS if issubclass(m, SampleMetric) and m.every_pass]
        return tuple(
            dict.fromkeys([*super().produces(), *(r.name for m in passes for r in m.rows)])
        )

    def prepare(self, shards: Shards, reference: "ReferenceSet") -> Any:
        """What it compares the samples with, made before they are drawn."""
        return None

    def load(self, host: Host) -> Any:
        """Its network on `host`'s device."""
        return None

    def state(self, batch: Batch, network: Any) -> Any:
        """The mergeable state of `batch` (`merge`, `count`); None: it keeps none."""
        return None

    def image_state(self, network: Any, images: Tensor) -> Any:
        raise NotImplementedError(f"{self.name} scores samples, not given images")

    def finish(self, state: Any, prepared: Any, done: Done) -> Finished:
        raise NotImplementedError


class SolverMetric(EvaluationMetric):
    """A metric of the solver itself (its steps on a few samples), not of a pass over samples."""

    needs: ClassVar[str] = ""
    """What a solver must be for it to apply, as a refusal says it: `a SpanLift solver`."""

    def applies_to(self, solver: "Solver") -> bool:
        return True

    def of_solver(
        self, solver: "Solver", backbone: "Backbone", folder: Path, name: str
    ) -> Finished:
        raise NotImplementedError


METRICS: ClassRegistry[type[EvaluationMetric]] = ClassRegistry("metric")
"""name → metric class (`evaluation.metrics`, `spanlift eval --metrics`)."""


def made(names: Sequence[str], options: Mapping[str, Any]) -> list[Any]:
    """The metrics `names`, each made with its options from `options`."""
    return [METRICS.get(name).made(options) for name in names]


def chosen(names: Sequence[str], options: Mapping[str, Any], kind: type) -> list[Any]:
    """The metrics of `kind` among `names`, made with `options`; for sample metrics, with those
    every pass reports."""
    wanted = [n for n in names if issubclass(METRICS.get(n), kind)]
    if kind is SampleMetric and wanted:
        wanted += [n for n, m in METRICS if issubclass(m, kind) and m.every_pass]
    return made(list(dict.fromkeys(wanted)), options)


def option_values(given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every registered metric's options by key, `given` on top of the defaults."""
    values: dict[str, Any] = {}
    for _, metric in METRICS:
        values |= {f.name: getattr(metric.Options(), f.name) for f in fields(metric.Options)}
    return {**values, **(given or {})}


def option_owner(key: str) -> type[EvaluationMetric]:
    """The metric whose option `key` is."""
    return next(m for _, m in METRICS if key in m.option_names())
