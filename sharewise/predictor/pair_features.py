"""Pair feature names and values: which profile columns a model reads, and the ordered (self, partner) matrix.

Everything here is a pure function of profile values: the fitted state (device references, partner
effects) lives in ``feature_state`` and is owned by ``PairFeaturizer``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError
from sharewise.predictor.choices import FEATURE_SETS
from sharewise.predictor.memory import first_present, has_memory, job_memory

# Profile columns that are not named f_* but describe the solo run on the device. ``throughput`` is left out
# on purpose: it is 1000 / iter_time_ms for the same run, and the CSV importer may have to fill it with a
# placeholder when a source gives no step time.
CORE_COLUMNS = ("iter_time_ms",)
# Batch size comes from the profile's ``batch_size`` column only when no ``f_batch_size`` feature exists.
_BATCH_FALLBACK = "batch_size"

_STEP_TIME_COLUMNS = ("f_step_time_ms", "iter_time_ms")
_FLOP_RATE_COLUMNS = ("f_achieved_flop_rate", "f_achieved_flops")
_KERNEL_COUNT_COLUMNS = ("f_kernels_per_step", "f_ops_per_step_static")

SELF_PREFIX = "self_"
PARTNER_PREFIX = "partner_"
PAIR_PREFIX = "pair_"


@dataclass(frozen=True)
class PairRows:
    """Ordered pair rows ready for the regressor.

    ``X`` holds one row per (self, partner) direction; ``y`` the measured slowdown of self (``None`` for
    rows to predict); ``meta`` the identity of each row: ``self_workload, partner_workload, device_name,
    mode, self_family, partner_family, pair_id, direction`` (0: self is ``workload_a``, 1: ``workload_b``).
    """

    X: pd.DataFrame
    y: np.ndarray | None
    meta: pd.DataFrame

    def take(self, index: np.ndarray) -> PairRows:
        """Return the rows at positions ``index``; ``X`` and ``meta`` keep their row labels."""
        index = np.asarray(index)
        y = None if self.y is None else self.y[index]
        return PairRows(X=self.X.iloc[index], y=y, meta=self.meta.iloc[index])


def base_columns(profiles: pd.DataFrame) -> list[str]:
    """Return the profile columns the pair features are built from: the core columns and every ``f_*``.

    Example: ``["iter_time_ms", "f_batch_size", "f_busy_frac", "f_flops_per_step"]``.

    The ``f_*`` columns come in sorted order, whatever their order in ``profiles``: a tree model's fit
    depends on its column order (ties between equally good splits go to the first column), and the order
    of a table is an accident of how it was written (features freshly counted come in the counter's
    order, cached ones sorted), so the same data would otherwise train a different model.
    """
    feats = sorted(c for c in profiles.columns if isinstance(c, str) and c.startswith("f_"))
    cols = [c for c in CORE_COLUMNS if c in profiles.columns]
    if "f_batch_size" not in feats and _BATCH_FALLBACK in profiles.columns:
        cols.append(_BATCH_FALLBACK)
    return cols + feats


def base_columns_of_model(feature_names: Sequence[str]) -> list[str]:
    """Recover the profile columns a model was trained on from its pair feature names."""
    return [n[len(SELF_PREFIX) :] for n in feature_names if n.startswith(SELF_PREFIX)]


# Feature sets: which profile columns pair features are built from. "physical" keeps the quantities that
# say how much of the device a job occupies and how it chunks its work (step time, FLOPs, bytes, kernels,
# measured utilization) and leaves out the static op-mix columns and the batch size: with a handful of
# model families to learn from, those identify a family rather than describe its load, and a tree model
# uses them to memorize per-family levels that do not carry over to a family it has never seen.
_IDENTIFYING_PREFIXES = ("f_opcount_", "f_opshare_")
_IDENTIFYING_COLUMNS = ("f_batch_size", _BATCH_FALLBACK)


def select_base(base: Sequence[str], feature_set: str = "physical") -> list[str]:
    """Return the profile columns of ``base`` that feature set ``feature_set`` builds features from.

    Example: ``select_base(["iter_time_ms", "f_batch_size", "f_opcount_gemm_conv"])`` is
    ``["iter_time_ms"]``; with ``"all"`` every column is kept.
    """
    if feature_set not in FEATURE_SETS:
        raise ConfigError(f"feature set must be one of {list(FEATURE_SETS)}, got {feature_set!r}")
    if feature_set == "all":
        return list(base)
    return [
        c for c in base if c not in _IDENTIFYING_COLUMNS and not c.startswith(_IDENTIFYING_PREFIXES)
    ]


def pair_feature_names(base: Sequence[str]) -> list[str]:
    """Return the pair feature names built from ``base`` profile columns, in matrix order."""
    return _combo_plan(list(base))[0]


def pair_feature_matrix(
    self_values: np.ndarray,
    partner_values: np.ndarray,
    base: Sequence[str],
    same_workload: np.ndarray,
    self_reference: np.ndarray | None = None,
    partner_reference: np.ndarray | None = None,
) -> np.ndarray:
    """Build the float32 pair feature matrix from the self and partner profile values.

    Parameters
    ----------
    self_values, partner_values : ndarray of shape (n, len(base))
        Profile values of self and of the partner, columns in ``base`` order; NaN marks a missing value.
    base : sequence of str
        Profile column names (``base_columns``).
    same_workload : ndarray of shape (n,)
        True where self and partner are the same workload.
    self_reference, partner_reference : ndarray of shape (n, len(SHARE_RATES)), optional
        Reference rates of the device of each row (``reference_matrix``) that the device shares divide
        by; without them the share features are NaN.

    Returns
    -------
    ndarray of shape (n, len(pair_feature_names(base))), float32
        Columns ``self_<col>...``, ``partner_<col>...``, then the ``pair_*`` combinations.
    """
    s = _with_reference(np.asarray(self_values, dtype=np.float64), self_reference)
    p = _with_reference(np.asarray(partner_values, dtype=np.float64), partner_reference)
    return _assemble(list(base), s, p, lambda q: q, np.asarray(same_workload, dtype=bool))


def pair_feature_matrix_indexed(
    matrix: np.ndarray,
    i_self: np.ndarray,
    i_partner: np.ndarray,
    base,
    reference: np.ndarray | None = None,
    partner_effect: np.ndarray | None = None,
) -> np.ndarray:
    """Return ``pair_feature_matrix(matrix[i_self], matrix[i_partner], base, i_self == i_partner)``, faster.

    ``reference`` (one row per profile row of ``matrix``, ``reference_matrix``) gives the device shares.
    ``partner_effect`` (one value per profile row, ``lookup_partner_effect``) adds a last column,
    ``PARTNER_EFFECT``, holding the partner's value.
    Per-job quantities (memory, FLOP rate, kernel time) are computed once per profile row and gathered,
    so a million pairs among a few hundred profiles cost one gather per column.
    """
    matrix = _with_reference(np.asarray(matrix, dtype=np.float64), reference)
    i_self, i_partner = np.asarray(i_self), np.asarray(i_partner)
    gathered = {"self": i_self, "partner": i_partner}
    return _assemble(list(base), matrix, matrix, gathered, i_self == i_partner, partner_effect)


def _with_reference(values: np.ndarray, reference: np.ndarray | None) -> np.ndarray:
    # The device references travel as extra trailing columns of the profile matrix, named _REF_COLUMNS,
    # so per-job getters read them like any profile column.
    if reference is None:
        reference = np.full((values.shape[0], len(SHARE_RATES)), np.nan)
    reference = np.asarray(reference, dtype=np.float64).reshape(values.shape[0], len(SHARE_RATES))
    return np.concatenate([values, reference], axis=1)


def _assemble(
    base: list[str], s: np.ndarray, p: np.ndarray, gather, same: np.ndarray, extra_partner=None
) -> np.ndarray:
    names, combos = _combo_plan(base)
    col = {c: i for i, c in enumerate([*base, *_REF_COLUMNS])}
    k = len(base)
    if callable(gather):  # rows already aligned: self row i pairs with partner row i
        take_s = take_p = gather
    else:
        take_s = lambda q: q[gather["self"]]  # noqa: E731 - two one-line gathers
        take_p = lambda q: q[gather["partner"]]  # noqa: E731
    n = same.shape[0]
    out = np.empty((n, len(names) + (extra_partner is not None)), dtype=np.float32)
    if extra_partner is not None:
        out[:, -1] = take_p(np.asarray(extra_partner, dtype=np.float32))
    # Casting the (small) profile matrix before the gather halves the bytes moved for a million rows.
    out[:, :k] = take_s(s[:, :k].astype(np.float32))
    out[:, k : 2 * k] = take_p(p[:, :k].astype(np.float32))
    cache: dict[tuple[int, str], np.ndarray] = {}

    def per_job(getter, side: str) -> np.ndarray:
        key = (id(getter), side)
        if key not in cache:
            with np.errstate(divide="ignore", invalid="ignore"):
                cache[key] = take_s(getter(s, col)) if side == "s" else take_p(getter(p, col))
        return cache[key]

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for j, (_, inputs, mix) in enumerate(combos):
            if mix is None:  # the same-workload flag
                values = same.astype(np.float64)
            else:
                values = mix([per_job(g, "s") for g in inputs], [per_job(g, "p") for g in inputs])
            out[:, 2 * k + j] = np.where(np.isfinite(values), values, np.nan)
    return out


def _combo_plan(base: list[str]):
    """Return (all feature names, [(name, per-job inputs, mix)]) for the combinations ``base`` supports.

    A combination reads per-job quantities (``inputs``: functions of a profile matrix) for self and for the
    partner and mixes them: ``mix(self_inputs, partner_inputs)``. It is included only when its inputs exist
    as columns, so the names are a pure function of ``base`` and a model can rebuild exactly its training
    columns from its own feature names.
    """
    have = set(base)
    combos: list[tuple[str, tuple, object]] = []
    has_step = bool(have & set(_STEP_TIME_COLUMNS))

    def symmetric(name: str, getter, kinds: Sequence[str]) -> None:
        for kind in kinds:
            op = _MIX[kind]
            combos.append((f"{PAIR_PREFIX}{kind}_{name}", (getter,), lambda a, b, op=op: op(a[0], b[0])))

    if "f_busy_frac" in have:
        symmetric("busy_frac", _column("f_busy_frac"), ("sum", "min", "max"))
    # Summed utilizations: two jobs that together need more than the device has must slow down.
    for name in base:
        if (name.startswith("f_nvml_") and "util" in name) or name == "f_cpu_util":
            symmetric(name[2:], _column(name), ("sum", "max"))
    if has_memory(have):
        symmetric("mem_bytes", job_memory, ("sum",))
        if "f_device_mem_bytes" in have:
            combos.append(
                (
                    f"{PAIR_PREFIX}mem_fit",
                    (job_memory, _column("f_device_mem_bytes")),
                    lambda a, b: (a[0] + b[0]) / a[1],
                )
            )
    if have & set(_FLOP_RATE_COLUMNS) or ("f_flops_per_step" in have and has_step):
        symmetric("flop_rate", job_flop_rate, ("log_ratio", "sum"))
    if "f_launch_rate" in have:
        symmetric("launch_rate", _column("f_launch_rate"), ("log_ratio", "sum"))
    if "f_kernel_mean_us" in have or (have & set(_KERNEL_COUNT_COLUMNS) and has_step):
        # Time-slicing alternates kernels: a job with short kernels next to one with long kernels gets the
        # smaller share of device time, so the ratio of mean kernel durations sets who waits for whom.
        symmetric("kernel_us", _kernel_us, ("log_ratio",))
    if has_step:
        symmetric("step_ms", _step_ms, ("log_ratio", "share"))
    # Device shares: a job's rate over the highest rate seen on its device in training (the references
    # of ``device_reference``). They put jobs on different devices on one scale, so "uses most of the
    # device" means the same on a K80 and a V100, which absolute rates cannot say.
    for rate in SHARE_RATES:
        if _RATE_NEEDS[rate](have, has_step):
            getter = _share_getter(rate)
            combos.append((f"{PAIR_PREFIX}self_share_{rate}", (getter,), lambda a, b: a[0]))
            combos.append((f"{PAIR_PREFIX}partner_share_{rate}", (getter,), lambda a, b: b[0]))
            combos.append((f"{PAIR_PREFIX}sum_share_{rate}", (getter,), lambda a, b: a[0] + b[0]))
    combos.append((f"{PAIR_PREFIX}same_workload", (), None))
    names = [SELF_PREFIX + b for b in base] + [PARTNER_PREFIX + b for b in base] + [n for n, _, _ in combos]
    return names, combos


_MIX = {
    "sum": lambda a, b: a + b,
    "min": np.fmin,
    "max": np.fmax,
    "log_ratio": lambda a, b: np.log(a / b),  # self over partner; 0 when equal
    "share": lambda a, b: a / (a + b),
}


@functools.cache
def _column(name: str):
    # Cached so that every combination reading one column shares one getter (and one gather).
    return lambda values, cols: values[:, cols[name]]


def _step_ms(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    return first_present(values, cols, _STEP_TIME_COLUMNS)


def job_flop_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    """Return each job's FLOP rate: measured, else counted FLOPs per step over the step time, else NaN."""
    rate = first_present(values, cols, _FLOP_RATE_COLUMNS)
    if "f_flops_per_step" in cols:
        counted = values[:, cols["f_flops_per_step"]] / (_step_ms(values, cols) / 1000.0)
        rate = np.where(np.isnan(rate), counted, rate)
    return rate


