"""One row of the pairs table as a measurement writes it (``pair_row``): every column a measured pair holds, in one
order, with what was not measured left missing; the pair campaigns, ``collect`` and ``sharewise run`` all write
theirs through it."""

from __future__ import annotations

import math
import socket

from sharewise.datasets.schema import PAIR_COLUMNS, PAIR_OPTIONAL
from sharewise.datasets.store import utc_now

#: ``source`` of a row observed while jobs ran (``collect`` on a cluster's metrics, ``sharewise run`` on its jobs),
#: and the folder a physical run writes those rows to.
OBSERVED = "observed"

#: What a measurement leaves missing when it did not measure it: numbers NaN, counts 0 (``batch_size_*`` 0: the
#: workload's own batch size).
_MISSING = {"int": 0, "float": math.nan}
#: The measured columns of a row, in the order a row holds them (after the pair, the device and the mode).
_MEASURED = ("solo_a", "solo_b", "coloc_a", "coloc_b", "slowdown_a", "slowdown_b", "trials", "cv_a", "cv_b",
             "ci_a", "ci_b")
_AFTER = ("other_cpu_frac", "window_s", "steps_a", "steps_b", "batch_size_a", "batch_size_b", "pair_s")


def pair_row(workload_a: str, workload_b: str, *, device_kind: str, device_name: str, mode: str, size: str,
             isolation: str, status: str = "ok", error: str = "", host: str | None = None, batch_size: int = 0,
             **values) -> dict:
    """Return a pairs-table row of ``workload_a`` next to ``workload_b``.

    ``values`` are the columns measured (``solo_a`` ... ``ci_b``, ``window_s``, ``steps_*``, ``other_cpu_frac``,
    ``pair_s``, ``source``, and any other column of the pairs schema); the ones not given are missing (NaN, or
    0 for counts). ``host`` defaults to this machine, ``batch_size`` (both jobs'; 0: each workload's own) to 0;
    ``created_at`` is now. A name outside the schema raises ``ValueError``.

    Example: ``pair_row("bert", "ncf", device_kind="cpu", device_name="AMD EPYC (2 cores)", mode="cpu",
    size="small", isolation="run:sharewise", slowdown_a=1.31, slowdown_b=1.12, trials=4, source="observed")`` is
    ``{"workload_a": "bert", "workload_b": "ncf", "device_kind": "cpu", ..., "slowdown_a": 1.31, ..., "trials": 4,
    ..., "status": "ok", "error": "", "created_at": "2026-12-08T10:00:00Z", "host": "vm1", ..., "pair_s": nan,
    "source": "observed"}``.
    """
    unknown = sorted(set(values) - set(PAIR_COLUMNS) - set(PAIR_OPTIONAL))
    if unknown:
        raise ValueError(f"pair_row got {unknown}, which are no columns of the pairs table; expected some of "
                         f"{sorted(set(PAIR_COLUMNS) | set(PAIR_OPTIONAL))}")
    kind = {**PAIR_COLUMNS, **PAIR_OPTIONAL}
    row = {"workload_a": workload_a, "workload_b": workload_b, "device_kind": device_kind, "device_name": device_name,
           "mode": mode, "size": size, "isolation": isolation}
    row.update({c: _MISSING[kind[c]] for c in _MEASURED})
    row.update(status=status, error=error, created_at=utc_now(), host=host or socket.gethostname())
    row.update({c: _MISSING[kind[c]] for c in _AFTER})
    row.update(batch_size_a=batch_size, batch_size_b=batch_size)
    row.update(values)
    return row
