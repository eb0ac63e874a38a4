"""One registry pattern for benchmarks, providers and graders.

Built-in components are listed by import path in a table beside them (``benchmarks/table.py``,
``graders/table.py``, ``providers/table.py``), read the first time a name is asked for, and each is
imported only when asked for, so ``grandrounds list`` stays fast and nothing runs at import; this
module names no component. Plugins register through the
entry-point groups ``grandrounds.benchmarks``, ``grandrounds.providers`` and ``grandrounds.graders``, exactly like
built-ins. A component is named by a :class:`Spec` (name + arguments) that is recorded in
the store, so it can be rebuilt later.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from grandrounds.core.hashing import canonical_json

T = TypeVar("T")


class UnknownComponent(KeyError):
    """Raised for a name nobody registered; the message suggests the closest names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


@dataclass(frozen=True)
class Spec:
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}{canonical_json(self.args)}"


class Registry(Generic[T]):
    """Name -> component class, resolved lazily from ``module:attr`` strings or entry points."""

    def __init__(self, kind: str, builtins: Mapping[str, str] | str, group: str) -> None:
        """``builtins``: name -> ``module:attr``, or the name of a module holding that table as
        ``BUILTINS`` (imported the first time a name is asked for)."""
        self.kind = kind
        self._table = builtins
        self._builtins: dict[str, str] | None = (
            None if isinstance(builtins, str) else dict(builtins)
        )
        self._loaded: dict[str, type[T]] = {}
        self._group = group
        self._plugins_scanned = False

    @property
    def _paths(self) -> dict[str, str]:
        """Name -> ``module:attr`` of the built-ins (and of plugins, once scanned)."""
        if self._builtins is None:
            assert isinstance(self._table, str)
            self._builtins = dict(importlib.import_module(self._table).BUILTINS)
        return self._builtins

    @_paths.setter
    def _paths(self, paths: dict[str, str]) -> None:
        self._builtins = paths

    def register(self, name: str, cls: type[T]) -> None:
        self._loaded[name] = cls

    @contextmanager
    def registered(self, name: str, cls: type[T]) -> Iterator[None]:
        """``cls`` registered as ``name`` for the duration of a block (tests, scoped plugins);
        whatever the name meant before is restored afterwards."""
        before = self._loaded.get(name)
        self._loaded[name] = cls
        try:
            yield
        finally:
            if before is None:
                self._loaded.pop(name, None)
            else:
                self._loaded[name] = before

    def _scan_plugins(self) -> None:
        if self._plugins_scanned:
            return
        self._plugins_scanned = True
        for ep in entry_points(group=self._group):
            self._paths.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        self._scan_plugins()
        return sorted(set(self._paths) | set(self._loaded))

    def get(self, name: str) -> type[T]:
        if name in self._loaded:
            return self._loaded[name]
        path = self._paths.get(name)
        if (
            path is None
        ):  # built-ins win over plugins of the same name, so only other names need the scan (about 0.06 s)
            self._scan_plugins()
            path = self._paths.get(name)
        if path is None:
            close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownComponent(
                f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})"
            )
        module_name, _, attr = path.partition(":")
        cls = getattr(importlib.import_module(module_name), attr)
        self._loaded[name] = cls
        return cls


#: The registries: each reads its package's table of built-ins (``BUILTINS`` in the module named
#: here) when first asked, and plugins from its entry-point group.
BENCHMARKS: Registry[Any] = Registry(
    "benchmark", "grandrounds.benchmarks.table", "grandrounds.benchmarks"
)
PROVIDERS: Registry[Any] = Registry(
    "provider", "grandrounds.providers.table", "grandrounds.providers"
)
GRADERS: Registry[Any] = Registry("grader", "grandrounds.graders.table", "grandrounds.graders")