def _kernel_us(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    mean = first_present(values, cols, ("f_kernel_mean_us",))
    # Without a trace, step time over the number of kernels (or of counted ops) bounds the mean kernel time.
    per_step = _step_ms(values, cols) * 1000.0 / first_present(values, cols, _KERNEL_COUNT_COLUMNS)
    return np.where(np.isnan(mean), per_step, mean)


def _bytes_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    # Memory a step touches (its footprint: weights, optimizer state, activations) times steps per second.
    return job_memory(values, cols) * 1000.0 / _step_ms(values, cols)


def _launch_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    rate = first_present(values, cols, ("f_launch_rate",))
    counted = first_present(values, cols, _KERNEL_COUNT_COLUMNS) * 1000.0 / _step_ms(values, cols)
    return np.where(np.isnan(rate), counted, rate)


#: Per-job rates that have a device share feature, and the function computing each from profile values.
SHARE_RATES = ("flop_rate", "bytes_rate", "launch_rate")
_RATE_GETTERS = {"flop_rate": job_flop_rate, "bytes_rate": _bytes_rate, "launch_rate": _launch_rate}
_REF_COLUMNS = tuple(f"@reference_{r}" for r in SHARE_RATES)
_RATE_NEEDS = {
    "flop_rate": lambda have, step: bool(have & set(_FLOP_RATE_COLUMNS))
    or ("f_flops_per_step" in have and step),
    "bytes_rate": lambda have, step: step and has_memory(have),
    "launch_rate": lambda have, step: "f_launch_rate" in have
    or (bool(have & set(_KERNEL_COUNT_COLUMNS)) and step),
}


@functools.cache
def _share_getter(rate: str):
    ref = f"@reference_{rate}"
    return lambda values, cols: _RATE_GETTERS[rate](values, cols) / values[:, cols[ref]]


def job_rates(values: np.ndarray, base: Sequence[str]) -> np.ndarray:
    """Return each profile row's ``SHARE_RATES`` (FLOP/s, bytes/s, launches/s), NaN where not computable.

    ``values`` holds the ``base`` columns, one row per profile. Example: ``array([[3.1e12, 2.4e10, 9.0e3]])``.
    """
    values = np.asarray(values, dtype=np.float64)
    cols = {c: i for i, c in enumerate(base)}
    have = set(base)
    has_step = bool(have & set(_STEP_TIME_COLUMNS))
    out = np.full((values.shape[0], len(SHARE_RATES)), np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for j, rate in enumerate(SHARE_RATES):
            if _RATE_NEEDS[rate](have, has_step):
                out[:, j] = _RATE_GETTERS[rate](values, cols)
    return np.where(np.isfinite(out) & (out > 0), out, np.nan)

