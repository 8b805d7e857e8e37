"""One registry shape for every plug-in kind: a name mapped to a lazily imported object of one typed kind.

Workloads, policies, sharing modes, executors, trace formats and importers each have one ``Registry``. An
entry names the object as ``"package.module:attribute"``; the module is imported on first ``get``, so
listing names (CLI choices, help text, test parametrization) imports nothing heavy. Each registry states
the one signature its objects follow (``signature``), so a caller never switches on a plug-in's name.

Example::

    POLICIES = Registry("policy", "sharewise.policy", {"exclusive-fifo": "exclusive:exclusive_fifo"},
                        signature="(queue, cluster, table, now) -> list[GpuPlacement]")
    POLICIES.get("exclusive-fifo")    # imports sharewise.policy.exclusive on first use
    POLICIES.choices()                # "exclusive-fifo" (for help text)
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from sharewise.errors import ConfigError, SharewiseError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names of one plug-in kind mapped to lazily imported objects, in a stated order.

    Parameters
    ----------
    kind : str
        What an entry is, for messages: ``"policy"``, ``"sharing mode"``, ...
    package : str
        Package that relative targets (``"module:attr"``) live in; a target with a dot before the colon
        (``"pkg.mod:attr"``) is absolute.
    entries : mapping of str to str
        Name -> target, in the order listings show them.
    signature : str
        The typed signature every object of this kind follows (documentation, shown in ``repr``).
    error : type
        Error raised for an unknown name (a ``SharewiseError``; ``ConfigError`` by default).
    plural : str, optional
        Plural of ``kind`` for messages (default: ``kind`` + "s", or "ies" for a trailing "y").
    """

    def __init__(
        self,
        kind: str,
        package: str,
        entries: Mapping[str, str],
        *,
        signature: str = "",
        error: type[SharewiseError] = ConfigError,
        plural: str | None = None,
    ) -> None:
        self.kind = kind
        self.plural = plural or (kind[:-1] + "ies" if kind.endswith("y") else kind + "s")
        self.package = package
        self.signature = signature
        self._entries = dict(entries)
        self._error = error
        self._loaded: dict[str, T] = {}

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)}; {self.signature})"

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """Return the registered names in registry order."""
        return list(self._entries)

    def choices(self, extra: tuple[str, ...] = ()) -> str:
        """Return the names joined for help text, e.g. ``"cpu | cpu-partition | timeslice | mps"``."""
        return " | ".join([*extra, *self._entries])

    def target(self, name: str) -> str:
        """Return the absolute ``module:attribute`` of ``name`` (no import)."""
        self.check(name)
        module, _, attr = self._entries[name].partition(":")
        if "." not in module:
            module = f"{self.package}.{module}"
        return f"{module}:{attr}"

    def check(self, name: str) -> str:
        """Return ``name`` if registered; otherwise raise the registry's error listing the known names."""
        if name not in self._entries:
            raise self._error(
                f"unknown {self.kind} {name!r}; known {self.plural}: {', '.join(sorted(self._entries))}"
            )
        return name

    def get(self, name: str) -> T:
        """Return the object registered as ``name``, importing its module on first use."""
        if name not in self._loaded:
            module, _, attr = self.target(name).partition(":")
            self._loaded[name] = getattr(importlib.import_module(module), attr)
        return self._loaded[name]

    def items(self) -> Iterator[tuple[str, T]]:
        """Yield ``(name, object)`` for every entry, importing each."""
        for name in self._entries:
            yield name, self.get(name)
