"""Datasets: the profiles/pairs schema, the Parquet store, the shipped reference dataset and importers."""

from sharewise.datasets.schema import (
    PAIR_COLUMNS,
    PAIR_STATUSES,
    PROFILE_COLUMNS,
    validate_pairs,
    validate_profiles,
)
from sharewise.datasets.store import Dataset, open_dataset, read_datasets, resolve_dataset_path

__all__ = [
    "PAIR_COLUMNS",
    "PAIR_STATUSES",
    "PROFILE_COLUMNS",
    "Dataset",
    "open_dataset",
    "read_datasets",
    "resolve_dataset_path",
    "validate_pairs",
    "validate_profiles",
]
