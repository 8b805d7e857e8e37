"""The model's structure: the probe offset, a sensitivity x pressure model, and the weights of measured rows.

A user's first GPU campaign has tens of ordered rows; gradient-boosted trees with leaves of about 30 rows
cannot split on that (``min_child_weight``), so a tree model trained on it is its starting point and nothing
else. The starting point is therefore a model in its own right, fitted here by weighted least squares on the
training rows, and the trees only learn what it leaves (``SlowdownRegressor``'s base margin):

``log s(i next to j) = log probe_i + c[device, mode] + sum_k beta_k * (x_k(j) - mean x_k)``

* ``log probe_i``, the job's slowdown next to sharewise's probe (its Bubble-Up *sensitivity*), enters with
  slope 1: a level that trees cannot extrapolate to a workload never seen (on the CPU reference it took the
  error on a new workload from 20.8% to 4.6%). Data without a probe (Gavel's) starts from 0.
* ``c``: one level per device and sharing mode (time-slicing costs more than MPS on the same GPU); a device
  and mode the training rows lack takes the weighted mean level.
* The partner terms (``PARTNER_TERMS``), each centred on its training mean and used where the training rows
  have it: ``log`` of the partner's *pressure* (how much it slowed the probe: a solo feature, so it is known
  for a new partner too), and the partner's measured effect on the jobs it was paired with
  (``pair_partner_effect``, for partners with pairs). On the H200 the partner's effect follows its probe
  pressure (r = 0.88 over 8 partners), and on Gavel's GPUs the partner explains 0.3-0.5 of the variance.

Two candidates come from this model (``STRUCTURES``): ``offset`` (no partner term: "the probe scaled by a
constant") and ``structured`` (with them). The third, ``linear``, keeps the probe offset and replaces the levels
and partner terms by a ridge regression on every pair feature (signed log, median-imputed, standardized: the
``linear`` baseline's recipe, ``fit_linear``), which can carry a device's level in its features to a device the
rows never measured a pair on (Gavel, each GPU held out: 22.1% MAPE against 26.1% for per-device levels). The
fourth, ``trees``, adds XGBoost's trees on top of ``structured``. Which one a dataset gets is chosen by grouped
cross-validation (``capacity``).

Rows are weighted by how well they were measured (``precision_weights``): a slowdown whose confidence
interval stayed wide after the maximum repeats is a noisy label, and counts less.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from sharewise.predictor.choices import STRUCTURE_CHOICES, STRUCTURES

__all__ = ["STRUCTURES", "STRUCTURE_CHOICES", "apply_structure", "fit_structure", "precision_weights"]

# Model structures, simplest first (a tie in the selection goes to the simpler one). Why each exists:
# ``offset``: the probe's slowdown of the job, one level per device and mode (the median where there is no
# probe); what a few dozen rows support honestly. ``structured``: the offset plus the partner's pressure and
# measured effect, a handful of coefficients, for data that shows the partner but cannot feed trees.
# ``linear``: the probe offset and a ridge regression on every pair feature, for levels that features carry
# across devices. ``trees``: ``structured`` as the starting point and gradient-boosted trees on every pair
# feature for the interactions a linear model misses, once there are hundreds of rows (Gavel's GPUs). The names live in
# ``choices`` (``STRUCTURES``, ``STRUCTURE_CHOICES``: those or ``auto``), importable by the CLI without numpy.

#: Offset feature columns the featurizer appends (slowdowns, not logs; the model takes their log as margin).
OFFSET_PROBE = "pair_offset_probe"
OFFSET_STRUCTURED = "pair_offset_structured"
OFFSET_LINEAR = "pair_offset_linear"
OFFSET_COLUMNS = (OFFSET_PROBE, OFFSET_STRUCTURED, OFFSET_LINEAR)
#: Which offset column each structure starts from.
OFFSET_OF = {
    "offset": OFFSET_PROBE,
    "structured": OFFSET_STRUCTURED,
    "linear": OFFSET_LINEAR,
    "trees": OFFSET_STRUCTURED,
}
#: Ridge penalty of ``linear`` on standardized features (the ``linear`` baseline's).
LINEAR_ALPHA = 1.0

#: The job's sensitivity: its slowdown next to the probe (a solo-profile feature).
SENSITIVITY = "self_f_probe_slowdown"

# ---- the sharing knob (``profiler.knob``) ------------------------------------------------------------------
#: Shares (percent) at which ``profile --shares`` measures a job's solo rate under the knob: its scaling curve,
#: profile columns ``f_share_25`` ... (the rate at that share over the rate without the knob).
SHARE_POINTS = (25, 50, 75)
SHARE_CURVE = tuple(f"f_share_{p}" for p in SHARE_POINTS)
#: Pair features of the knob: self's share of the device (NaN: no knob), and the slowdown that share alone costs
#: it (``share_slowdown``: 1 / its scaling curve at the share), which is the starting point of a row under a knob
#: as the probe's slowdown is of a row without one.
PAIR_SHARE = "pair_self_share"
PAIR_SHARE_SLOWDOWN = "pair_share_slowdown"
SHARE_COLUMNS = (PAIR_SHARE, PAIR_SHARE_SLOWDOWN)


def share_slowdown(curve: np.ndarray, share: np.ndarray) -> np.ndarray:
    """The slowdown a job's share alone costs it: 1 / (its solo rate at ``share`` over its rate without the knob).

    ``curve`` holds each row's measured rates at ``SHARE_POINTS`` (n x 3, NaN where not measured), read with
    the ends (0, 0) and (1, 1) by linear interpolation; a row without any point scales in proportion (rate =
    share: the slowdown is 1 / share, what a job that uses every core of its quota gets). NaN where ``share`` is.

    >>> share_slowdown(np.array([[0.4, 0.7, 0.9], [np.nan] * 3]), np.array([0.5, 0.5]))
    array([1.42857143, 2.        ])
    """
    curve = np.asarray(curve, dtype=np.float64).reshape(len(share), len(SHARE_POINTS))
    share = np.asarray(share, dtype=np.float64)
    out = np.full(share.shape[0], np.nan)
    xs = np.array([0.0, *[p / 100 for p in SHARE_POINTS], 1.0])
    for i in np.flatnonzero(np.isfinite(share)):
        ys = np.array([0.0, *curve[i], 1.0])
        known = np.isfinite(ys)
        rate = np.interp(share[i], xs[known], ys[known])
        out[i] = 1.0 / max(rate, 1e-3)
    return out


def share_columns(X: pd.DataFrame, self_share: np.ndarray) -> np.ndarray:
    """The ``SHARE_COLUMNS`` of rows ``X`` (self's curve in ``self_f_share_*``) at self's shares ``self_share``."""
    cols = [f"self_{c}" for c in SHARE_CURVE]
    curve = np.column_stack([
        X[c].to_numpy(dtype=np.float64) if c in X.columns else np.full(len(X), np.nan) for c in cols
    ]) if len(X) else np.empty((0, len(cols)))
    share = np.asarray(self_share, dtype=np.float64)
    return np.column_stack([share, share_slowdown(curve, share)])
#: Partner terms of ``structured``: feature column -> whether the model takes its log.
PARTNER_TERMS: dict[str, bool] = {"partner_f_probe_pressure": True, "pair_partner_effect": False}
#: A partner term needs this many training rows with a value, and some spread, to be fitted.
MIN_TERM_ROWS = 8
#: Ridge on the partner coefficients, relative to each term's weighted sum of squares (a coefficient shrinks by
#: about 1%): keeps two nearly collinear terms (pressure and measured effect) from cancelling each other.
TERM_RIDGE = 0.01

#: The spread of log slowdown a model cannot explain from profiles (about 0.10 on the H200 and the CPU:
#: grouped out-of-fold residual sd), against which a row's measurement noise is weighed.
MODEL_NOISE_SD = 0.10
#: A 95% half-width above this (a fraction of the slowdown) marks a row as imprecise in the model card: the
#: target the shipped campaigns were measured to (``profiler.confidence.CI_TARGET``).
PRECISION_TARGET = 0.05
_Z95 = 1.96


def precision_weights(halfwidth: np.ndarray) -> np.ndarray:
    """Return each row's weight from the 95% half-width of its slowdown (a fraction; NaN: unknown, weight 1).

    Inverse-variance weighting with the model's own noise as the floor: a label with measurement sd
    ``h / 1.96`` (in log slowdown, about the relative sd) weighs ``MODEL_NOISE_SD^2 / (MODEL_NOISE_SD^2 +
    sd^2)``, so a well-measured row weighs about 1 and more repeats cannot make one row outweigh the others.

    >>> np.round(precision_weights(np.array([0.02, 0.05, 0.2, 0.87, np.nan])), 2)
    array([0.99, 0.94, 0.49, 0.05, 1.  ])
    """
    h = np.asarray(halfwidth, dtype=np.float64)
    sd = np.where(np.isfinite(h), h, 0.0) / _Z95
    return MODEL_NOISE_SD**2 / (MODEL_NOISE_SD**2 + sd**2)


def level_key(device: str, mode: str) -> str:
    """The key of one level ``c``: ``"NVIDIA H200|timeslice"``."""
    return f"{device}|{mode}"


def _keys(meta: pd.DataFrame) -> np.ndarray:
    devices = meta["device_name"].astype(str).to_numpy(dtype=object)
    modes = meta["mode"].astype(str).to_numpy(dtype=object) if "mode" in meta else np.full(len(meta), "", object)
    # A row under the knob has its own level: the interference left once each job has its share.
    knob = np.isfinite(meta["self_share"].to_numpy(dtype=np.float64)) if "self_share" in meta else np.zeros(len(meta))
    return np.asarray(
        [level_key(d, m) + ("|split" if k else "") for d, m, k in zip(devices, modes, knob, strict=True)],
        dtype=object,
    )


def _log_of(X: pd.DataFrame, column: str) -> np.ndarray:
    """``log X[column]`` where it is a positive number, NaN elsewhere (and where the column is missing)."""
    if column not in X.columns:
        return np.full(len(X), np.nan)
    v = X[column].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(v) & (v > 0), np.log(np.where(v > 0, v, 1.0)), np.nan)


def _log_sensitivity(X: pd.DataFrame, knob_slope: float = 0.0) -> np.ndarray:
    """Each row's starting point in log slowdown: ``log probe`` without the knob; under it, the share's own cost
    plus ``knob_slope`` x ``log probe`` (the job's sensitivity to what the knob does not split, ``fit_knob_slope``).
    """
    probe = _log_of(X, SENSITIVITY)
    out = np.where(np.isfinite(probe), probe, 0.0)
    knob = _log_of(X, PAIR_SHARE_SLOWDOWN)  # under the knob, the share's own cost is the starting point
    return np.where(np.isfinite(knob), knob + knob_slope * np.where(np.isfinite(probe), probe, 0.0), out)


#: The knob slope is fitted on at least this many rows under the knob, spread over at least two workloads' probe
#: slowdowns, and kept within ``KNOB_SLOPE_RANGE``.
KNOB_SLOPE_RANGE = (0.0, 1.5)


def fit_knob_slope(X: pd.DataFrame, y: np.ndarray, meta: pd.DataFrame, w: np.ndarray) -> float:
    """The slope of a job's probe sensitivity in its slowdown under the knob (0 where the rows cannot tell).

    A share of the device splits the resource the knob controls (CPU time, SMs), not the caches and memory
    bandwidth the partner still presses on; so under the knob a job slows by its share's own cost
    (``share_slowdown``) times a power of its sensitivity. Weighted least squares of ``log y - log share
    cost`` on one level per device and mode and ``log probe``, over the rows under the knob. Measured on this
    project's CPU (``benchmarks/bench_contract.py``, 60 ordered rows at three splits): slope 0.79, and the
    spread of log slowdown around the share's cost fell from 0.23 to 0.14.
    """
    knob = _log_of(X, PAIR_SHARE_SLOWDOWN)
    probe = _log_of(X, SENSITIVITY)
    rows = np.isfinite(knob) & np.isfinite(probe)
    if rows.sum() < MIN_TERM_ROWS or np.unique(np.round(probe[rows], 9)).size < 2:
        return 0.0
    keys = _keys(meta)[rows]
    D = np.column_stack([(keys == k).astype(np.float64) for k in sorted(set(keys))])
    target = np.log(np.asarray(y, dtype=np.float64)[rows]) - knob[rows]
    # Centred within each level, as the partner terms are: the slope carries the job's difference only.
    centred = probe[rows] - D @ _weighted_levels(D, probe[rows], w[rows])
    if np.sqrt(np.average(centred**2, weights=w[rows])) <= 1e-9:
        return 0.0
    coef = _wls(np.column_stack([D, centred]), target, w[rows], ridge_from=D.shape[1])
    return float(np.clip(coef[-1], *KNOB_SLOPE_RANGE))


def _term(X: pd.DataFrame, name: str) -> np.ndarray:
    v = X[name].to_numpy(dtype=np.float64)
    if PARTNER_TERMS[name]:
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(v > 0, np.log(np.where(v > 0, v, 1.0)), np.nan)
    return np.where(np.isfinite(v), v, np.nan)


def fit_structure(X: pd.DataFrame, y: np.ndarray, meta: pd.DataFrame, weights: np.ndarray | None = None) -> dict:
    """Fit the levels and the partner coefficients of the module's model on training rows; return its state.

    ``X`` holds the pair features (with ``pair_partner_effect`` where the featurizer adds it), ``y`` the
    measured slowdowns, ``meta`` each row's ``device_name`` and ``mode``. Weighted least squares of
    ``log y - log probe`` on one indicator per level and the centred partner terms (a term missing on a row
    counts as its mean). Returns the JSON-ready state ``apply_structure`` reads, e.g.::

        {"sensitivity": "self_f_probe_slowdown", "levels": {"NVIDIA H200|timeslice": 0.07},
         "pooled_level": 0.07, "levels_probe": {...}, "pooled_level_probe": 0.05,
         "terms": {"partner_f_probe_pressure": {"log": True, "center": 0.84, "coef": 0.52}}}

    The ``*_probe`` levels are those of the model without partner terms (structure ``offset``).
    """
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    slope = fit_knob_slope(X, y, meta, w)
    target = np.log(np.asarray(y, dtype=np.float64)) - _log_sensitivity(X, slope)
    keys = _keys(meta)
    names = sorted(set(keys))
    D = np.column_stack([(keys == k).astype(np.float64) for k in names])
    terms, columns = {}, []
    for name in PARTNER_TERMS:
        if name not in X.columns:
            continue
        v = _term(X, name)
        ok = np.isfinite(v)
        if ok.sum() < MIN_TERM_ROWS or np.nanstd(v[ok]) <= 1e-9:
            continue
        center = float(np.average(v[ok], weights=w[ok]))
        terms[name] = {"log": PARTNER_TERMS[name], "center": center}
        # Centred within each level, so a term carries the partner's difference, never a device's level.
        columns.append(np.where(ok, v - center, 0.0))
    levels_probe = _weighted_levels(D, target, w)
    if columns:
        M = np.column_stack(columns)
        coef = _wls(np.column_stack([D, M]), target, w, ridge_from=D.shape[1])
        levels, beta = coef[: D.shape[1]], coef[D.shape[1] :]
        for (_name, term), b in zip(terms.items(), beta, strict=True):
            term["coef"] = float(b)
    else:
        levels = levels_probe
    share = np.asarray([w[keys == k].sum() for k in names])
    return {
        "sensitivity": SENSITIVITY if SENSITIVITY in X.columns else None,
        "levels": {k: float(v) for k, v in zip(names, levels, strict=True)},
        "pooled_level": float(np.average(levels, weights=share)),
        "levels_probe": {k: float(v) for k, v in zip(names, levels_probe, strict=True)},
        "pooled_level_probe": float(np.average(levels_probe, weights=share)),
        "terms": terms,
        "knob_slope": slope,
        "linear": fit_linear(X, y, w, knob_slope=slope),
    }


def _weighted_levels(D: np.ndarray, target: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (D * w[:, None]).T @ target / np.maximum((D * w[:, None]).sum(axis=0), 1e-12)


def _wls(A: np.ndarray, b: np.ndarray, w: np.ndarray, ridge_from: int) -> np.ndarray:
    sw = np.sqrt(w)[:, None]
    Aw, bw = A * sw, b * sw[:, 0]
    penalty = np.zeros(A.shape[1])
    penalty[ridge_from:] = TERM_RIDGE * (Aw[:, ridge_from:] ** 2).sum(axis=0)
    return np.linalg.solve(Aw.T @ Aw + np.diag(penalty) + 1e-12 * np.eye(A.shape[1]), Aw.T @ bw)


def _signed_log(values: np.ndarray) -> np.ndarray:
    # Byte counts and FLOP rates span ten orders of magnitude; a linear model needs them on a log scale.
    return np.sign(values) * np.log1p(np.abs(values))


def fit_linear(X: pd.DataFrame, y: np.ndarray, weights: np.ndarray | None = None, knob_slope: float = 0.0) -> dict:
    """Fit structure ``linear``: ridge regression of ``log y - log probe`` on every feature of ``X`` (signed log,
    the training median for a missing value, standardized), weighted; return its JSON-ready state, e.g.
    ``{"columns": [...], "median": [...], "mean": [...], "scale": [...], "coef": [...], "intercept": 0.1,
    "range": [-0.2, 0.9]}`` (predictions are clipped to the training range of the target, as the baseline's)."""
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    target = np.log(np.asarray(y, dtype=np.float64)) - _log_sensitivity(X, knob_slope)
    # The partner's measured effect is left out: it is unknown for a partner on a device without pairs (the
    # case this structure is for), and a ridge fitted where it is known leans on it (Gavel, each GPU held out:
    # 24.7% MAPE with it, 22.1% without).
    columns = [c for c in X.columns if c not in OFFSET_COLUMNS and c != "pair_partner_effect" and c != PAIR_SHARE]
    V = _signed_log(X[columns].to_numpy(dtype=np.float64))
    known = np.isfinite(V).any(axis=0)
    columns = [c for c, k in zip(columns, known, strict=True) if k]
    V = V[:, known]
    median = np.nanmedian(V, axis=0) if V.size else np.zeros(0)
    V = np.where(np.isfinite(V), V, median)
    mean = np.average(V, axis=0, weights=w) if V.size else np.zeros(0)
    scale = np.sqrt(np.average((V - mean) ** 2, axis=0, weights=w)) if V.size else np.zeros(0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    Z = (V - mean) / scale
    center = float(np.average(target, weights=w))
    sw = np.sqrt(w)[:, None]
    Zw = Z * sw
    coef = np.linalg.solve(Zw.T @ Zw + LINEAR_ALPHA * np.eye(Z.shape[1]), Zw.T @ ((target - center) * sw[:, 0]))
    return {
        "columns": columns,
        "median": median.tolist(),
        "mean": mean.tolist(),
        "scale": scale.tolist(),
        "coef": coef.tolist(),
        "intercept": center,
        "range": [float(target.min()), float(target.max())],
        **({"knob_slope": knob_slope} if knob_slope else {}),
    }


def apply_linear(state: Mapping, X: pd.DataFrame) -> np.ndarray:
    """Return structure ``linear``'s offset (log slowdown) of every row of ``X`` (``fit_linear``'s state)."""
    columns = state["columns"]
    present = [c in X.columns for c in columns]
    V = np.full((len(X), len(columns)), np.nan)
    if any(present):
        V[:, np.flatnonzero(present)] = _signed_log(X[[c for c, p in zip(columns, present, strict=True) if p]]
                                                    .to_numpy(dtype=np.float64))
    median = np.asarray(state["median"], dtype=np.float64)
    V = np.where(np.isfinite(V), V, median)
    Z = (V - np.asarray(state["mean"])) / np.asarray(state["scale"])
    raw = state["intercept"] + Z @ np.asarray(state["coef"], dtype=np.float64)
    return _log_sensitivity(X, state.get("knob_slope", 0.0)) + np.clip(raw, *state["range"])


def apply_structure(state: Mapping, X: pd.DataFrame, meta: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """Return the offsets (log slowdown) of every row: without partner terms, with them, and ``linear``'s.

    ``X`` and ``meta`` as in ``fit_structure``; a level the state lacks takes the pooled level, a missing
    term value its training mean.
    """
    base = _log_sensitivity(X, state.get("knob_slope", 0.0))
    keys = _keys(meta)
    probe_levels, levels = state["levels_probe"], state["levels"]
    probe = base + np.asarray([probe_levels.get(k, state["pooled_level_probe"]) for k in keys], dtype=np.float64)
    full = base + np.asarray([levels.get(k, state["pooled_level"]) for k in keys], dtype=np.float64)
    for name, term in state["terms"].items():
        if name not in X.columns:
            continue
        v = _term(X, name)
        full = full + term["coef"] * np.where(np.isfinite(v), v - term["center"], 0.0)
    linear = apply_linear(state["linear"], X) if state.get("linear") else full
    return probe, full, linear


def describe_structure(state: Mapping, structure: str) -> str:
    """One line that says what the structure's offset is, e.g. ``"log probe slowdown + level (NVIDIA H200|
    timeslice 0.07) + 0.52 x (log partner_f_probe_pressure - 0.84)"``."""
    knob = state.get("knob_slope", 0.0)
    under = (f"; under the knob: log share cost + {knob:.2f} x log probe slowdown" if knob else
             "; under the knob: log share cost") if any(k.endswith("|split") for k in state["levels"]) else ""
    if structure == "linear":
        n = len(state["linear"]["columns"])
        return f"log probe slowdown + ridge regression on {n} pair features (standardized signed logs){under}"
    levels = state["levels_probe"] if structure == "offset" else state["levels"]
    start = "log probe slowdown" if state.get("sensitivity") else "median log slowdown"
    shown = ", ".join(f"{k} {v:+.3f}" for k, v in list(levels.items())[:4])
    more = f", {len(levels) - 4} more" if len(levels) > 4 else ""
    text = f"{start} + level ({shown}{more})"
    if structure != "offset":
        for name, term in state["terms"].items():
            inner = f"log {name}" if term["log"] else name
            text += f" {'+' if term['coef'] >= 0 else '-'} {abs(term['coef']):.3f} x ({inner} - {term['center']:.3f})"
    return text + under
