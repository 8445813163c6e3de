"""What every searcher is: a frozen dataclass registered by name, its fields its options.

`search.algorithm` names the searcher; its options sit beside it in the sweep file's `search:`
section (with `metric` and `mode`) and are checked when it is made (`__post_init__` raises
`OptionError`). The sweep makes it once, keeps it in its config, and hands it a `Space` (built
by `sweep/space.py`) to ask:

    trials(size)     how many distinct configurations it measures of a space of `size`
    repeats(size)    whether its proposals can repeat a configuration: the driver then runs it
                     inside the distinct-configuration layer (`sweep/distinct_search.py`)
    optuna(space)    the Optuna space, sampler and first points of its OptunaSearch
    note(size)       what the console adds to "12, 2 at a time" ("" for nothing)
    stored()         how the validated sweep file stores it

Optuna is imported where a sampler is made: a trial's process unpickles the searcher with the
sweep's config and needs no Optuna.
"""

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from spanlift.errors import OptionError
from spanlift.registry import Registry

if TYPE_CHECKING:
    import optuna


class Space(Protocol):
    """A sweep's configurations as a searcher is handed them (`sweep/space.py`'s SearchSpace)."""

    @property
    def size(self) -> int: ...  # configurations
    @property
    def metric(self) -> str: ...  # the search metric on validation seeds, `val_rmse`
    @property
    def mode(self) -> str: ...  # min or max
    @property
    def seed(self) -> int: ...  # the sweep's fit seed
    def indices(self) -> dict[str, list[int]]: ...  # every configuration by index
    def longest_first(self) -> list[dict[str, int]]: ...  # by index, the longest first
    def by_entry(self) -> Callable[["optuna.Trial"], None]: ...  # define-by-run, by entry


@dataclass(frozen=True)
class OptunaPlan:
    """What the driver builds a searcher's OptunaSearch from."""

    space: Any
    """Optuna distributions by parameter name, or a define-by-run function (`Space.by_entry`)."""
    sampler: "optuna.samplers.BaseSampler"
    points: list[dict[str, Any]] | None = None
    """Configurations proposed first, in order."""


def whole(value: Any, least: int) -> bool:
    """Whether `value` is an integer (not a bool) of at least `least`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


@dataclass(frozen=True)
class SearchAlgorithm:
    """A searcher: its options are the fields of its dataclass (none here)."""

    name: ClassVar[str] = ""
    """The name it is registered under (`register`)."""
    default: ClassVar[bool] = False
    """Whether a sweep file that names no `search.algorithm` gets it (one searcher sets it)."""

    def trials(self, size: int) -> int:
        """Distinct configurations it measures of a space of `size`: every one."""
        return size

    def repeats(self, size: int) -> bool:
        """Whether its proposals can repeat a configuration: it then runs inside the
        distinct-configuration layer, which answers a repeat without a trial and, stuck on
        repeats, runs the next configuration not yet measured of the space by entry."""
        return False

    def optuna(self, space: Space) -> OptunaPlan:
        """Its OptunaSearch over `space`."""
        raise NotImplementedError

    def note(self, size: int) -> str:
        """How it runs a space of `size`, for the console; "" for nothing to add."""
        return ""

    def stored(self) -> dict[str, Any]:
        """How the validated sweep file stores it: `algorithm`, `num_samples` (0 for a searcher
        that has none) and the options that are set (not None), so a searcher gaining an option
        stores the sweeps it already ran as before and `--resume` still matches them."""
        options = {k: v for k, v in asdict(self).items() if v is not None}
        return {"algorithm": self.name, "num_samples": 0, **options}

    @classmethod
    def options(cls) -> list[str]:
        """The keys it takes in the sweep file's `search:` section."""
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class Sampled(SearchAlgorithm):
    """A searcher that samples the space by entry with an Optuna sampler, `num_samples` distinct
    configurations; a space no larger runs each configuration once, as the grid does."""

    num_samples: int = 1
    """Distinct configurations to measure."""
    seed: int | None = None
    """The sampler's seed; None: the sweep's fit seed (`fit.seed`)."""

    def __post_init__(self) -> None:
        if not whole(self.num_samples, 1):
            raise OptionError("num_samples", self.num_samples, "a positive integer")
        if self.seed is not None and not whole(self.seed, 0):
            raise OptionError("seed", self.seed, "a non-negative integer")

    def sampler(self, seed: int) -> "optuna.samplers.BaseSampler":
        """The Optuna sampler, seeded."""
        raise NotImplementedError

    def trials(self, size: int) -> int:
        return min(size, self.num_samples)

    def repeats(self, size: int) -> bool:
        return self.num_samples < size

    def optuna(self, space: Space) -> OptunaPlan:
        if not self.repeats(space.size):
            return every_configuration(space)
        seed = space.seed if self.seed is None else self.seed
        return OptunaPlan(space.by_entry(), self.sampler(seed))

    def note(self, size: int) -> str:
        if self.repeats(size):
            return ""
        return (
            f"the search space has {size} configurations, no more than num_samples "
            f"{self.num_samples}: each runs once"
        )


def every_configuration(space: Space) -> OptunaPlan:
    """Optuna's GridSampler over every configuration's index: each runs exactly once, the
    longest first."""
    import optuna

    indices = space.indices()
    distributions = {k: optuna.distributions.CategoricalDistribution(v) for k, v in indices.items()}
    return OptunaPlan(
        distributions, optuna.samplers.GridSampler(indices, seed=0), space.longest_first()
    )


SEARCHERS: Registry[type[SearchAlgorithm]] = Registry("searcher")
"""name → searcher class (`search.algorithm`)."""

S = TypeVar("S", bound=type[SearchAlgorithm])


def register(name: str) -> Callable[[S], S]:
    """Register a searcher class under `name`, which it then carries as `name`."""

    def add(cls: S) -> S:
        cls.name = name
        return SEARCHERS.register(name)(cls)

    return add


def stored_searcher(stored: dict[str, Any]) -> SearchAlgorithm:
    """The searcher a stored sweep names (`SearchAlgorithm.stored`), with the options it takes."""
    searcher = SEARCHERS.get(stored["algorithm"])
    return searcher(**{k: stored[k] for k in searcher.options() if k in stored})


def default_search() -> SearchAlgorithm:
    """The searcher of a sweep file that names none, with its default options."""
    return next(cls for _, cls in SEARCHERS if cls.default)()
