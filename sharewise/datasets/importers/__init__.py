"""Importers: turn public or third-party measurements into the profiles and pairs tables of a dataset folder.

``IMPORTERS`` is the one registry of formats; the CLI's ``sharewise import`` commands and the tests read it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# format name -> "module:function" inside this package, imported on first use.
IMPORTERS: dict[str, str] = {
    "csv": "generic_csv:import_csv",
    "gavel": "gavel:import_gavel",
}


@dataclass
class ImportResult:
    """What an import wrote, for the CLI summary and the tests.

    Example: ``ImportResult(out=Path("gavel-ds"), profiles=78, pairs=2028, pairs_ok=976,
    status_counts={"ok": 976, "oom": 1052}, devices=["k80", "p100", "v100"], warnings=[...])``.
    """

    out: Path
    profiles: int
    pairs: int
    pairs_ok: int
    status_counts: dict[str, int]
    devices: list[str]
    workloads: list[str]
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    static_features: dict[str, int] = field(default_factory=dict)


def get_importer(name: str) -> Callable[..., ImportResult]:
    """Return the import function of format ``name``; an unknown name lists the known ones."""
    from sharewise.errors import ConfigError

    if name not in IMPORTERS:
        raise ConfigError(f"unknown import format {name!r}; known formats: {', '.join(sorted(IMPORTERS))}")
    module_name, _, func = IMPORTERS[name].partition(":")
    module = importlib.import_module(f"sharewise.datasets.importers.{module_name}")
    return getattr(module, func)


__all__ = ["IMPORTERS", "ImportResult", "get_importer"]
