"""Pair features: join pairs to solo profiles and build ordered (self, partner) feature rows with numpy.

Two features carry fitted state, which a model keeps and cross-validation fits per fold on training rows
only: device shares (a job's rate over the highest rate on its device in training, ``device_reference``)
and the partner's measured effect on others (``with_partner_effect``). ``prepare_rows`` fits both.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, DatasetError, ModelSchemaError, SchemaError

# Profile columns that are not named f_* but describe the solo run on the device. ``throughput`` is left out
# on purpose: it is 1000 / iter_time_ms for the same run, and the CSV importer may have to fill it with a
# placeholder when a source gives no step time.
CORE_COLUMNS = ("iter_time_ms",)
# Batch size comes from the profile's ``batch_size`` column only when no ``f_batch_size`` feature exists.
_BATCH_FALLBACK = "batch_size"

# Sources of a per-job memory footprint, most to least direct. When none is measured, static counts give
# an estimate: parameters, gradients and two Adam moments (4 x parameter bytes) plus activations.
_MEMORY_COLUMNS = ("f_mem_peak_allocated_bytes", "f_mem_peak_reserved_bytes", "f_mem_rss_growth_bytes")
_STATIC_MEMORY = ("f_param_bytes", "f_activation_bytes")

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
    mode, self_family, partner_family, pair_id, direction`` (0: self is ``workload_a``, 1: ``workload_b``);
    ``reference`` the device references its share features were computed with (``device_reference``).
    """

    X: pd.DataFrame
    y: np.ndarray | None
    meta: pd.DataFrame
    reference: dict = field(default_factory=dict)


def base_columns(profiles: pd.DataFrame) -> list[str]:
    """Return the profile columns the pair features are built from: the core columns and every ``f_*``.

    Example: ``["iter_time_ms", "f_flops_per_step", "f_batch_size", "f_busy_frac"]``.
    """
    feats = [c for c in profiles.columns if isinstance(c, str) and c.startswith("f_")]
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
FEATURE_SETS = ("physical", "all")
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


