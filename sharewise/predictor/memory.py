"""A job's memory footprint from its solo profile, and whether two jobs fit in one device's memory together.

One rule serves the predictor's memory features (``pair_sum_mem_bytes``, ``pair_mem_fit``) and the memory
check of ``recommend`` (``memory_fit``), so a pair the model treats as fitting is the pair the plan allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

#: Measured footprints, in the order the rule prefers them: what the caching allocator holds (reserved,
#: which is what has to fit next to another process), what live tensors used (allocated), then the growth
#: of the process's resident memory (CPU runs, where no allocator reports).
MEMORY_COLUMNS = ("f_mem_peak_reserved_bytes", "f_mem_peak_allocated_bytes", "f_mem_rss_growth_bytes")
#: Static counts that give an estimate when nothing is measured: parameters, gradients and two Adam
#: moments (4 x parameter bytes) plus activations.
STATIC_MEMORY = ("f_param_bytes", "f_activation_bytes")
#: Memory of the device a profile ran on.
DEVICE_MEMORY = "f_device_mem_bytes"


def first_present(values: np.ndarray, cols: Mapping[str, int], names: Sequence[str]) -> np.ndarray:
    """Return, per row of ``values``, the first non-missing value among columns ``names`` (NaN if none).

    ``cols`` maps a column name to its position in ``values``; names it lacks are skipped. Example: with
    ``names = ("a", "b")``, rows ``[[nan, 2.0], [1.0, 3.0]]`` give ``array([2.0, 1.0])``.
    """
    out = np.full(values.shape[0], np.nan)
    for name in names:
        if name in cols:
            out = np.where(np.isnan(out), values[:, cols[name]], out)
    return out


def has_memory(columns) -> bool:
    """Return whether ``job_memory`` can give a value from profile columns ``columns``."""
    have = set(columns)
    return bool(have & set(MEMORY_COLUMNS)) or set(STATIC_MEMORY) <= have


def job_memory(values: np.ndarray, cols: Mapping[str, int]) -> np.ndarray:
    """Return each job's memory footprint in bytes, NaN where no source is known.

    The rule: the first measured column of ``MEMORY_COLUMNS`` (peak reserved, then peak allocated, then RSS
    growth), else the static estimate ``4 * f_param_bytes + f_activation_bytes``. ``values`` holds one
    profile per row, ``cols`` maps column names to positions. Example: reserved 6e9 and allocated 5e9 give
    ``6e9``; only ``f_param_bytes=1e8, f_activation_bytes=2e8`` gives ``6e8``.
    """
    mem = first_present(values, cols, MEMORY_COLUMNS)
    if set(STATIC_MEMORY) <= set(cols):
        static = 4.0 * values[:, cols["f_param_bytes"]] + values[:, cols["f_activation_bytes"]]
        mem = np.where(np.isnan(mem), static, mem)
    return mem


def memory_fit(profiles: pd.DataFrame, workloads: list[str]) -> tuple[np.ndarray, str]:
    """Return ``(fits, note)``: ``fits[i, j]`` is False where both jobs' memory exceeds the device's.

    A job's memory is ``job_memory`` of the medians of its profiles' columns; the device memory is the
    smallest ``f_device_mem_bytes`` among the workloads. Where a workload's memory or the device memory is
    unknown, the pair is not blocked.

    Parameters
    ----------
    profiles : DataFrame
        Profiles of one device: ``workload`` and any of ``MEMORY_COLUMNS``, ``STATIC_MEMORY``,
        ``f_device_mem_bytes``.
    workloads : list of str
        The jobs' workloads; ``fits`` is indexed in this order.

    Returns
    -------
    tuple
        ``(array([[False, True], [True, True]]), "memory fit checked against 9.3 GiB")``: the bool matrix
        (symmetric) and a one-line note saying what was checked.
    """
    n = len(workloads)
    fits = np.ones((n, n), dtype=bool)
    cols = [c for c in (*MEMORY_COLUMNS, *STATIC_MEMORY) if c in profiles.columns]
    if not has_memory(cols) or DEVICE_MEMORY not in profiles.columns:
        return fits, "memory fit not checked: the profiles hold no memory features"
    grouped = profiles.groupby("workload")[[*cols, DEVICE_MEMORY]].median().reindex(workloads)
    mem = job_memory(grouped[cols].to_numpy(dtype=float), {c: i for i, c in enumerate(cols)})
    device = grouped[DEVICE_MEMORY].to_numpy(dtype=float)
    device_mem = device[np.isfinite(device)].min() if np.isfinite(device).any() else np.nan
    if not np.isfinite(device_mem):
        return fits, "memory fit not checked: device memory unknown"
    total = mem[:, None] + mem[None, :]
    fits = ~(np.isfinite(total) & (total > device_mem))
    unknown = int((~np.isfinite(mem)).sum())
    note = f"memory fit checked against {device_mem / 2**30:.1f} GiB"
    if unknown:
        note += f" ({unknown} workload(s) without a memory measurement are not blocked)"
    return fits, note
