"""Small input tables a user hands a command: queue and cluster CSVs, and predictions (CSV or Parquet)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from sharewise.errors import DatasetError, SchemaError, TraceError


def read_table_csv(path: str | os.PathLike, what: str, required: tuple[str, ...]) -> pd.DataFrame:
    """Read a small CSV (queue or cluster) as text columns; ``TraceError`` names the file and the problem."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError:
        raise TraceError(f"{what} file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise TraceError(f"cannot read {what} file {str(path)!r}: {str(exc).splitlines()[0]}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceError(f"{path}: missing column(s) {missing}; a {what} file needs {list(required)}")
    return df


def read_predictions(path: str | os.PathLike) -> pd.DataFrame:
    """Read a predictions table (CSV or Parquet) with the columns of ``predict_pairs``."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"predictions file {str(path)!r} does not exist")
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except Exception as exc:  # any reader failure is a bad input file, reported as such
        raise SchemaError(f"cannot read predictions {str(path)!r}: {str(exc).splitlines()[0]}") from None
