"""Import the generic CSV format: one file of solo profiles, one of pair slowdowns, from any source.

Profiles CSV: a ``workload`` column; optional ``family`` (default: the workload name), ``device_name``
(default ``unknown``), ``mode``, ``device_kind``, ``batch_size``, ``throughput`` (steps/s) or
``iter_time_ms``, and any other schema column of the profiles table; **every other column is a numeric
feature**, stored as ``f_<name>`` (a name that already starts with ``f_`` is kept).

Pairs CSV: ``workload_a, workload_b, slowdown_a, slowdown_b``; optional ``device_name`` (needed when the
profiles cover several devices), ``mode``, ``status`` (default ``ok``), ``trials``. Other columns are ignored
with a warning.

An empty cell is a missing value. A literal ``nan``, ``inf`` or any other text in a numeric column is bad
input, as are a pair naming a workload without a profile and a non-positive slowdown: each fails with one
``SchemaError`` naming the file, the row (1-based, after the header) and the column.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets.importers import Importer, ImportInput, ImportRequest, ImportResult
from sharewise.datasets.schema import PAIR_STATUSES, PROFILE_COLUMNS, PROFILE_OPTIONAL
from sharewise.datasets.store import Dataset, utc_now
from sharewise.errors import DatasetError, SchemaError

UNKNOWN = "unknown"
_PROFILE_TEXT = {c for c, k in {**PROFILE_COLUMNS, **PROFILE_OPTIONAL}.items() if k == "str"}
_PROFILE_NUMBERS = {c for c, k in {**PROFILE_COLUMNS, **PROFILE_OPTIONAL}.items() if k != "str"}
_PAIR_REQUIRED = ("workload_a", "workload_b", "slowdown_a", "slowdown_b")
_PAIR_TEXT = ("device_name", "mode", "status", "error")
_PAIR_NUMBERS = ("trials",)


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a CSV with every cell as text; an empty cell becomes NaN, nothing else does."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"CSV file {str(path)!r} not found")
    try:
        # keep_default_na=False: pandas would otherwise turn "nan", "NA", "null" into missing values, and a
        # literal "nan" in someone's data is a bug to report, not a gap to fill.
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: not a readable CSV file ({str(exc).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _where(path: Path, row: int, col: str) -> str:
    return f"{path}, row {row + 1} (line {row + 2}), column {col!r}"


def numeric_column(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    """Convert a text column to floats; NaN where empty. Raise ``SchemaError`` naming the first bad cell."""
    text = df[col]
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    present = text.notna().to_numpy()
    bad = present & ~np.isfinite(values)
    if bad.any():
        row = int(np.argmax(bad))
        cell = text.iloc[row]
        if cell.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            why = f"got the literal {cell!r}; leave the cell empty for a missing value"
        else:
            why = f"expected a number, got {cell!r}"
        raise SchemaError(f"{_where(path, row, col)}: {why}")
    return values


def _text_column(df: pd.DataFrame, col: str, default: str) -> np.ndarray:
    if col not in df.columns:
        return np.full(len(df), default, dtype=object)
    return df[col].fillna(default).str.strip().replace("", default).to_numpy(dtype=object)


def _read_profiles(path: Path, created: str, warnings: list[str]) -> pd.DataFrame:
    df = read_table(path)
    if "workload" not in df.columns:
        raise SchemaError(
            f"{path}: no 'workload' column; the profiles CSV needs one (columns: {list(df.columns)})"
        )
    workload = df["workload"].fillna("").str.strip()
    if (workload == "").any():
        raise SchemaError(
            f"{_where(path, int(np.argmax((workload == '').to_numpy())), 'workload')}: empty name"
        )
    out = {"workload": workload.to_numpy(dtype=object)}
    out["family"] = np.where(
        _text_column(df, "family", "") == "", out["workload"], _text_column(df, "family", "")
    ).astype(object)
    for col in ("device_name", "device_kind", "mode"):
        out[col] = _text_column(df, col, UNKNOWN)
    for col in ("host", "torch_version"):
        out[col] = _text_column(df, col, "")
    out["created_at"] = _text_column(df, "created_at", created)
    for col in sorted(_PROFILE_TEXT - set(out)):
        if col in df.columns:
            out[col] = _text_column(df, col, "")
    numbers = {c: numeric_column(df, c, path) for c in df.columns if c in _PROFILE_NUMBERS}
    features = {}
    for col in df.columns:
        if col in out or col in numbers or col in _PROFILE_TEXT:
            continue
        name = col if col.startswith("f_") else f"f_{col}"
        if name in features:
            raise SchemaError(
                f"{path}: columns {col!r} and {name!r} would both be feature {name!r}; rename one"
            )
        features[name] = numeric_column(df, col, path)
    throughput = numbers.pop("throughput", None)
    iter_ms = numbers.pop("iter_time_ms", None)
    if throughput is None and iter_ms is not None:
        throughput = 1000.0 / iter_ms
    if iter_ms is None and throughput is not None:
        iter_ms = 1000.0 / throughput
    if throughput is None:
        # The profiles table needs a throughput; the predictor reads iter_time_ms, left missing here.
        warnings.append(f"{path}: no throughput or iter_time_ms column; throughput recorded as 1.0 (unknown)")
        throughput, iter_ms = np.ones(len(df)), np.full(len(df), np.nan)
    for col, values in (("throughput", throughput), ("iter_time_ms", iter_ms)):
        bad = ~(values > 0) & (col == "throughput" or ~np.isnan(values))
        if bad.any():
            row = int(np.argmax(bad))
            raise SchemaError(f"{_where(path, row, col)}: must be a positive number, got {values[row]!r}")
    batch = numbers.pop("batch_size", None)
    if batch is None:
        batch = features.get("f_batch_size", np.full(len(df), np.nan))
        batch = np.where(np.isnan(batch), 1.0, batch)
    bad = ~((batch >= 1) & (np.mod(batch, 1) == 0))
    if bad.any():
        row = int(np.argmax(bad))
        raise SchemaError(
            f"{_where(path, row, 'batch_size')}: must be a whole number >= 1, got {batch[row]!r}"
        )
    out.update(batch_size=batch.astype(np.int64), throughput=throughput, iter_time_ms=iter_ms)
    for col, values in numbers.items():
        if PROFILE_OPTIONAL.get(col) == "int" and np.isnan(values).any():
            row = int(np.argmax(np.isnan(values)))
            raise SchemaError(f"{_where(path, row, col)}: must be a whole number, got an empty cell")
        out[col] = values
    profiles = pd.DataFrame({**out, **features})
    profiles["source"] = profiles["source"] if "source" in profiles else "csv"
    key = profiles[["workload", "device_name", "mode", "batch_size"]].astype(str).agg("|".join, axis=1)
    dup = key.duplicated(keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)[:2]
        raise SchemaError(
            f"{path}: rows {rows[0] + 1} and {rows[1] + 1} both profile workload "
            f"{profiles['workload'][rows[0]]!r} on device {profiles['device_name'][rows[0]]!r}; keep one"
        )
    return profiles


def _read_pairs(path: Path, profiles: pd.DataFrame, profiles_path: Path, created: str, warnings: list[str]):
    df = read_table(path)
    missing = [c for c in _PAIR_REQUIRED if c not in df.columns]
    if missing:
        raise SchemaError(f"{path}: missing column(s) {missing}; the pairs CSV needs {list(_PAIR_REQUIRED)}")
    ignored = [c for c in df.columns if c not in (*_PAIR_REQUIRED, *_PAIR_TEXT, *_PAIR_NUMBERS)]
    if ignored:
        warnings.append(f"{path}: ignored column(s) {ignored}")
    wa = _text_column(df, "workload_a", "")
    wb = _text_column(df, "workload_b", "")
    devices = sorted(set(profiles["device_name"]))
    if "device_name" in df.columns:
        dev = _text_column(df, "device_name", UNKNOWN)
    elif len(devices) == 1:
        dev = np.full(len(df), devices[0], dtype=object)
    else:
        raise SchemaError(
            f"{path}: no 'device_name' column, but {profiles_path} profiles {len(devices)} devices "
            f"{devices}; add a device_name column to the pairs"
        )
    status = _text_column(df, "status", "ok")
    unknown = sorted(set(status) - set(PAIR_STATUSES))
    if unknown:
        row = int(np.argmax(~np.isin(status, list(PAIR_STATUSES))))
        raise SchemaError(
            f"{_where(path, row, 'status')}: got {status[row]!r}; expected one of {list(PAIR_STATUSES)}"
        )
    ok = status == "ok"
    lookup = profiles.drop_duplicates(["workload", "device_name"], keep="last").set_index(
        ["workload", "device_name"]
    )
    solo = {}
    for side, names in (("a", wa), ("b", wb)):
        col = f"workload_{side}"
        empty = names == ""
        if empty.any():
            raise SchemaError(f"{_where(path, int(np.argmax(empty)), col)}: empty workload name")
        idx = lookup.index.get_indexer(pd.MultiIndex.from_arrays([names, dev]))
        if (idx < 0).any():
            row = int(np.argmax(idx < 0))
            raise SchemaError(
                f"{_where(path, row, col)}: no profile of workload {names[row]!r} on device {dev[row]!r} in "
                f"{profiles_path}; add a row for it there"
            )
        solo[side] = lookup["throughput"].to_numpy()[idx]
        solo[f"kind_{side}"] = lookup["device_kind"].to_numpy()[idx]
        solo[f"mode_{side}"] = lookup["mode"].to_numpy()[idx]
    slow = {}
    for side in ("a", "b"):
        col = f"slowdown_{side}"
        values = numeric_column(df, col, path)
        bad = ok & ~(values > 0)
        if bad.any():
            row = int(np.argmax(bad))
            got = "an empty cell" if np.isnan(values[row]) else repr(values[row])
            raise SchemaError(f"{_where(path, row, col)}: slowdown must be a positive number, got {got}")
        slow[side] = np.where(ok, values, np.nan)
    trials = numeric_column(df, "trials", path) if "trials" in df.columns else np.ones(len(df))
    pairs = pd.DataFrame(
        {
            "workload_a": wa,
            "workload_b": wb,
            "device_kind": solo["kind_a"],
            "device_name": dev,
            "mode": _text_column(df, "mode", "") if "mode" in df.columns else solo["mode_a"],
            "solo_a": solo["a"],
            "solo_b": solo["b"],
            "coloc_a": solo["a"] / slow["a"],
            "coloc_b": solo["b"] / slow["b"],
            "slowdown_a": slow["a"],
            "slowdown_b": slow["b"],
            "trials": np.where(np.isnan(trials), 1, trials).astype(np.int64),
            # No spread is given; the schema needs a finite cv on ok rows.
            "cv_a": np.where(ok, 0.0, np.nan),
            "cv_b": np.where(ok, 0.0, np.nan),
            "status": status,
            "error": _text_column(df, "error", ""),
            "created_at": created,
            "source": "csv",
            # No interval is given, so no precision to judge (``schema.PAIR_OPTIONAL``).
            "precision": "",
        }
    )
    pairs.loc[pairs["mode"] == "", "mode"] = UNKNOWN
    return pairs


def import_csv(profiles: str | os.PathLike, pairs: str | os.PathLike, out: str | os.PathLike) -> ImportResult:
    """Import a profiles CSV and a pairs CSV into dataset folder ``out``.

    Parameters
    ----------
    profiles, pairs : path
        The two CSV files (format in the module docstring).
    out : path
        Dataset folder to write.

    Returns
    -------
    ImportResult
        Counts, devices, workloads and warnings.

    Raises
    ------
    SchemaError
        Bad input; the message names the file, the row and the column, e.g. ``"pairs.csv, row 3
        (line 4), column 'slowdown_b': slowdown must be a positive number, got -1.0"``.
    """
    profiles_path, pairs_path = Path(profiles), Path(pairs)
    created = utc_now()
    warnings: list[str] = []
    prof = _read_profiles(profiles_path, created, warnings)
    if prof.empty:
        raise SchemaError(f"{profiles_path}: no profile rows")
    prs = _read_pairs(pairs_path, prof, profiles_path, created, warnings)
    ds = Dataset(out)
    with ds.lock("csv import"):
        files = [ds.write_profiles(prof)]
        if len(prs):
            files.append(ds.write_pairs(prs))
    counts = prs["status"].value_counts().to_dict()
    return ImportResult(
        out=ds.path,
        profiles=len(prof),
        pairs=len(prs),
        pairs_ok=int(counts.get("ok", 0)),
        status_counts={str(k): int(v) for k, v in counts.items()},
        devices=sorted(set(prof["device_name"])),
        workloads=sorted(set(prof["workload"])),
        files=files,
        warnings=warnings,
    )


__all__ = ["import_csv", "numeric_column", "read_table"]


def _run(request: ImportRequest) -> ImportResult:
    return import_csv(request.inputs["profiles"], request.inputs["pairs"], request.out)


IMPORTER = Importer(
    name="csv",
    summary="Import anyone's measurements from two CSV files (generic format).",
    example="sharewise import csv --profiles profiles.csv --pairs pairs.csv --out my-ds",
    inputs=(
        ImportInput("profiles", "CSV: workload, optional family and device_name, numeric features.", option=True),
        ImportInput("pairs", "CSV: workload_a, workload_b, slowdown_a, slowdown_b, ...", option=True),
    ),
    run=_run,
)
