"""One registry style for every pluggable kind: fault operators, mitigations, readers, retrievers.

A :class:`Registry` is a read-only mapping from a name to a registered item (a class, a factory or
a config), plus :meth:`Registry.register` (usable as a class decorator) and :meth:`Registry.lookup`,
whose error names the kind and the known names. The DSL files refer to registered items by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Named items of one kind (``kind`` is used in error messages, e.g. "fault operator")."""

    def __init__(self, kind: str, name_of: Callable[[T], str] | None = None):
        self.kind = kind
        self._name_of = name_of
        self._items: dict[str, T] = {}

    def register(self, item: T, name: str | None = None) -> T:
        """Add ``item`` under ``name`` (default: derived by ``name_of``); return it unchanged,
        so it works as a class decorator. Registering a name again replaces the earlier item."""
        if name is None:
            if self._name_of is None:
                raise TypeError(f"{self.kind} registry needs an explicit name")
            name = self._name_of(item)
        self._items[name] = item
        return item

    def lookup(self, name: str) -> T:
        """The item registered as ``name``; ``KeyError`` naming the kind and the known names."""
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {sorted(self._items)}") from None

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
