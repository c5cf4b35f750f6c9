"""A small name -> factory registry (one per concept: datasets, models, attacks, methods), and the
discovery that makes a new file in a component package register itself.

Each component package (``robfair.attacks``, ``robfair.data``, ``robfair.models``,
``robfair.training.methods``) calls :func:`import_submodules` in its ``__init__``: every module of
the package is imported, so a module whose objects are decorated with the package's registry
(``@ATTACKS.register``, ``@register_dataset``, ``@MODELS.register``, ``@METHODS.register``) is
registered without an import line anywhere else.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from .errors import RobfairError

T = TypeVar("T")


@dataclass
class Entry(Generic[T]):
    name: str
    obj: T
    help: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    #: what a registry's users read besides the object (an attack's name grammar, a model's
    #: contract-test input shape, ...): free keywords given to ``add`` / ``register``
    meta: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Maps names (and aliases) to objects. ``get`` of an unknown name raises a ``RobfairError``
    that lists the valid names and the closest match."""

    def __init__(self, kind: str, error: type[RobfairError] = RobfairError) -> None:
        self.kind = kind
        self.error = error
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, *, help: str = "", aliases: tuple[str, ...] = (), **meta: Any) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj, help=help, aliases=aliases, **meta)
            return obj

        return deco

    def add(self, name: str, obj: T, *, help: str = "", aliases: tuple[str, ...] = (), **meta: Any) -> None:
        key = name.lower()
        if key in self._entries or key in self._aliases:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        if not help and getattr(obj, "__doc__", None):
            help = (obj.__doc__ or "").strip().splitlines()[0]
        self._entries[key] = Entry(key, obj, help, tuple(a.lower() for a in aliases), dict(meta))
        for a in aliases:
            self._aliases[a.lower()] = key

    def canonical(self, name: str) -> str:
        key = name.strip().lower()
        key = self._aliases.get(key, key)
        if key not in self._entries:
            close = difflib.get_close_matches(key, self.names(), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise self.error(f"unknown {self.kind} '{name}'{hint}; choose one of: {', '.join(self.names())}")
        return key

    def get(self, name: str) -> T:
        return self._entries[self.canonical(name)].obj

    def entry(self, name: str) -> Entry[T]:
        return self._entries[self.canonical(name)]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = name.strip().lower()
        return key in self._entries or key in self._aliases

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


def import_submodules(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> list[str]:
    """Import every module of ``package`` (whose ``__path__`` is ``path``) except ``skip`` and names
    starting with ``_``, in sorted order; returns the imported module names. A package's
    ``__init__`` calls ``import_submodules(__name__, __path__)`` so each of its files registers its
    components on import. Importing a module twice is a no-op (``sys.modules``)."""
    skipped = set(skip)
    names = sorted(m.name for m in pkgutil.iter_modules(list(path)) if not m.name.startswith("_") and m.name not in skipped)
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names


def describe(obj: Any) -> str:
    return (getattr(obj, "__doc__", "") or "").strip().splitlines()[0] if getattr(obj, "__doc__", None) else ""
