"""Lazy public names of a package (PEP 562): ``from sharewise.datasets import Dataset`` imports the defining
module on first use, so a command that never touches a name never pays for its imports (``sharewise --help``).

Usage in a package's ``__init__``::

    _EXPORTS = {"Dataset": "store", "read_datasets": "store"}   # public name -> defining submodule
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` that resolve ``exports`` (name -> submodule) on
    first use and keep each resolved value in ``namespace`` (the package's ``globals()``), so later look-ups are
    plain attribute reads."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
