"""Writing measured rows into a dataset folder, with one clear error when the disk is full."""

from __future__ import annotations

import errno

import pandas as pd

from sharewise.datasets.store import Dataset
from sharewise.errors import DatasetError

#: errno values that mean "no room to write": a full file system, a quota, a file-size limit.
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def write_rows(dataset: Dataset, table: str, rows: list[dict]) -> None:
    """Write ``rows`` as one batch of the ``table`` (``"profiles"`` or ``"pairs"``) of ``dataset``.

    The store writes a temporary file and renames it into place, so a write that fails leaves at most the
    temporary file; it is removed here, and a full disk (or quota) becomes a ``DatasetError`` that says what
    is kept and how to go on. Call it while holding the dataset's lock (a campaign or a profile run does).
    """
    write = dataset.write_profiles if table == "profiles" else dataset.write_pairs
    try:
        write(pd.DataFrame(rows))
    except OSError as exc:
        dataset.remove_stale_temp_files()
        if exc.errno not in _NO_ROOM:
            raise
        raise DatasetError(
            f"cannot write {table} to {dataset.path}: {exc.strerror or exc} ({len(rows)} row(s) not saved; "
            "every row written before is kept whole); free some space, then rerun the same command to resume"
        ) from None
