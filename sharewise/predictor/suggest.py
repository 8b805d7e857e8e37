"""Budgeted measurement of new workloads: which K pair runs to make next (``suggest_pairs``), and the cheap refit.

A campaign with a budget of K pair runs per new workload asks for one pick at a time, measures it, and asks
again; ``suggest_pairs`` refits cheaply on every measured pair of the new workloads (``refit_on_pairs``: a
``WorkloadShift``, no tree retrained), so each pick sees the ones before::

    for _ in range(K):
        for pick in suggest_pairs(model, profiles, pairs, new, budget=1):
            pairs = pd.concat([pairs, measure(pick.workload, pick.partner, pick.device_name)])
    model = refit_on_pairs(model, profiles, pairs, new)  # then save it: the shift is in the sidecar

**Devices.** A pair run is measured on a device the new workload is profiled on (the machine that profiled it):
a pair run measures both jobs there anyway. A partner without a profile on that device is still a candidate
when it has one on another device of the same kind (a CPU for a CPU, a GPU for a GPU): that profile stands in
for it in the predictions that rank the candidates (``stand_in``), and ``candidate_stand_ins`` lists them for
the caller's one-line note. A partner profiled only on another kind of device is no candidate, and
``nothing_to_suggest`` says which command profiles it on the new workload's device.
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
from sharewise.predictor.stand_in import (
    StandIn,
    device_kinds,
    missing_note,
    profile_command,
    profiled_devices,
    stand_in_source,
    with_stand_ins,
)

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
    speed_sum=(0.86, 1.02, 1.19), straddles=True, reason="speed sum p10-p90 0.86-1.19 straddles 1: ...",
    stand_in=None)``. ``stand_in`` names the device whose profile of the partner stood in for it on
    ``device_name`` (it has none there; module docstring), None where its own profile was used.
    """

    workload: str
    partner: str
    device_name: str
    rank: int
    score: float
    speed_sum: tuple[float, float, float]
    straddles: bool
    reason: str
    stand_in: str | None = None

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


@dataclass
class _Candidates:
    """The pair runs ``suggest_pairs`` chooses among, and what kept others out (for ``nothing_to_suggest``)."""

    rows: pd.DataFrame  # workload_a (new), workload_b, device_name: one row per unmeasured candidate
    partners: list[str]
    stand_ins: list[StandIn]  # partners' profiles standing in on the new workloads' devices
    unreachable: dict[str, dict[str, set[str]]]  # new workload -> {partner: its devices}, of another kind
    measured: int  # candidates left out because they are measured


def _candidates(profiles, pairs, new_workloads, against, device, prefer=()) -> _Candidates:
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
    devices = profiled_devices(profiles)
    kinds = device_kinds(profiles)
    done = set()
    for r in measured.itertuples():
        done |= {
            (str(r.workload_a), str(r.workload_b), str(r.device_name)),
            (str(r.workload_b), str(r.workload_a), str(r.device_name)),
        }
    rows, stand_ins, unreachable, skipped = [], {}, {}, 0
    for w in new_workloads:
        for b in partners:
            if b == w:
                continue
            reachable = False
            for d in sorted(devices[w]):
                if device is not None and d != device:
                    continue
                source = None if d in devices[b] else stand_in_source(profiles, b, d, prefer, kinds)
                if d not in devices[b] and source is None:
                    continue
                reachable = True
                if (w, b, d) in done:
                    skipped += 1
                    continue
                rows.append((w, b, d))
                if source is not None:
                    stand_ins.setdefault((b, d), StandIn(b, d, source))
            if not reachable and (device is None or device in devices[w]):
                unreachable.setdefault(w, {})[b] = devices[b]
    return _Candidates(
        pd.DataFrame(rows, columns=["workload_a", "workload_b", "device_name"]),
        partners,
        list(stand_ins.values()),
        unreachable,
        skipped,
    )


def _trained_devices(model) -> list[str]:
    return [str(d) for d in (getattr(model, "training_summary_", None) or {}).get("devices", [])]


def candidate_stand_ins(
    model,
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    new_workloads: Sequence[str],
    against: Sequence[str] | None = None,
    device: str | None = None,
) -> list[StandIn]:
    """Return the partners' profiles that stand in on the new workloads' devices among ``suggest_pairs``'s
    candidates (same arguments), e.g. ``[StandIn("resnet18", "Intel(R) Xeon(R) Processor (2 cores)",
    "AMD EPYC (2 cores)")]``; empty where every partner has a profile of its own there."""
    new_workloads = list(dict.fromkeys(str(w) for w in new_workloads))
    return _candidates(profiles, pairs, new_workloads, against, device, _trained_devices(model)).stand_ins


