"""Importers: turn public or third-party measurements into the profiles and pairs tables of a dataset folder.

``IMPORTERS`` is the one registry of formats; ``sharewise import FORMAT`` commands are generated from it and
the tests read it. Every importer is an ``Importer`` with one signature, ``run(ImportRequest) ->
ImportResult``, and declares its input files and flags, so adding a format is its module plus one line here.

Importers never reach into the profiler: a format that wants the device-independent features of the zoo
configuration a job ran (FLOPs, bytes, op mix) gets a ``StaticCounter`` in the request, supplied by the
caller (``sharewise.app.imports`` passes the profiler's counter).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sharewise.registry import Registry

IMPORTERS: Registry[Importer] = Registry(
    "import format",
    "sharewise.datasets.importers",
    {"csv": "generic_csv:IMPORTER", "gavel": "gavel:IMPORTER"},
    signature="Importer: run(ImportRequest) -> ImportResult",
)

#: ``counter(spec, batch_size) -> (features, batch size used)``: device-independent features of the zoo
#: configuration ``spec`` (``"lstm_lm[dim=200]"``); raises a ``SharewiseError`` when it cannot count.
StaticCounter = Callable[[str, "int | None"], "tuple[dict[str, float], int]"]


@dataclass(frozen=True)
class ImportInput:
    """One input file of a format: its name, help, and whether the CLI takes it as ``--name`` or positionally."""

    name: str
    help: str
    option: bool = False


@dataclass(frozen=True)
class ImportFlag:
    """An on/off switch of a format (``--name`` on the CLI, ``name`` in ``ImportRequest.flags``)."""

    name: str
    help: str


@dataclass(frozen=True)
class ImportRequest:
    """Everything one import needs: the input files by name, the dataset folder, flags set, a counter."""

    inputs: Mapping[str, Path]
    out: Path
    flags: frozenset[str] = frozenset()
    static_counter: StaticCounter | None = None


@dataclass(frozen=True)
class Importer:
    """A registered format: name, one-line summary, an example command line, inputs, flags, and ``run``."""

    name: str
    summary: str
    example: str
    inputs: tuple[ImportInput, ...]
    run: Callable[[ImportRequest], ImportResult]
    flags: tuple[ImportFlag, ...] = ()
    wants_static_features: bool = False


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


def get_importer(name: str) -> Importer:
    """Return the importer of format ``name``; an unknown name lists the known ones."""
    return IMPORTERS.get(name)


__all__ = [
    "IMPORTERS",
    "ImportFlag",
    "ImportInput",
    "ImportRequest",
    "ImportResult",
    "Importer",
    "StaticCounter",
    "get_importer",
]
