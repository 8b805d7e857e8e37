"""``sharewise import FORMAT``: bring other people's measurements in as a dataset folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sharewise.datasets.importers import ImportRequest, ImportResult, get_importer


def import_data(
    format: str, inputs: Mapping[str, Path], out: Path, flags: frozenset[str] = frozenset()
) -> ImportResult:
    """Run importer ``format`` on its input files into dataset folder ``out``.

    A format that counts device-independent features (``Importer.wants_static_features``) gets the
    profiler's static counter, which builds the zoo configuration on the ``meta`` device and caches what
    it counted in the feature cache.
    """
    importer = get_importer(format)
    counter = None
    if importer.wants_static_features:
        from sharewise.profiler.static import count_static

        counter = count_static
    request = ImportRequest(inputs=dict(inputs), out=Path(out), flags=frozenset(flags), static_counter=counter)
    return importer.run(request)