def nothing_to_suggest(
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    new_workloads: Sequence[str],
    against: Sequence[str] | None = None,
    budget: int = 1,
    device: str | None = None,
    out: str = "DIR",
) -> str:
    """Return why ``suggest_pairs`` (same arguments) suggests nothing, in one line that says what to do.

    In order: the budget is 0; no known partner; a new workload without a profile on ``device``; partners
    profiled only on another kind of device (with the command that profiles them on the new workload's device,
    its folder ``out``); else every candidate pair is measured already. Example: ``"no known partner: no
    profiled workload but the new ones is in a measured pair; name partners with --against"``.
    """
    if int(budget) == 0:
        return "the budget is 0"
    new_workloads = list(dict.fromkeys(str(w) for w in new_workloads))
    cands = _candidates(profiles, pairs, new_workloads, against, device)
    if not any(b != w for w in new_workloads for b in cands.partners):
        return (
            "no known partner: no profiled workload but the new ones is in a measured pair; measure pairs "
            "('sharewise pairs') or name partners with --against"
        )
    devices = profiled_devices(profiles)
    lacking = [w for w in new_workloads if device is not None and device not in devices[w]]
    if lacking:
        where = sorted({d for w in lacking for d in devices[w]})
        have = "has" if len(lacking) == 1 else "have"
        return f"{', '.join(lacking)} {have} no profile on {device!r} (profiled on {where}); leave out --device"
    if cands.unreachable and cands.rows.empty:
        w, others = next(iter(cands.unreachable.items()))
        here = sorted(devices[w])[0] if device is None else device
        line = missing_note([w], here, others, profile_command(profiles, list(others), here, out))
        return line + ("; the other candidate pairs are measured already" if cands.measured else "")
    return "every candidate pair is measured already"


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
        Only this device (default: every device the new workload is profiled on). A partner without a profile
        there is predicted with its profile from another device of the same kind standing in (module
        docstring); one profiled only on another kind of device is no candidate.

    Returns
    -------
    list of Suggestion
        Per new workload, in input order, its picks in the order to measure them (``rank`` 1, 2, ...). Empty
        where there is nothing to suggest; ``nothing_to_suggest`` says why.

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
    found = _candidates(profiles, pairs, new_workloads, against, device, _trained_devices(model))
    cands = found.rows
    if cands.empty or int(budget) == 0:
        return []
    source = {(s.workload, s.device_name): s.source for s in found.stand_ins}
    profiles = _with_pair_stand_ins(profiles, pairs, new_workloads, found.stand_ins, _trained_devices(model))
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
            row = cands.iloc[i]
            stand_in = source.get((str(row["workload_b"]), str(row["device_name"])))
            out.append(_suggestion(row, rank, float(score[j]), (low[j], mid[j], high[j]), int(n_d[i]), stand_in))
            same_device = left[(cands["device_name"].to_numpy()[left] == cands["device_name"].iat[i])]
            n_d[same_device] += 1  # as if measured: the workload's level on that device is less unknown
            n_w[left] += 1
            left = left[left != i]
    return out


def _with_pair_stand_ins(profiles, pairs, new_workloads, stand_ins, prefer) -> pd.DataFrame:
    """``profiles`` with the candidates' stand-ins, and stand-ins for the new workloads' measured pairs whose
    partner has no profile on the pair's device (the refit joins them to profiles)."""
    measured = _measured_ok(pairs)
    mine = measured[
        measured["workload_a"].astype(str).isin(new_workloads) | measured["workload_b"].astype(str).isin(new_workloads)
    ]
    wanted = [(s.workload, s.device_name) for s in stand_ins]
    for r in mine.itertuples():
        wanted += [(str(r.workload_a), str(r.device_name)), (str(r.workload_b), str(r.device_name))]
    return with_stand_ins(profiles, wanted, prefer)[0]


def _suggestion(
    row, rank: int, score: float, speed: tuple, measured_on_device: int, stand_in: str | None = None
) -> Suggestion:
    low, mid, high = (float(v) for v in speed)
    straddles = low < 1.0 < high
    w, b, d = str(row["workload_a"]), str(row["workload_b"]), str(row["device_name"])
    reason = f"fewest measured on {d} ({measured_on_device}); {b}: the most typical partner there"
    if straddles:
        reason += f"; speed sum {low:.2f}-{high:.2f} straddles 1 (share or not is uncertain)"
    return Suggestion(w, b, d, rank, score, (low, mid, high), straddles, reason, stand_in)
