"""Parquet dataset folders: atomic writes, validated reads, a campaign lock and the shipped reference."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sharewise.datasets.schema import (
    PAIR_KEY,
    PROFILE_KEY,
    SCHEMA_VERSION,
    validate_pairs,
    validate_profiles,
)
from sharewise.errors import DatasetError, DatasetLockedError, SchemaError

REFERENCE_NAME = "reference"
#: Datasets shipped inside the package, usable by name wherever a dataset folder is: ``reference`` (8 workloads,
#: all 36 pairs, a 2-core CPU) and ``reference-h200`` (8 full-size workloads on an NVIDIA H200; see its meta.json).
SHIPPED_DATASETS = (REFERENCE_NAME, "reference-h200")
_TMP_PREFIX = ".tmp-"
_LOCK_NAME = ".sharewise.lock"
_META_NAME = "meta.json"


def utc_now() -> str:
    """Return the current UTC time as an ISO-8601 string (the ``created_at`` format)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def write_json_atomic(path: str | os.PathLike, data, *, indent: int = 1, sort_keys: bool = False) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file beside it, then a rename), so a reader or
    a stop never sees half a file; numpy scalars are numbers, anything else unknown is its string."""
    path = Path(path)
    tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}.json")
    tmp.write_text(json.dumps(data, indent=indent, sort_keys=sort_keys, default=_json_value))
    os.replace(tmp, path)


def _json_value(value):
    item = getattr(value, "item", None)  # a numpy scalar
    return item() if callable(item) else str(value)


def reference_path(name: str = REFERENCE_NAME) -> Path:
    """Return the folder of a dataset shipped inside the package (``SHIPPED_DATASETS``)."""
    if name not in SHIPPED_DATASETS:
        raise DatasetError(f"no shipped dataset {name!r}; sharewise ships {list(SHIPPED_DATASETS)}")
    return Path(__file__).resolve().parent / name


def resolve_dataset_path(path: str | os.PathLike) -> Path:
    """Map the name of a shipped dataset (``reference``, ``reference-h200``) to its folder, unless a folder of
    that name exists where sharewise runs; any other value is a folder path."""
    if str(path) in SHIPPED_DATASETS and not Path(path).exists():
        return reference_path(str(path))
    return Path(path)


class Dataset:
    """A dataset folder holding ``profiles/`` and ``pairs/`` Parquet files, one file per measurement batch.

    Writes go to a temporary file in the same folder and are renamed into place, so a reader never sees a
    partial file and a crash leaves at most a ``.tmp-*`` file that reads ignore.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = resolve_dataset_path(path)

    def __repr__(self) -> str:
        return f"Dataset({str(self.path)!r})"

    @property
    def profiles_dir(self) -> Path:
        return self.path / "profiles"

    @property
    def pairs_dir(self) -> Path:
        return self.path / "pairs"

    def exists(self) -> bool:
        return self.profiles_dir.is_dir() or self.pairs_dir.is_dir()

    # ---- writing -------------------------------------------------------------------------------------
    def write_profiles(self, df: pd.DataFrame) -> Path:
        """Validate and atomically write one batch of profile rows; return the new file."""
        df = validate_profiles(df, source="profiles to write")
        return _atomic_parquet(df, self.profiles_dir, "profiles")

    def write_pairs(self, df: pd.DataFrame) -> Path:
        """Validate and atomically write one batch of pair rows; return the new file."""
        df = validate_pairs(df, source="pairs to write")
        return _atomic_parquet(df, self.pairs_dir, "pairs")

    def write_meta(self, meta: dict) -> None:
        """Write ``meta.json`` (machine description, campaign settings) atomically."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / _META_NAME, {"schema_version": SCHEMA_VERSION, **meta}, sort_keys=True)

    # ---- reading -------------------------------------------------------------------------------------
    def read_meta(self) -> dict:
        meta = self.path / _META_NAME
        if not meta.is_file():
            return {}
        try:
            return json.loads(meta.read_text())
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{meta}: not valid JSON ({exc}); delete or repair the file") from None

    def read_profiles(self, latest: bool = True) -> pd.DataFrame:
        """Return all profile rows (validated); with ``latest`` only the newest row per profile key."""
        df = _read_folder(self.profiles_dir, validate_profiles)
        if df is None:
            return validate_profiles(pd.DataFrame(columns=list(_profile_columns())), "empty profiles")
        keys = list(PROFILE_KEY) + [c for c in ("device_index",) if c in df.columns]
        return _latest(df, keys) if latest else df

    def read_pairs(self, latest: bool = True) -> pd.DataFrame:
        """Return all pair rows (validated); with ``latest`` only the newest row per pair key."""
        df = _read_folder(self.pairs_dir, validate_pairs)
        if df is None:
            return validate_pairs(pd.DataFrame(columns=list(_pair_columns())), "empty pairs")
        # A pair measured at several splits is several measurements (a row without a knob has split_a NaN).
        keys = list(PAIR_KEY) + [c for c in ("batch_size_a", "batch_size_b", "split_a") if c in df.columns]
        return _latest(df, keys) if latest else df

    def require(self, profiles: bool = True, pairs: bool = False) -> None:
        """Raise ``DatasetError`` unless the folder exists and holds the tables asked for."""
        if not self.path.is_dir():
            raise DatasetError(
                f"dataset folder {str(self.path)!r} does not exist; create one with "
                "'sharewise profile ... --out DIR' or 'sharewise import ...', or use 'reference'"
            )
        if profiles and not _data_files(self.profiles_dir):
            raise DatasetError(
                f"dataset {str(self.path)!r} holds no profiles; run 'sharewise profile WORKLOAD --out "
                f"{self.path}' first"
            )
        if pairs and not _data_files(self.pairs_dir):
            raise DatasetError(
                f"dataset {str(self.path)!r} holds no pair measurements; run 'sharewise pairs ... --out "
                f"{self.path}' first"
            )

    # ---- campaign lock ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, what: str = "campaign") -> Iterator[None]:
        """Hold an exclusive lock on the folder for one writer; a second writer gets ``DatasetLockedError``.

        The lock is an ``flock`` on a file, so it is released by the kernel when its holder dies, even by
        SIGKILL: a stale lock file never blocks a rerun.
        """
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        lock_path = self.path / _LOCK_NAME
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = lock_path.read_text().strip() or "another process"
                raise DatasetLockedError(
                    f"dataset {str(self.path)!r} is locked ({_LOCK_NAME}) by {holder}; wait for that {what} "
                    "to finish or write to another --out folder"
                ) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{what} pid {os.getpid()} on {socket.gethostname()} since {utc_now()}".encode())
            self.remove_stale_temp_files()
            try:
                yield
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def remove_stale_temp_files(self) -> list[Path]:
        """Delete ``.tmp-*`` leftovers of a writer that died mid-write (call only while holding the lock)."""
        removed = []
        for folder in (self.path, self.profiles_dir, self.pairs_dir):
            if folder.is_dir():
                for tmp in folder.glob(f"{_TMP_PREFIX}*"):
                    tmp.unlink(missing_ok=True)
                    removed.append(tmp)
        return removed


def open_dataset(path: str | os.PathLike, profiles: bool = True, pairs: bool = False) -> Dataset:
    """Return the dataset at ``path`` (or ``reference``), checking it holds the tables asked for."""
    ds = Dataset(path)
    ds.require(profiles=profiles, pairs=pairs)
    return ds


def read_datasets(
    paths: Sequence[str | os.PathLike], pairs: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and concatenate several datasets; return ``(profiles, pairs)``.

    With several folders, one may hold only pairs (the observed pairs of a physical run, ``RUNDIR/observed``):
    they join the profiles of the others. A single folder must hold what is asked for itself.
    """
    if not paths:
        raise DatasetError("no dataset folder given; name at least one folder or 'reference'")
    if len(paths) == 1:
        open_dataset(paths[0], profiles=True, pairs=pairs)
    datasets = [open_dataset(p, profiles=False) for p in paths]
    if not any(_data_files(ds.profiles_dir) for ds in datasets):
        datasets[0].require(profiles=True)
    if pairs and not any(_data_files(ds.pairs_dir) for ds in datasets):
        datasets[0].require(profiles=False, pairs=True)
    profiles = [ds.read_profiles() for ds in datasets]
    pair_tables = [ds.read_pairs() for ds in datasets]
    return (
        pd.concat(profiles, ignore_index=True),
        pd.concat(pair_tables, ignore_index=True),
    )


