"""A name → class registry, shared by solvers, backbones, operators and losses.

A registry's plug-ins live in one package; `import_modules` imports every module of it, so a new
plug-in is found by being there, with no list of modules kept by hand.
"""

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from spanlift.errors import UnknownNameError

T = TypeVar("T")
C = TypeVar("C", bound=type)


class Registry(Generic[T]):
    """Maps names to registered objects; an unknown name raises an error listing the known ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; expected one of: {known}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(sorted(self._items.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._items


class ClassRegistry(Registry[C]):
    """A registry of classes that gives each class its registered name as `name`: the
    registration is where a class is named, and the class does not restate it."""

    def register(self, name: str) -> Callable[[C], C]:
        add = super().register(name)

        def add_named(cls: C) -> C:
            if "name" in vars(cls):
                raise ValueError(
                    f"{self.kind} class {cls.__qualname__} already has the name {cls.name!r}; "
                    f"its registration as {name!r} names it"
                )
            add(cls)
            cls.name = name
            return cls

        return add_named


def import_modules(package: str, path: Iterable[str]) -> None:
    """Import every module of `package` (found on its `path`), in name order, so the plug-ins
    they hold register themselves. Subpackages are left alone."""
    modules = sorted(m.name for m in pkgutil.iter_modules(path) if not m.ispkg)
    for module in modules:
        importlib.import_module(f"{package}.{module}")
