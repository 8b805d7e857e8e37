"""Datasets: the profiles/pairs schema, the Parquet store, the shipped reference dataset and importers.

Importing this package imports nothing heavy: each public name loads its module on first use (PEP 562), so
the CLI reads the registries of ``datasets.traces`` and ``datasets.importers`` without pandas or pyarrow.
"""

from __future__ import annotations

from sharewise.lazy import lazy_exports

# Public name -> the module that defines it (one table: ``__all__``, ``__dir__`` and ``__getattr__`` read it).
_EXPORTS = {
    "PAIR_COLUMNS": "schema",
    "PAIR_STATUSES": "schema",
    "PROFILE_COLUMNS": "schema",
    "Dataset": "store",
    "open_dataset": "store",
    "read_datasets": "store",
    "resolve_dataset_path": "store",
    "validate_pairs": "schema",
    "validate_profiles": "schema",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
