"""One registry style for every pluggable kind: fault operators, mitigations, readers, retrievers;
and plug-ins, installed packages that add to the registries through the entry-point group
``layerlab``.

A :class:`Registry` is a read-only mapping from a name to a registered item (a class, a factory or
a config), plus :meth:`Registry.register` (usable as a class decorator) and :meth:`Registry.lookup`,
whose error names the kind and the known names. The DSL files refer to registered items by name.

A plug-in is a distribution that declares, in its ``pyproject.toml``::

    [project.entry-points.layerlab]
    my_guards = "my_package.layerlab_plugin"

Each entry point names a module (no ``:attribute``); importing it registers its items with the
registries' own decorators and functions (``@mitigations.register``,
``@operators.register_operator``, ``retrieval.register(...)``, ``READERS.register(...)``) and, for a mitigation to get arms,
an arms file (``mitigations.ARM_FILES``; see :mod:`layerlab.mitigations.arms`). Plug-ins are
loaded once per process, lazily, on the first lookup or iteration of any registry (never when
``layerlab`` is imported), in the order of (distribution, entry-point name). A plug-in that fails
to load raises :class:`PluginError`, one line naming the distribution and the entry point, on
that lookup and every later one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from types import ModuleType
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

GROUP = "layerlab"
"""The entry-point group plug-ins declare."""


class PluginError(RuntimeError):
    """An installed plug-in failed to load; the message names its distribution and entry point."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the known name closest to a misspelt ``name`` (difflib,
    case ignored), or ``""`` when none is close: what every "unknown NAME" message appends."""
    import difflib

    known = list(known)
    lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


_state: Literal["new", "loading", "loaded"] | PluginError = "new"


def load_plugins() -> None:
    """Import every entry point of the ``layerlab`` group, once per process.

    Called by every registry on its first lookup or iteration. A lookup made while plug-ins load
    (a plug-in's own import) sees what is registered so far. A failure is kept: it is raised
    again on every later call, so no run goes on with part of a plug-in registered."""
    global _state
    if _state == "loaded" or _state == "loading":
        return
    if isinstance(_state, PluginError):
        raise _state
    _state = "loading"
    eps = metadata.entry_points(group=GROUP)
    for ep in sorted(eps, key=lambda e: (_dist_name(e), e.name)):
        try:
            loaded = ep.load()
            if not isinstance(loaded, ModuleType):
                raise TypeError(f"names a {type(loaded).__name__}, not a module")
        except Exception as exc:
            from layerlab._code import user_frame
            from layerlab._secrets import redact

            why = " ".join(str(exc).split()) or "no message"
            at = user_frame(exc)  # the plug-in's own line, when it is not an installed package
            _state = PluginError(redact(
                f"layerlab plug-in {ep.name} = {ep.value!r} (distribution "
                f"{_dist_name(ep)}) failed to load: {type(exc).__name__}: {why}"
            ) + (f" at {at}" if at else ""))  # fmt: skip
            raise _state from exc
    _state = "loaded"


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "unknown"


class Registry(Mapping[str, T], Generic[T]):
    """Named items of one kind (``kind`` is used in error messages, e.g. "fault operator")."""

    def __init__(self, kind: str, name_of: Callable[[T], str] | None = None):
        self.kind = kind
        self._name_of = name_of
        self._items: dict[str, T] = {}
        self._complete = False  # plug-ins loaded

    def register(self, item: T, name: str | None = None) -> T:
        """Add ``item`` under ``name`` (default: derived by ``name_of``); return it unchanged,
        so it works as a class decorator. Registering a name again replaces the earlier item."""
        if name is None:
            if self._name_of is None:
                raise TypeError(f"{self.kind} registry needs an explicit name")
            name = self._name_of(item)
        self._items[name] = item
        return item

    def _all(self) -> dict[str, T]:
        """The items, once the installed plug-ins have registered theirs."""
        if not self._complete:
            load_plugins()
            self._complete = _state == "loaded"
        return self._items

    def lookup(self, name: str) -> T:
        """The item registered as ``name``; ``KeyError`` naming the kind and the known names."""
        items = self._all()
        try:
            return items[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, items)}; known: {sorted(items)}"
            ) from None

    def __getitem__(self, name: str) -> T:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())
