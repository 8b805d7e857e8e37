"""Validation helpers the trace readers share: CSV reading and typed columns, with the line in every error."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import TraceError


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {str(path)!r}: {exc}") from None


def read_csv(path: Path, required: Sequence[str]) -> pd.DataFrame:
    """Read a trace CSV as text columns; ``TraceError`` for a missing file, bad CSV or missing columns."""
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError:
        raise TraceError(f"trace file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise TraceError(f"cannot read trace {str(path)!r} as CSV: {str(exc).splitlines()[0]}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceError(
            f"{path}: missing column(s) {missing}; expected a header with {list(required)}, got "
            f"{list(df.columns)}"
        )
    if df.empty:
        raise TraceError(f"{path}: the trace holds no jobs")
    return df


def numeric_column(df: pd.DataFrame, col: str, path: Path, positive: bool) -> np.ndarray:
    text = df[col].astype(str).str.strip()
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | ((values <= 0) if positive else (values < 0))
    if bad.any():
        row = int(np.argmax(bad))
        need = "a positive number" if positive else "a number >= 0"
        raise TraceError(f"{path}:{row + 2}: column {col!r} must be {need}, got {text.iloc[row]!r}")
    return values


def whole_column(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    values = numeric_column(df, col, path, positive=True)
    bad = values != np.floor(values)
    if bad.any():
        row = int(np.argmax(bad))
        raise TraceError(
            f"{path}:{row + 2}: column {col!r} must be a whole number >= 1, got {df[col].iloc[row]!r}"
        )
    return values.astype(np.int64)


def number(text: str, where: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {name} must be a number, got {text.strip()!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {name} must be finite, got {text.strip()!r}")
    return value


def check_time(t: float, last: float, where: str, name: str) -> None:
    if t < 0:
        raise TraceError(f"{where}: {name} must be >= 0, got {t:g}")
    if t < last:
        raise TraceError(
            f"{where}: {name} {t:g} is earlier than the previous job's {last:g}; sort the trace by arrival"
        )
