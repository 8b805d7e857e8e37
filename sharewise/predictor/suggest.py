"""Budgeted measurement of new workloads: which K pair runs to make next (``suggest_pairs``), and the cheap refit.

A campaign with a budget of K pair runs per new workload asks for one pick at a time, measures it, and asks
again; ``suggest_pairs`` refits cheaply on every measured pair of the new workloads (``refit_on_pairs``: a
``WorkloadShift``, no tree retrained), so each pick sees the ones before::

    for _ in range(K):
        for pick in suggest_pairs(model, profiles, pairs, new, budget=1):
            pairs = pd.concat([pairs, measure(pick.workload, pick.partner, pick.device_name)])
    model = refit_on_pairs(model, profiles, pairs, new)  # then save it: the shift is in the sidecar
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, DatasetError
from sharewise.predictor.api import model_rows, predict_pairs, train_model
from sharewise.predictor.shift import WorkloadShift, posterior_sd

#: Shrinkage for a model without calibration (``ConformalCalibration.shrinkage``): the variance components
#: of grouped out-of-fold residuals on Gavel's family folds (squared log slowdown, ``estimate_shrinkage`` on
#: ``sharewise import gavel``: 0.0073, 0.0438, 0.0458 as self; 0.0029, 0.0024, 0.094 as partner), rounded.
DEFAULT_SHRINKAGE = {
    "self_tau_w": 0.007,
    "self_tau_d": 0.044,
    "self_sigma": 0.046,
    "partner_tau_w": 0.003,
    "partner_tau_d": 0.0024,
    "partner_sigma": 0.094,
}
#: Weight of a partner's atypicality next to the posterior sd: small, so that it only orders the partners
#: on one device (where the sd is the same) and never moves a pick to a better-known device.
TIEBREAK = 1e-3


def pick_scores(mine: np.ndarray, theirs: np.ndarray, sd: np.ndarray, devices: np.ndarray) -> tuple[np.ndarray, ...]:
    """Score candidate pair runs of one new workload: higher is more worth measuring.

    ``mine`` and ``theirs`` are log (p10, p50, p90) slowdowns of the new workload next to each candidate
    partner and of the partner next to it, ``devices`` each candidate's device, and ``sd`` the posterior sd
    of the new workload's level on that device (``shift.posterior_sd``). First the device where the workload
    is least known (the largest ``sd``); there, the most typical partner: the one whose predicted slowdown
    of the new workload is closest to the median over that device's candidates, so that the measurement
    tells the workload's level rather than one unusual pair's:
    ``score = sd * (1 - TIEBREAK * |log p50 - median log p50 on the device|)``.

    Measured on Gavel's family folds (three imports, MAPE on the unrevealed pairs at K = 1 / 2 / 8) before
    this was fixed: the typical partner 19.1-19.8 / 17.4-18.2 / 15.1-15.6; a random partner on the same
    device 18.8-19.6 / 17.5-18.5 / 15.5-16.3; the widest speed-sum interval 17.1-26.2 / 15.5-23.2 /
    14.4-17.5 (an extreme pair can mislead the shift badly); a speed-sum interval that straddles 1 first
    23.1 at K = 1. So straddling the share/don't-share boundary is reported in the reason, not ranked on.

    Returns
    -------
    tuple of ndarray
        ``(score, speed_low, speed_mid, speed_high)``: the score and the predicted p10-p90 and p50 of the
        speed sum ``1/s_a + 1/s_b`` (above 1: sharing finishes more work than taking turns).
    """
    low = np.exp(-mine[:, 2]) + np.exp(-theirs[:, 2])
    mid = np.exp(-mine[:, 1]) + np.exp(-theirs[:, 1])
    high = np.exp(-mine[:, 0]) + np.exp(-theirs[:, 0])
    center = pd.Series(mine[:, 1]).groupby(np.asarray(devices, dtype=object)).transform("median").to_numpy()
    atypical = np.abs(mine[:, 1] - center)
    return np.asarray(sd, dtype=np.float64) * (1.0 - TIEBREAK * atypical), low, mid, high


@dataclass(frozen=True)
class Suggestion:
    """One pair run to measure for a new workload, and why.

    Example: ``Suggestion(workload="vit", partner="resnet18", device_name="v100", rank=1, score=0.41,
    speed_sum=(0.86, 1.02, 1.19), straddles=True, reason="speed sum p10-p90 0.86-1.19 straddles 1: ...")``.
    """

    workload: str
    partner: str
    device_name: str
    rank: int
    score: float
    speed_sum: tuple[float, float, float]
    straddles: bool
    reason: str

    def to_dict(self) -> dict:
        """Return plain JSON types."""
        return {**asdict(self), "speed_sum": [float(v) for v in self.speed_sum]}


def _shrinkage(model) -> dict[str, float]:
    calibration = getattr(model, "calibration_", None)
    return dict(calibration.shrinkage) if calibration is not None and calibration.shrinkage else dict(DEFAULT_SHRINKAGE)


def _measured_ok(pairs: pd.DataFrame) -> pd.DataFrame:
    return pairs[pairs["status"] == "ok"] if "status" in pairs.columns else pairs


def refit_on_pairs(
    model, profiles: pd.DataFrame, pairs: pd.DataFrame, new_workloads: Sequence[str], full: bool = False
):
    """Return a copy of ``model`` that uses the measured pairs of ``new_workloads`` (the cheap refit).

    By default no tree is refitted: the copy gets a ``WorkloadShift`` fitted on the residuals of the new
    workloads' measured (status ``ok``) pairs, with the shrinkage of the model's calibration (else
    ``DEFAULT_SHRINKAGE``); it costs one prediction per measured row. With ``full`` the trees and the
    featurizer are retrained on every measured pair first (``train_model`` with the model's parameters,
    the calibration carried over), then the shift is fitted on the new workloads' in-sample residuals.
    """
    new_workloads = [str(w) for w in new_workloads]
    measured = _measured_ok(pairs)
    if full:
        featurizer = model.get_featurizer()
        out = train_model(profiles, measured, featurizer.features, featurizer.partner_effect, **model.get_params())
        out.calibration_ = getattr(model, "calibration_", None)
    else:
        out = copy.copy(model)
    involved = measured["workload_a"].astype(str).isin(new_workloads) | measured["workload_b"].astype(str).isin(
        new_workloads
    )
    out.shift_ = None
    if involved.any():
        rows = model_rows(out, profiles, measured[involved], with_target=True)
        q = out.predict_quantiles(rows.X, devices=rows.meta["device_name"].to_numpy())
        residual = np.log(rows.y) - np.log(q[:, q.shape[1] // 2])
        out.shift_ = WorkloadShift.fit(residual, rows.meta, _shrinkage(model), new_workloads)
    return out


def _candidates(profiles, pairs, new_workloads, against, device) -> pd.DataFrame:
    profiled = sorted(set(profiles["workload"].astype(str)))
    for w in [*new_workloads, *(against or [])]:
        if w not in profiled:
            shown = ", ".join(profiled[:30]) + (" ..." if len(profiled) > 30 else "")
            raise DatasetError(f"no profile of workload {w!r}; profile it first (profiled workloads: {shown})")
    measured = _measured_ok(pairs)
    if against:
        partners = list(against)
    else:  # the jobs the cluster knows: profiled, not new, measured next to something
        seen = set(measured["workload_a"].astype(str)) | set(measured["workload_b"].astype(str))
        partners = [w for w in profiled if w not in new_workloads and w in seen]
    devices = profiles.groupby("workload")["device_name"].agg(lambda s: set(s.astype(str)))
    done = set()
    for r in measured.itertuples():
        done |= {
            (str(r.workload_a), str(r.workload_b), str(r.device_name)),
            (str(r.workload_b), str(r.workload_a), str(r.device_name)),
        }
    rows = [
        (w, b, d)
        for w in new_workloads
        for b in partners
        if b != w
        for d in sorted(devices[w] & devices[b])
        if (device is None or d == device) and (w, b, d) not in done
    ]
    return pd.DataFrame(rows, columns=["workload_a", "workload_b", "device_name"])


def suggest_pairs(
    model,
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    new_workloads: Sequence[str],
    against: Sequence[str] | None = None,
    budget: int = 1,
    device: str | None = None,
) -> list[Suggestion]:
    """Return up to ``budget`` pair runs per new workload that would most improve its pairing decisions.

    Parameters
    ----------
    model : SlowdownRegressor
        A fitted model (its calibration sets how much a measurement teaches, ``pick_scores``).
    profiles, pairs : DataFrame
        Profiles of every workload named, and the pairs measured so far (a new workload's measured pairs
        are used through ``refit_on_pairs`` and are not suggested again).
    new_workloads : sequence of str
        The workloads to measure.
    against : sequence of str, optional
        Partners to choose among; default the known workloads: profiled, not new, and in a measured pair.
    budget : int
        Pair runs per new workload. Picks are greedy: after each pick the workload's uncertainty on that
        device is lowered as if it had been measured (its outcome is unknown, so the prediction stays).
    device : str, optional
        Only this device (default: every device both workloads are profiled on).

    Returns
    -------
    list of Suggestion
        Per new workload, in input order, its picks in the order to measure them (``rank`` 1, 2, ...).

    Raises
    ------
    ConfigError
        A negative budget or no new workload.
    DatasetError
        A named workload without a profile.
    """
    if int(budget) < 0:
        raise ConfigError(f"budget must be a non-negative number of pair runs, got {budget!r}")
    new_workloads = list(dict.fromkeys(str(w) for w in new_workloads))
    if not new_workloads:
        raise ConfigError("name at least one new workload to suggest pairs for")
    cands = _candidates(profiles, pairs, new_workloads, against, device)
    if cands.empty or int(budget) == 0:
        return []
    current = refit_on_pairs(model, profiles, pairs, new_workloads)
    pred = predict_pairs(current, profiles, cands)
    mine = np.log(pred[["p10_a", "p50_a", "p90_a"]].to_numpy())
    theirs = np.log(pred[["p10_b", "p50_b", "p90_b"]].to_numpy())
    shift = current.shift_ or WorkloadShift({}, {}, {}, shrinkage=_shrinkage(model))
    n_w = shift.revealed(cands["workload_a"].to_numpy()).astype(np.float64)
    cells = {(d, w): n for d, inner in shift.device_counts.items() for w, n in inner.items()}
    n_d = np.array(
        [cells.get((d, w), 0) for w, d in zip(cands["workload_a"], cands["device_name"], strict=True)], float
    )
    out: list[Suggestion] = []
    for w in new_workloads:
        mask = (cands["workload_a"] == w).to_numpy()
        left = np.flatnonzero(mask)
        for rank in range(1, int(budget) + 1):
            if left.size == 0:
                break
            sd = posterior_sd(shift.shrinkage, n_w[left], n_d[left])
            score, low, mid, high = pick_scores(mine[left], theirs[left], sd, cands["device_name"].to_numpy()[left])
            j = int(np.argmax(score))
            i = int(left[j])
            out.append(_suggestion(cands.iloc[i], rank, float(score[j]), (low[j], mid[j], high[j]), int(n_d[i])))
            same_device = left[(cands["device_name"].to_numpy()[left] == cands["device_name"].iat[i])]
            n_d[same_device] += 1  # as if measured: the workload's level on that device is less unknown
            n_w[left] += 1
            left = left[left != i]
    return out


def _suggestion(row, rank: int, score: float, speed: tuple, measured_on_device: int) -> Suggestion:
    low, mid, high = (float(v) for v in speed)
    straddles = low < 1.0 < high
    w, b, d = str(row["workload_a"]), str(row["workload_b"]), str(row["device_name"])
    reason = f"fewest measured on {d} ({measured_on_device}); {b}: the most typical partner there"
    if straddles:
        reason += f"; speed sum {low:.2f}-{high:.2f} straddles 1 (share or not is uncertain)"
    return Suggestion(w, b, d, rank, score, (low, mid, high), straddles, reason)