def select_features(rows: PairRows, feature_set: str = "physical") -> PairRows:
    """Return ``rows`` with only the pair features of ``feature_set`` (``select_base``)."""
    base = select_base(base_columns_of_model(rows.X.columns), feature_set)
    names = pair_feature_names(base)
    if list(rows.X.columns) == names:
        return rows
    return PairRows(X=rows.X[names], y=rows.y, meta=rows.meta, reference=rows.reference)


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
    if have & set(_MEMORY_COLUMNS) or set(_STATIC_MEMORY) <= have:
        symmetric("mem_bytes", _memory, ("sum",))
        if "f_device_mem_bytes" in have:
            combos.append(
                (
                    f"{PAIR_PREFIX}mem_fit",
                    (_memory, _column("f_device_mem_bytes")),
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


def _first_present(values: np.ndarray, cols: dict[str, int], names: Sequence[str]) -> np.ndarray:
    out = np.full(values.shape[0], np.nan)
    for name in names:
        if name in cols:
            out = np.where(np.isnan(out), values[:, cols[name]], out)
    return out


def _memory(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    mem = _first_present(values, cols, _MEMORY_COLUMNS)
    if set(_STATIC_MEMORY) <= set(cols):
        static = 4.0 * values[:, cols["f_param_bytes"]] + values[:, cols["f_activation_bytes"]]
        mem = np.where(np.isnan(mem), static, mem)
    return mem


def _step_ms(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    return _first_present(values, cols, _STEP_TIME_COLUMNS)


def job_flop_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    """Return each job's FLOP rate: measured, else counted FLOPs per step over the step time, else NaN."""
    rate = _first_present(values, cols, _FLOP_RATE_COLUMNS)
    if "f_flops_per_step" in cols:
        counted = values[:, cols["f_flops_per_step"]] / (_step_ms(values, cols) / 1000.0)
        rate = np.where(np.isnan(rate), counted, rate)
    return rate


def _kernel_us(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    mean = _first_present(values, cols, ("f_kernel_mean_us",))
    # Without a trace, step time over the number of kernels (or of counted ops) bounds the mean kernel time.
    per_step = _step_ms(values, cols) * 1000.0 / _first_present(values, cols, _KERNEL_COUNT_COLUMNS)
    return np.where(np.isnan(mean), per_step, mean)


def _bytes_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    # Memory a step touches (its footprint: weights, optimizer state, activations) times steps per second.
    return _memory(values, cols) * 1000.0 / _step_ms(values, cols)


def _launch_rate(values: np.ndarray, cols: dict[str, int]) -> np.ndarray:
    rate = _first_present(values, cols, ("f_launch_rate",))
    counted = _first_present(values, cols, _KERNEL_COUNT_COLUMNS) * 1000.0 / _step_ms(values, cols)
    return np.where(np.isnan(rate), counted, rate)


#: Per-job rates that have a device share feature, and the function computing each from profile values.
SHARE_RATES = ("flop_rate", "bytes_rate", "launch_rate")
_RATE_GETTERS = {"flop_rate": job_flop_rate, "bytes_rate": _bytes_rate, "launch_rate": _launch_rate}
_REF_COLUMNS = tuple(f"@reference_{r}" for r in SHARE_RATES)
_RATE_NEEDS = {
    "flop_rate": lambda have, step: bool(have & set(_FLOP_RATE_COLUMNS))
    or ("f_flops_per_step" in have and step),
    "bytes_rate": lambda have, step: step
    and bool(have & set(_MEMORY_COLUMNS) or set(_STATIC_MEMORY) <= have),
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


def device_reference(rates: np.ndarray, devices: Sequence[str]) -> dict[str, dict[str, float]]:
    """Return the highest of each rate per device: the scale that device shares divide by.

    ``rates`` comes from ``job_rates`` for the profiles a model trains on, ``devices`` names their
    devices. Example: ``{"flop_rate": {"k80": 1.5e12, "v100": 8.8e12}, "bytes_rate": {...}, ...}``;
    a rate no profile of a device has is left out for that device.
    """
    rates = np.asarray(rates, dtype=np.float64).reshape(-1, len(SHARE_RATES))
    frame = pd.DataFrame(rates, columns=list(SHARE_RATES))
    frame["device"] = np.asarray(devices, dtype=object).astype(str)
    best = frame.groupby("device", sort=True)[list(SHARE_RATES)].max()
    return {
        rate: {str(d): float(v) for d, v in best[rate].items() if np.isfinite(v)} for rate in SHARE_RATES
    }


def reference_matrix(
    reference: Mapping[str, Mapping[str, float]],
    devices: Sequence[str],
    rates: np.ndarray | None = None,
) -> np.ndarray:
    """Return one row of references (``SHARE_RATES`` order) per row of ``devices``, for the share features.

    A device that ``reference`` lacks (one the model never saw) takes the highest of ``rates`` (rows
    aligned with ``devices``) on it: the best the profiles at hand show; without ``rates`` it stays NaN.
    """
    devices = np.asarray(devices, dtype=object).astype(str)
    out = np.full((devices.shape[0], len(SHARE_RATES)), np.nan)
    fallback = device_reference(rates, devices) if rates is not None else {}
    for j, rate in enumerate(SHARE_RATES):
        known = {**fallback.get(rate, {}), **dict(reference.get(rate, {}))}
        if known:
            out[:, j] = pd.Series(devices).map(known).to_numpy(dtype=np.float64)
    return out


def with_reference(rows: PairRows, reference: Mapping[str, Mapping[str, float]]) -> PairRows:
    """Return ``rows`` with its share features recomputed against ``reference`` (a fold's training scale).

    The base columns are read back from ``X`` (``self_*``, ``partner_*``), so the other features are
    unchanged; devices ``reference`` lacks take the highest rate among ``rows`` themselves.
    """
    names = list(rows.X.columns)
    if not any(n.startswith(f"{PAIR_PREFIX}self_share_") for n in names):
        return rows
    base = base_columns_of_model(names)
    s = rows.X[[SELF_PREFIX + b for b in base]].to_numpy(dtype=np.float64, na_value=np.nan)
    p = rows.X[[PARTNER_PREFIX + b for b in base]].to_numpy(dtype=np.float64, na_value=np.nan)
    devices = rows.meta["device_name"].astype(str).to_numpy(dtype=object)
    ref = reference_matrix(reference, devices, job_rates(s, base))
    same = (rows.meta["self_workload"] == rows.meta["partner_workload"]).to_numpy()
    full = pair_feature_matrix(s, p, base, same, ref, ref)
    X = rows.X.copy()
    shares = tuple(f"{PAIR_PREFIX}{side}_share_" for side in ("self", "partner", "sum"))
    for j, name in enumerate(pair_feature_names(base)):
        if name.startswith(shares):
            X[name] = full[:, j]
    return PairRows(X=X, y=rows.y, meta=rows.meta, reference={k: dict(v) for k, v in reference.items()})


def rows_reference(rows: PairRows, index: np.ndarray | None = None) -> dict[str, dict[str, float]]:
    """Return ``device_reference`` of the profiles that appear as self in ``rows`` (or its rows ``index``).

    Both directions of every pair are rows, so the selves of a training split are all its profiles.
    """
    X = rows.X if index is None else rows.X.iloc[index]
    meta = rows.meta if index is None else rows.meta.iloc[index]
    base = base_columns_of_model(X.columns)
    s = X[[SELF_PREFIX + b for b in base]].to_numpy(dtype=np.float64, na_value=np.nan)
    return device_reference(job_rates(s, base), meta["device_name"].astype(str).to_numpy(dtype=object))


# ---- the partner's measured interference -----------------------------------------------------------

#: Optional feature: the mean log slowdown the partner caused to the selves it was measured next to on
#: the same device in training. A user asking about a new model has measured pairs among their other
#: jobs, so how hard each of those jobs presses on whatever runs next to it is known; the feature is NaN
#: for a partner without such measurements (a new workload).
PARTNER_EFFECT = "pair_partner_effect"
# Fewer measured selves than this leave a partner's effect unknown (NaN) rather than noisy.
_PARTNER_EFFECT_MIN_ROWS = 3


def partner_effect_table(rows: PairRows, index: np.ndarray | None = None) -> dict[str, dict[str, float]]:
    """Return ``{device: {workload: mean log slowdown of the selves next to it}}`` over rows ``index``.

    Example: ``{"v100": {"ResNet-50 (batch size 16)": 1.05, "A3C": 0.31, ...}, ...}``.
    """
    frame = _effect_frame(rows, index)
    grouped = frame.groupby(["device", "partner"], sort=True)["log_y"].agg(["sum", "count"])
    grouped = grouped[grouped["count"] >= _PARTNER_EFFECT_MIN_ROWS]
    table: dict[str, dict[str, float]] = {}
    for (device, partner), row in grouped.iterrows():
        table.setdefault(str(device), {})[str(partner)] = float(row["sum"] / row["count"])
    return table


def with_partner_effect(rows: PairRows, train: np.ndarray) -> tuple[PairRows, dict]:
    """Return ``rows`` with a ``PARTNER_EFFECT`` column, and the table prediction rows read it from.

    Rows outside ``train`` read ``partner_effect_table(rows, train)``. A training row must not see its
    own label, nor anything a new workload could not have: its value leaves out every row whose self is
    of the training row's self family (at prediction the new self's family has no measurements), and it
    is NaN when the partner is of that family too (a new workload's family-mates are new as well).
    """
    train = np.asarray(train)
    table = partner_effect_table(rows, train)
    values = np.array(lookup_partner_effect(table, rows.meta), dtype=np.float64)
    frame = _effect_frame(rows, train)
    keys = ["device", "partner"]
    total = frame.groupby(keys)["log_y"].agg(["sum", "count"])
    by_family = frame.groupby([*keys, "self_family"])["log_y"].agg(["sum", "count"])
    at_total = total.reindex(pd.MultiIndex.from_frame(frame[keys]))
    at_family = by_family.reindex(pd.MultiIndex.from_frame(frame[[*keys, "self_family"]]))
    count = at_total["count"].to_numpy() - at_family["count"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        own = (at_total["sum"].to_numpy() - at_family["sum"].to_numpy()) / count
    same_family = (frame["partner_family"] == frame["self_family"]).to_numpy()
    own[(count < _PARTNER_EFFECT_MIN_ROWS) | same_family] = np.nan
    values[train] = own
    X = rows.X.drop(columns=[PARTNER_EFFECT], errors="ignore")
    X[PARTNER_EFFECT] = values.astype(np.float32)
    return PairRows(X=X, y=rows.y, meta=rows.meta, reference=rows.reference), table


def lookup_partner_effect(table: Mapping[str, Mapping[str, float]], meta: pd.DataFrame) -> np.ndarray:
    """Return each row's partner effect from ``table`` (NaN for a partner or device it lacks).

    ``meta`` needs ``device_name`` and ``partner_workload`` (as in ``PairRows.meta``).
    """
    keys = pd.MultiIndex.from_arrays(
        [meta["device_name"].astype(str).to_numpy(), meta["partner_workload"].astype(str).to_numpy()]
    )
    flat = {(d, w): v for d, per in table.items() for w, v in per.items()}
    if not flat:
        return np.full(len(meta), np.nan)
    known = pd.Series(flat, dtype=np.float64)
    return known.reindex(keys).to_numpy(dtype=np.float64, na_value=np.nan)


def _effect_frame(rows: PairRows, index: np.ndarray | None) -> pd.DataFrame:
    if rows.y is None:
        raise ConfigError("the partner effect is measured from training rows: they need slowdowns")
    meta = rows.meta if index is None else rows.meta.iloc[index]
    y = rows.y if index is None else rows.y[index]
    return pd.DataFrame(
        {
            "device": meta["device_name"].astype(str).to_numpy(),
            "partner": meta["partner_workload"].astype(str).to_numpy(),
            "self_family": meta["self_family"].astype(str).to_numpy(),
            "partner_family": meta["partner_family"].astype(str).to_numpy(),
            "log_y": np.log(np.asarray(y, dtype=np.float64)),
        }
    )


def prepare_rows(
    rows: PairRows, train: np.ndarray, features: str = "physical", partner_effect: bool = True
) -> tuple[PairRows, dict]:
    """Fit the feature pipeline's state on rows ``train`` and return every row featurized with it.

    The state is what a trained model keeps: the device references of the share features and, with
    ``partner_effect``, the table of partners' measured effects. Returns ``(rows, state)``, e.g.
    ``state = {"device_reference": {...}, "partner_effect": {"v100": {"A3C": 0.31, ...}}}``.
    """
    train = np.asarray(train)
    reference = rows_reference(rows, train)
    out = select_features(with_reference(rows, reference), features)
    state: dict = {"device_reference": reference}
    if partner_effect:
        out, state["partner_effect"] = with_partner_effect(out, train)
    return out, state


# ---- joining pairs to profiles --------------------------------------------------------------------------


def profile_index(profiles: pd.DataFrame, workloads, devices, modes=None) -> np.ndarray:
    """Return, for each (workload, device, mode) query, the row of ``profiles`` that describes it, or -1.

    A query matches profiles of the same workload on the same device; among several, one of the same mode
    is preferred (when ``modes`` is given), then the latest ``created_at``.
    """
    # Queries come by the million (a scheduler's candidate pairs) but name few distinct values: encode
    # each query column once, fill a small table (distinct workloads x devices x modes) from the
    # profiles, and gather from it.
    columns = [workloads, devices] + ([modes] if modes is not None and "mode" in profiles else [])
    encoded = [pd.factorize(c if isinstance(c, pd.Series) else pd.Series(np.asarray(c, dtype=object)))
               for c in columns]
    n = len(encoded[0][0])
    if len(profiles) == 0 or n == 0:
        return np.full(n, -1, dtype=np.int64)
    created = profiles["created_at"].astype(str).to_numpy() if "created_at" in profiles else None
    order = np.argsort(created, kind="stable") if created is not None else np.arange(len(profiles))
    fields = ["workload", "device_name", "mode"][: len(columns)]
    values = [profiles[f].astype(str).to_numpy(dtype=object)[order] for f in fields]
    position = [{str(u): i for i, u in enumerate(uniques)} for _, uniques in encoded]
    table = np.full((len(position[0]), len(position[1])), -1, dtype=np.int64)
    for w, d, row in zip(values[0], values[1], order, strict=True):  # later (newer) rows overwrite
        i, j = position[0].get(w), position[1].get(d)
        if i is not None and j is not None:
            table[i, j] = row
    if len(columns) == 3:
        table = np.repeat(table[:, :, None], len(position[2]), axis=2)
        for w, d, m, row in zip(*values, order, strict=True):
            i, j, k = position[0].get(w), position[1].get(d), position[2].get(m)
            if i is not None and j is not None and k is not None:
                table[i, j, k] = row
    codes = [c for c, _ in encoded]
    known = np.logical_and.reduce([c >= 0 for c in codes])
    result = np.full(n, -1, dtype=np.int64)
    result[known] = table[tuple(c[known] for c in codes)]
    return result


def _profile_matrix(profiles: pd.DataFrame, base: Sequence[str]) -> np.ndarray:
    missing = [c for c in base if c not in profiles.columns]
    if missing:
        raise ModelSchemaError(
            f"the profiles lack feature column(s) {missing} that the model was trained on; profile the "
            "workloads with the same features, or retrain the model on this data with 'sharewise train'"
        )
    if not base:
        return np.empty((len(profiles), 0))
    # Rounded to float32, the precision of the feature matrix: features recomputed later from a matrix's
    # self_/partner_ columns (``with_reference``) then equal those computed here, bit for bit.
    values = profiles[list(base)].to_numpy(dtype=np.float64, na_value=np.nan)
    return values.astype(np.float32).astype(np.float64)


def _profile_devices(profiles: pd.DataFrame) -> np.ndarray:
    if "device_name" not in profiles.columns:
        return np.full(len(profiles), "", dtype=object)
    return profiles["device_name"].astype(str).to_numpy(dtype=object)


def _families(profiles: pd.DataFrame) -> np.ndarray:
    fam = profiles["family"].astype(str).to_numpy(dtype=object) if "family" in profiles else None
    names = profiles["workload"].astype(str).to_numpy(dtype=object)
    if fam is None:
        return names
    # A profile without a family is its own family, so grouping by family never merges unrelated models.
    return np.where(fam == "", names, fam)


def ordered_rows(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    base: Sequence[str] | None = None,
    with_target: bool = True,
    device_name: str | None = None,
    reference: Mapping[str, Mapping[str, float]] | None = None,
    features: str = "physical",
) -> PairRows:
    """Join pair rows to their profiles and return both ordered directions of every pair.

    Parameters
    ----------
    profiles : DataFrame
        Profiles table (``workload, family, device_name, mode, created_at, iter_time_ms``, ``f_*``).
    pairs : DataFrame
        ``workload_a, workload_b`` and, optionally, ``device_name``, ``mode``; with ``with_target`` also
        ``slowdown_a, slowdown_b`` (only rows with status ``ok`` are used when a status column exists).
    base : sequence of str, optional
        Profile columns to build features from; default ``select_base(base_columns(profiles), features)``.
    with_target : bool
        Whether to return measured slowdowns as ``y``.
    device_name : str, optional
        Device for pairs without a ``device_name`` column; by default the only device of ``profiles``.
    reference : dict, optional
        Device references for the share features (``device_reference``), e.g. a trained model's; by
        default those of the profiles these pairs name, which is what a training set needs.
    features : {"physical", "all"}
        Feature set when ``base`` is not given (``select_base``); ``"all"`` for a caller that selects
        later (``select_features``), as nested model selection does.

    Returns
    -------
    PairRows
        Direction 0 of pair ``i`` is row ``i``, direction 1 is row ``n + i``.

    Raises
    ------
    DatasetError
        A pair names a workload with no profile on its device.
    """
    if base is None:
        base = select_base(base_columns(profiles), features)
    for col in ("workload_a", "workload_b"):
        if col not in pairs.columns:
            raise SchemaError(f"pairs table lacks column {col!r}; it needs workload_a and workload_b")
    if with_target and "status" in pairs.columns:
        pairs = pairs[pairs["status"] == "ok"]
    pairs = pairs.reset_index(drop=True)
    profiles = profiles.reset_index(drop=True)
    n = len(pairs)
    wa, wb, dev, mode, ia, ib = resolve_pairs(profiles, pairs, device_name)
    matrix = _profile_matrix(profiles, base)
    fam = _families(profiles)
    i_self = np.concatenate([ia, ib])
    i_partner = np.concatenate([ib, ia])
    # Shares are computed for the profiles these pairs name, against their own highest rates unless a
    # reference (a trained model's) is given.
    used = np.unique(i_self)
    rates = job_rates(matrix[used], base)
    used_devices = _profile_devices(profiles)[used]
    if reference is None:
        reference = device_reference(rates, used_devices)
    ref = np.full((len(profiles), len(SHARE_RATES)), np.nan)
    ref[used] = reference_matrix(reference, used_devices, rates)
    X = pair_feature_matrix_indexed(matrix, i_self, i_partner, base, ref)
    names = pair_feature_names(base)
    meta = pd.DataFrame(
        {
            "self_workload": np.concatenate([wa, wb]),
            "partner_workload": np.concatenate([wb, wa]),
            "device_name": np.concatenate([dev, dev]),
            "mode": np.concatenate([mode, mode]) if mode is not None else "",
            "self_family": fam[i_self],
            "partner_family": fam[i_partner],
            "pair_id": np.concatenate([np.arange(n), np.arange(n)]),
            "direction": np.repeat([0, 1], n),
        }
    )
    y = None
    if with_target:
        for col in ("slowdown_a", "slowdown_b"):
            if col not in pairs.columns:
                raise SchemaError(f"pairs table lacks column {col!r} needed as the training target")
        y = np.concatenate(
            [pairs["slowdown_a"].to_numpy(dtype=np.float64), pairs["slowdown_b"].to_numpy(dtype=np.float64)]
        )
    return PairRows(
        X=pd.DataFrame(X, columns=names, copy=False),
        y=y,
        meta=meta,
        reference={k: dict(v) for k, v in reference.items()},
    )


def resolve_pairs(profiles: pd.DataFrame, pairs: pd.DataFrame, device_name: str | None = None):
    """Find the profile row of both workloads of every pair.

    ``profiles`` must have a default RangeIndex (the returned indices are positions). Returns
    ``(workload_a, workload_b, device, mode or None, index_a, index_b)`` as arrays.

    Raises
    ------
    DatasetError
        A pair names a workload with no profile on its device.
    """
    ia, ib = pair_indices(profiles, pairs, device_name)
    wa = pairs["workload_a"].astype(str).to_numpy(dtype=object)
    wb = pairs["workload_b"].astype(str).to_numpy(dtype=object)
    dev = _pair_devices(profiles, pairs, device_name).astype(str).to_numpy(dtype=object)
    mode = pairs["mode"].astype(str).to_numpy(dtype=object) if "mode" in pairs.columns else None
    return wa, wb, dev, mode, ia, ib


def pair_indices(
    profiles: pd.DataFrame, pairs: pd.DataFrame, device_name: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Return the profile rows (positions) of ``workload_a`` and ``workload_b`` of every pair.

    The fast core of ``resolve_pairs`` for batch prediction: no per-row strings are built.

    Raises
    ------
    DatasetError
        A pair names a workload with no profile on its device.
    """
    dev = _pair_devices(profiles, pairs, device_name)
    mode = pairs["mode"].astype(str) if "mode" in pairs.columns else None
    ia = profile_index(profiles, pairs["workload_a"].astype(str), dev, mode)
    ib = profile_index(profiles, pairs["workload_b"].astype(str), dev, mode)
    lost = (ia < 0) | (ib < 0)
    if lost.any():
        i = int(np.argmax(lost))
        who = pairs["workload_a"].iloc[i] if ia[i] < 0 else pairs["workload_b"].iloc[i]
        n_lost = int(lost.sum())
        raise DatasetError(
            f"no profile of workload {str(who)!r} on device {str(dev.iloc[i])!r} (needed by pair row {i}"
            f"{f' and {n_lost - 1} more' if n_lost > 1 else ''}); profile it there first, "
            "or drop the pairs that name it"
        )
    return ia, ib


def _pair_devices(profiles: pd.DataFrame, pairs: pd.DataFrame, device_name: str | None) -> pd.Series:
    if "device_name" in pairs.columns:
        return pairs["device_name"].astype(str)
    name = device_name if device_name is not None else _only_device(profiles)
    return pd.Series(np.full(len(pairs), name, dtype=object), index=pairs.index).astype(str)


def profile_matrix(profiles: pd.DataFrame, base: Sequence[str]) -> np.ndarray:
    """Return the ``base`` columns of ``profiles`` as a float64 matrix (NaN for missing values).

    Raises
    ------
    ModelSchemaError
        A column of ``base`` is absent (the message lists them).
    """
    return _profile_matrix(profiles, base)


def _only_device(profiles: pd.DataFrame) -> str:
    devices = sorted(set(profiles["device_name"].astype(str))) if "device_name" in profiles else []
    if len(devices) != 1:
        raise DatasetError(
            f"the pairs give no device_name and the profiles cover {len(devices)} devices {devices}; "
            "add a device_name column to the pairs to say which device each pair shares"
        )
    return devices[0]
