"""Column schema of the profiles and pairs tables, checked at every boundary (write, read, import)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sharewise.errors import SchemaError

SCHEMA_VERSION = 1

# Required columns and their kinds: "str", "int", "float" (float may hold NaN only where noted).
PROFILE_COLUMNS: dict[str, str] = {
    "workload": "str",  # built-in name, a user model's recorded name, or a command's NAME
    "family": "str",  # model family: grouped cross-validation can hold a family out
    "batch_size": "int",  # samples per step
    "device_kind": "str",  # cpu or cuda
    "device_name": "str",  # the device as it names itself (GPU name; CPU model and cores)
    "mode": "str",  # sharing mode the row belongs to (cpu, cpu-partition, timeslice, mps)
    "host": "str",  # machine the row was measured on
    "torch_version": "str",  # PyTorch version of the measuring process
    "created_at": "str",  # UTC time of the measurement, ISO 8601
    "iter_time_ms": "float",  # mean step time alone, milliseconds
    "throughput": "float",  # steps per second alone
}
# Optional profile columns that, when present, must have this kind.
PROFILE_OPTIONAL: dict[str, str] = {
    "spec": "str",  # the workload spec as given (file:Class, module:Class, NAME=cmd:...)
    "size": "str",  # zoo size: tiny, small or full
    "samples_per_s": "float",  # throughput x batch size
    "iter_p50_ms": "float",  # step-time percentiles, milliseconds
    "iter_p95_ms": "float",
    "iter_p99_ms": "float",
    "cv": "float",  # spread (coefficient of variation) of the throughput over repeats
    "repeats": "int",  # measurement windows averaged
    "device_index": "int",  # index of the device on its host
    "pm_score": "float",  # throughput relative to the median device of the host (profile --all-devices)
    "profile_s": "float",  # seconds the profile took
    "probe_cv": "float",  # spread of f_probe_slowdown over its repeats (how far to trust it)
    "isolation": "str",  # warm: repeats in long-lived worker processes; fresh: each in new ones
    # The sharing knob the pair ran under (``profiler.knob``): job a's share of the device in percent (5-95; job b
    # had the rest), NaN where no knob limited either job (the default: both as the sharing mode gives them).
    "split_a": "float",
    "source": "str",  # where the row came from: sharewise, csv, gavel, observed
    # JSON object: GPUs -> isolated steps/s of the whole job on that many GPUs, e.g. '{"1": 4.4, "2": 7.9}'.
    "scale_throughputs": "str",
}

PAIR_COLUMNS: dict[str, str] = {
    "workload_a": "str",  # the two workloads of the pair (a self-pair names one twice)
    "workload_b": "str",
    "device_kind": "str",  # cpu or cuda
    "device_name": "str",  # the device as it names itself
    "mode": "str",  # sharing mode: cpu, cpu-partition, timeslice, mps
    "solo_a": "float",  # steps/s of each workload alone
    "solo_b": "float",
    "coloc_a": "float",  # steps/s of each workload next to the other, over the same window
    "coloc_b": "float",
    "slowdown_a": "float",  # solo / co-located throughput of a (1.0: no interference)
    "slowdown_b": "float",  # the same for b
    "trials": "int",  # measurement windows averaged
    "cv_a": "float",  # spread of each slowdown over the windows (NaN in imported data)
    "cv_b": "float",
    "status": "str",  # ok, failed, oom, timeout or skipped
    "error": "str",  # why a pair that is not ok failed
    "created_at": "str",  # UTC time of the measurement, ISO 8601
}
PAIR_OPTIONAL: dict[str, str] = {
    "batch_size_a": "int",  # batch sizes of the two workloads
    "batch_size_b": "int",
    "size": "str",  # zoo size: tiny, small or full
    "host": "str",  # machine the pair ran on
    "other_cpu_frac": "float",  # CPU time taken by other processes during the windows
    "window_s": "float",  # length of one measurement window, seconds
    "steps_a": "int",  # steps each workload made in the windows
    "steps_b": "int",
    "source": "str",  # where the row came from: sharewise, csv, gavel, observed
    # Half-width of the 95% confidence interval of slowdown_a (_b) over the repeats, as a fraction of it
    # (0.02: known to within 2%); NaN where unknown (one repeat, imported data).
    "ci_a": "float",
    "ci_b": "float",
    "isolation": "str",  # warm: repeats in long-lived worker processes; fresh: each in new ones
    # The sharing knob the pair ran under (``profiler.knob``): job a's share of the device in percent (5-95; job b
    # had the rest), NaN where no knob limited either job (the default: both as the sharing mode gives them).
    "split_a": "float",
    "pair_s": "float",  # seconds the pair run took, start-ups included
    # The half-width target the pair was measured against (0.05: each slowdown within 5%); NaN where none.
    "ci_target": "float",
    # Whether both half-widths met ``ci_target`` once the repeats (and extensions) ended: "met" or "missed";
    # "" where not judged (a failed run, imported rows, rows measured before sharewise recorded it).
    "precision": "str",
}
PAIR_STATUSES = ("ok", "failed", "oom", "timeout", "skipped")
PRECISIONS = ("met", "missed", "")
# Columns of a predictions table: what the predictor writes and the policies read (p* are slowdowns).
PREDICTION_COLUMNS = (
    "workload_a",
    "workload_b",
    "device_name",
    "p10_a",
    "p50_a",
    "p90_a",
    "p10_b",
    "p50_b",
    "p90_b",
)
# Numbers a pair row may leave NaN unless its status is "ok".
_PAIR_MEASURED = ("solo_a", "solo_b", "coloc_a", "coloc_b", "slowdown_a", "slowdown_b", "cv_a", "cv_b")
# Keys that identify one measurement: a rerun replaces the older row with the same key.
PAIR_KEY = ("workload_a", "workload_b", "device_name", "mode")
PROFILE_KEY = ("workload", "batch_size", "device_name", "mode")


def feature_columns(df: pd.DataFrame) -> list[str]:
    """Return the ``f_*`` feature columns of a profiles table, in table order."""
    return [c for c in df.columns if c.startswith("f_")]


def validate_profiles(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check a profiles table and return it with canonical dtypes.

    ``source`` names the file (or "in-memory table") in error messages. Features (``f_*``) must be numeric;
    NaN means "not measured" and is allowed, infinities are not.
    """
    df = _coerce(df, PROFILE_COLUMNS, PROFILE_OPTIONAL, source)
    for col in feature_columns(df):
        df[col] = _numeric(df[col], source, col)
        bad = np.isinf(df[col].to_numpy(dtype=float))
        if bad.any():
            raise SchemaError(
                f"{source}: column {col!r} holds an infinite value in row {int(np.argmax(bad))}; "
                "features must be finite numbers (NaN marks a missing one)"
            )
    if (df["batch_size"] < 1).any():
        raise SchemaError(f"{source}: column 'batch_size' must be >= 1")
    tp = df["throughput"].to_numpy(dtype=float)
    if (~np.isfinite(tp) | (tp <= 0)).any():
        row = int(np.argmax(~np.isfinite(tp) | (tp <= 0)))
        raise SchemaError(
            f"{source}: column 'throughput' must be a positive finite number, got {tp[row]!r} in row {row}"
        )
    return df


