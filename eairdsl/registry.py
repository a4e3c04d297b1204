"""Named implementations, registered where they are declared and looked up by name.

The CLI's choices (`--auditor offline|llm|oracle`, `--agent`, `--reviewer`, an
import FORMAT) used to be `match` statements and `kind == "llm"` tests spread over
the factories, so a new auditor or importer meant editing every place that knew
the list. A `Registry` keeps the list in one place, in registration order, with
what each entry needs to know about itself (Inspect's registry is the model:
`@scorer` registers the factory, `registry_create` builds by name):

    AUDITORS: Registry[AuditorKind] = Registry("auditor", option="--auditor")

    @AUDITORS.register("offline")
    def _offline(...): ...

    AUDITORS.get("nobody")  # UsageError: unknown auditor 'nobody' (--auditor); choose ...

A registry can also name modules that register into it when imported (`load`):
the first lookup imports them, so a stage lists its plug-ins without importing
them at start-up (the importers register themselves this way). Entries are
usually factories that import their implementation lazily, so choosing the
offline auditor never loads litellm.

This module sits at the package floor beside `errors`: it imports nothing else of
the package, so any stage may hold a registry without climbing the import graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import import_module
from typing import Generic, TypeVar

from eairdsl.errors import UsageError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to entries of one kind (`what`: "auditor", "agent", "format"), in order.

    `option` is the command-line option that chooses among them (it locates the
    error of an unknown name); `load` names modules whose import registers entries,
    imported on the first lookup (a module that does not exist is skipped: a
    plug-in still being written).
    """

    def __init__(self, what: str, *, option: str | None = None,
                 load: tuple[str, ...] = ()) -> None:
        self.what = what
        self.option = option
        self._load = load
        self._loaded = not load
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str | None] = {}

    # ---------------------------------------------------------------- registering
    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers what it decorates under `name` and returns it."""
        def add(entry: T) -> T:
            return self.add(name, entry)
        return add

    def add(self, name: str, entry: T, *, origin: str | None = None) -> T:
        """Register `entry` under `name`. `origin` is the module that declares it (by
        default the entry's own `__module__`, for a function or class). A name taken by
        an entry of another module is an error (two plug-ins claiming one name); the
        same module registering again (a reload) replaces its entry."""
        where = origin if origin is not None else _module(entry)
        if name in self._entries and self._origins.get(name) != where:
            raise ValueError(f"{self.what} {name!r} is registered twice "
                             f"({self._origins.get(name)} and {where})")
        self._entries[name] = entry
        self._origins[name] = where
        return entry

    # ---------------------------------------------------------------- looking up
    def get(self, name: str) -> T:
        """The entry named `name`; a UsageError that names the option and lists the
        choices when there is none."""
        found = self.find(name)
        if found is None:
            raise UsageError(self.unknown(name))
        return found

    def find(self, name: str) -> T | None:
        """The entry named `name`, or None (for callers that only ask)."""
        self._ensure_loaded()
        return self._entries.get(name)

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        self._ensure_loaded()
        return tuple(self._entries)

    def as_dict(self) -> dict[str, T]:
        """A copy of the table: name -> entry."""
        self._ensure_loaded()
        return dict(self._entries)

    def unknown(self, name: str) -> str:
        """The message for a name that is not registered: `unknown auditor 'x'
        (--auditor); choose offline, llm or oracle`."""
        where = f" ({self.option})" if self.option else ""
        return f"unknown {self.what} '{name}'{where}; choose {self.choices()}"

    def choices(self) -> str:
        """The names for people: `a`, `a or b`, `a, b or c`."""
        names = self.names()
        if len(names) <= 1:
            return "".join(names) or "(none registered)"
        return ", ".join(names[:-1]) + " or " + names[-1]

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for name in self._load:
            try:
                import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name != name:
                    raise


def _module(entry: object) -> str | None:
    """Where an entry was declared: a function's or class's module; None for an instance
    (its class's module says nothing of who registered it: pass `origin`)."""
    return getattr(entry, "__module__", None) if callable(entry) else None
