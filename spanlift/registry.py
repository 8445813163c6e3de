"""A name → class registry, shared by solvers, backbones, operators and losses."""

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from spanlift.errors import UnknownNameError

T = TypeVar("T")


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
