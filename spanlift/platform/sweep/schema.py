"""Reading a sweep file's sections into their typed settings, with the key path of every error.

A section is read from its dataclass: the fields are the keys it takes, each field's annotation
the type its value must have, its default what an absent key means. What more a value must be
is written in the annotation with a `Rule`, e.g. `workers: PositiveInt = 1`, so the file's
schema, the settings' types and the `--help` of the commands that share them (`cli.options`)
come from one place:

    section = Section(data, "resources", "sweep.yaml")
    Resources(**read_fields(section, Resources))

A bad value is one line naming the file, the key path, the value and what was expected:
`sweep.yaml: resources.workers: expected a positive integer, got 0`.
"""

import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Annotated, Any, NoReturn

from spanlift.errors import SettingsError, SpanliftError


class SweepConfigError(SettingsError):
    """A sweep file that does not follow the schema."""


@dataclass(frozen=True)
class Rule:
    """What a value of the right type must also be: `holds(value)`, said as `expected`."""

    expected: str
    holds: Callable[[Any], bool]


PositiveInt = Annotated[int, Rule("a positive integer", lambda v: v >= 1)]
PositiveNumber = Annotated[float, Rule("a positive number", lambda v: v > 0)]
GpuShare = Annotated[
    float,
    Rule("a positive number", lambda v: v > 0),
    Rule(
        "a fraction of one GPU (0 < x ≤ 1) or a whole number of GPUs",
        lambda v: v <= 1 or v % 1 == 0,
    ),
]
"""GPUs a worker or evaluator holds: the amounts Ray can place."""
Switch = Annotated[bool | str, Rule("true, false or auto", lambda v: v in (True, False, "auto"))]
"""True, False, or "auto" (decided when the sweep starts)."""
CountOrAuto = Annotated[
    int | str,
    Rule("a positive integer or auto", lambda v: v == "auto" or (isinstance(v, int) and v >= 1)),
]


class Section:
    """One mapping of the YAML, at a key path of a file, for reading and for error messages."""

    def __init__(self, data: Any, path: str, source: str) -> None:
        self.source, self.path = source, path
        if not isinstance(data, dict):
            self.fail("", data, "a mapping of keys to values")
        self.data = data

    def fail(self, key: str, value: Any, expected: str) -> NoReturn:
        self.error(key, f"expected {expected}, got {value!r}")

    def error(self, key: str, message: str) -> NoReturn:
        where = f"{self.path}.{key}" if self.path and key else (key or self.path or "top level")
        raise SweepConfigError(f"{self.source}: {where}: {message}")

    def only(self, *allowed: str) -> None:
        """Refuse a key that is not among `allowed`, naming the ones that are."""
        for key in self.data:
            if key not in allowed:
                self.error(key, f"unknown key; the keys here are: {', '.join(allowed)}")

    def get(
        self, key: str, kind: type | tuple[type, ...], default: Any = ..., expected: str = ""
    ) -> Any:
        """The value of `key`, of type `kind`; `default` when absent (required without one)."""
        if key not in self.data:
            if default is ...:
                self.fail(key, None, f"a value for the required key '{key}'")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            self.fail(key, value, expected or f"a {getattr(kind, '__name__', kind)}")
        return value

    def child(self, key: str, default: Any = ...) -> "Section":
        """The mapping under `key` as a section of its own."""
        data = self.get(key, dict, default, "a mapping")
        return Section(data, f"{self.path}.{key}".strip("."), self.source)

    def checked(self, key: str, check: Callable[[], Any]) -> Any:
        """`check()`'s result; a user error it raises is re-raised under this section's `key`."""
        try:
            return check()
        except SpanliftError as exc:
            self.error(key, str(exc))

    def value(self, key: str, annotation: Any, default: Any) -> Any:
        """The value of `key` as `annotation` types it; `default` when absent."""
        return self.typed(key, annotation) if key in self.data else default

    def typed(self, key: str, annotation: Any) -> Any:
        """The value of `key` as `annotation` types it (see `read_fields`)."""
        base, rules = unwrapped(annotation)
        kinds = tuple(
            unwrapped(k)[0] for k in (typing.get_args(base) if _is_union(base) else [base])
        )
        value = self.data[key]
        if value is None and type(None) in kinds:
            return None
        expected = rules[0].expected if rules else _said(kinds)
        if typing.get_origin(base) is tuple:
            if not isinstance(value, list):
                self.fail(key, value, f"a list of {_names(typing.get_args(base)[:1])} values")
            return tuple(value)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not _is_instance(value, kinds):
            self.fail(key, value, expected)
        for rule in rules:
            if not rule.holds(value):
                self.fail(key, value, rule.expected)
        return value


def read_fields(section: Section, settings: type, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The fields of the dataclass `settings` the section gives, each checked against its
    annotation (type, None where Optional, every `Rule`); a key that is no field (nor in `skip`,
    read by the caller) is refused. Absent keys are left to the fields' defaults."""
    skip = tuple(skip)
    names = [f.name for f in fields(settings)]
    section.only(*names, *skip)
    hints = typing.get_type_hints(settings, include_extras=True)
    return {n: section.typed(n, hints[n]) for n in names if n in section.data and n not in skip}


def unwrapped(annotation: Any) -> tuple[Any, list[Rule]]:
    """(the type, its rules) of `Annotated[type, *rules]`; Optional rules stay with the type."""
    if typing.get_origin(annotation) is Annotated:
        base, *extras = typing.get_args(annotation)
        return base, [e for e in extras if isinstance(e, Rule)]
    if _is_union(annotation):
        args = [unwrapped(a) for a in typing.get_args(annotation)]
        return annotation, [rule for _, rules in args for rule in rules]
    return annotation, []


def _is_union(annotation: Any) -> bool:
    return isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union


def _is_instance(value: Any, kinds: tuple[Any, ...]) -> bool:
    """`isinstance` over plain types, a bool being no number."""
    for kind in kinds:
        if kind in (int, float) and isinstance(value, bool):
            continue
        if isinstance(kind, type) and isinstance(value, kind):
            return True
    return False


def _said(kinds: tuple[Any, ...]) -> str:
    """'a str', 'a str or None' for an error message."""
    return "a " + _names(kinds)


def _names(kinds: tuple[Any, ...]) -> str:
    """'str', 'str or None'."""
    names = [getattr(k, "__name__", str(k)) for k in kinds]
    return " or ".join(n if n != "NoneType" else "None" for n in names)