def _profile_columns():
    from sharewise.datasets.schema import PROFILE_COLUMNS

    return PROFILE_COLUMNS


def _pair_columns():
    from sharewise.datasets.schema import PAIR_COLUMNS

    return PAIR_COLUMNS


def _data_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))


def _read_folder(folder: Path, validate) -> pd.DataFrame | None:
    """Read every Parquet file of ``folder`` into one validated frame with a ``_file`` column, or None.

    The files are concatenated as Arrow tables and validated once (a campaign folder holds one file per
    pair: validating each alone cost most of ``sharewise show``). Only when that fails are the files
    validated one by one, so the error still names the file at fault.
    """
    paths = _data_files(folder)
    if not paths:
        return None
    tables = []
    for path in paths:
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise SchemaError(
                f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]}); "
                "move it out of the dataset folder or re-measure it"
            ) from None
        tables.append(table.append_column("_file", pa.array([path.name] * table.num_rows, pa.string())))
    try:
        combined = pa.concat_tables(tables, promote_options="permissive").to_pandas()
        return validate(combined, source=str(folder))
    except (SchemaError, pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    frames = []
    for path, table in zip(paths, tables, strict=True):
        frame = validate(table.to_pandas(), source=str(path))  # raises, naming the file at fault
        frames.append(frame)
    return validate(pd.concat(frames, ignore_index=True), source=str(folder))


def _latest(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    # Files are named by creation time, so file order then row order is write order: keep the last.
    df = df.drop_duplicates(subset=list(keys), keep="last")
    return df.drop(columns=["_file"]).reset_index(drop=True)


def _atomic_parquet(df: pd.DataFrame, folder: Path, stem: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    final = folder / f"{stem}-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f"{_TMP_PREFIX}{uuid.uuid4().hex}.parquet"
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"sharewise_schema_version": str(SCHEMA_VERSION).encode()}
    )
    with open(tmp, "wb") as fh:
        pq.write_table(table, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final