def validate_pairs(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check a pairs table and return it with canonical dtypes.

    Rows with status ``ok`` need positive finite throughputs and slowdowns; other rows may leave them NaN.
    """
    df = _coerce(df, PAIR_COLUMNS, PAIR_OPTIONAL, source)
    unknown = sorted(set(df["status"]) - set(PAIR_STATUSES))
    if unknown:
        raise SchemaError(f"{source}: column 'status' holds {unknown}; expected one of {list(PAIR_STATUSES)}")
    if "precision" in df.columns:
        unknown = sorted(set(df["precision"]) - set(PRECISIONS))
        if unknown:
            raise SchemaError(
                f"{source}: column 'precision' holds {unknown}; expected 'met', 'missed' or '' (not judged)"
            )
    ok = (df["status"] == "ok").to_numpy()
    for col in _PAIR_MEASURED:
        values = df[col].to_numpy(dtype=float)
        if col.startswith("cv"):  # NaN: imported data without a spread over repeats
            bad = ok & (np.isinf(values) | (values < 0))
        else:
            bad = ok & (~np.isfinite(values) | (values <= 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise SchemaError(
                f"{source}: column {col!r} must be a positive finite number in rows with status 'ok', "
                f"got {values[row]!r} in row {row}"
            )
    if "split_a" in df.columns:
        split = df["split_a"].to_numpy(dtype=float)
        bad = np.isfinite(split) & ((split < 5) | (split > 95))
        if bad.any():
            raise SchemaError(
                f"{source}: column 'split_a' is job a's share of the device in percent, 5 to 95 (NaN: no knob), got "
                f"{split[int(np.argmax(bad))]!r} in row {int(np.argmax(bad))}"
            )
    return df


def _coerce(
    df: pd.DataFrame, required: dict[str, str], optional: dict[str, str], source: str
) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{source}: expected a table, got {type(df).__name__}")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SchemaError(
            f"{source}: missing column(s) {missing}; a table of this kind needs {list(required)}"
        )
    df = df.copy()
    kinds = {**required, **{c: k for c, k in optional.items() if c in df.columns}}
    for col, kind in kinds.items():
        if kind == "str":
            df[col] = _strings(df[col], source, col)
        elif kind == "int":
            values = _numeric(df[col], source, col)
            if col in optional:
                # Files written before an optional count existed (or imported ones) leave it empty when a
                # folder's files are read together: 0 is its "not recorded", as in rows that failed.
                values = values.fillna(0.0)
            if values.isna().any() or not np.all(np.mod(values.to_numpy(dtype=float), 1) == 0):
                raise SchemaError(f"{source}: column {col!r} must hold whole numbers")
            df[col] = values.astype("int64")
        else:
            df[col] = _numeric(df[col], source, col)
    return df.reset_index(drop=True)


def _strings(series: pd.Series, source: str, col: str) -> pd.Series:
    values = series.tolist()
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            values[i] = ""
        elif not isinstance(v, str):
            raise SchemaError(
                f"{source}: column {col!r} must hold text, got {type(v).__name__} {v!r} in row {i}"
            )
    return pd.Series(values, index=series.index, dtype=object)


def _numeric(series: pd.Series, source: str, col: str) -> pd.Series:
    if pd.api.types.is_bool_dtype(series):
        raise SchemaError(f"{source}: column {col!r} must be numeric, got booleans")
    if pd.api.types.is_numeric_dtype(series):
        return series.astype("float64")
    converted = pd.to_numeric(series, errors="coerce")
    bad = converted.isna() & series.notna() & (series.astype(str).str.strip() != "")
    if bad.any():
        row = int(np.argmax(bad.to_numpy()))
        raise SchemaError(f"{source}: column {col!r} must be numeric, got {series.iloc[row]!r} in row {row}")
    return converted.astype("float64")
