"""Compiled inner loops of the ``sharewise`` policy (numba): the per-call scoring of waiting jobs against
GPUs holding one job, and the predicted GPU releases.

The policy calls these at every scheduling event, thousands of times per trace; as numpy expressions they
were dozens of temporary arrays of a few thousand cells per call. Each kernel computes exactly the closed
forms documented in ``interference_aware`` in the same order of operations (no fast-math), so the numbers
match the array expressions bit for bit; ``tests/test_policy.py`` checks that against a numpy transcription.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def sharing_savings(
    wl_a, rem_a, release_a, single, partner, partner_wl, remaining, speed, job_work, job_start, now, n,
    ok, q, extra, g, stretch, same_quantile, max_slowdown,
):  # pragma: no cover - compiled; its numpy twin is tested against it
    """Return ``(saving, n_good)``: the (waiting jobs x lone residents) time saved by joining, ``-inf`` where
    forbidden, and per waiting job the number of GPUs where it saves time (``saving > 0``).

    Row ``i`` is a waiting job (workload ``wl_a``, remaining exclusive time ``rem_a`` on a speed-1 GPU,
    ``release_a`` the predicted wait for its turn in the line); column ``j`` is GPU ``single[j]``, holding
    job ``partner[gpu]`` alone (workload ``partner_wl``, remaining exclusive time ``remaining``, whole
    exclusive time ``job_work[job]``, started at ``job_start[job]``). ``ok``, ``q``, ``extra`` (at the SLO's
    quantile) and ``g``, ``stretch`` (at the benefit's quantile) are the flattened per-pair constants of
    ``interference_aware._pair_constants``.
    """
    m = wl_a.shape[0]
    k = single.shape[0]
    out = np.full((m, k), -np.inf)
    n_good = np.zeros(m, dtype=np.int64)
    for j in range(k):
        gpu = single[j]
        sp = speed[gpu]
        eb = remaining[gpu] / sp
        res = partner[gpu]
        # Wall seconds the resident may still run within its SLO (its slowdown counts from its start).
        bud = max_slowdown * job_work[res] / sp - (now - job_start[res])
        if eb > bud:
            continue
        wb = partner_wl[gpu]
        for i in range(m):
            ab = wl_a[i] * n + wb
            if not ok[ab]:
                continue
            ba = wb * n + wl_a[i]
            ea = rem_a[i] / sp
            q_ab = q[ab]
            q_ba = q[ba]
            a_first = q_ab * ea <= q_ba * eb
            if a_first:
                if not (q_ab <= max_slowdown and eb + ea * extra[ab] <= bud):
                    continue
            elif not (q_ba * eb <= bud and ea + eb * extra[ba] <= max_slowdown * ea):
                continue
            if not same_quantile:
                a_first = g[ab] * ea <= g[ba] * eb
            pair_stretch = ea * stretch[ab] if a_first else eb * stretch[ba]
            wait = eb if eb < release_a[i] else release_a[i]
            out[i, j] = wait - pair_stretch
            if out[i, j] > 0:
                n_good[i] += 1
    return out, n_good


@njit(cache=True, nogil=True)
def lone_residents(occupancy, resident, job_workload, job_remaining, n_workloads):  # pragma: no cover
    """Return ``(partner, partner_wl, remaining, alone)``: per GPU the job alone on it (``-1`` if the GPU is
    free or full), its workload id (``-1`` likewise) and its remaining exclusive time (0 elsewhere); per
    workload id, how many GPUs a job of it holds alone."""
    n_gpus = occupancy.shape[0]
    partner = np.full(n_gpus, -1, dtype=np.int64)
    partner_wl = np.full(n_gpus, -1, dtype=np.int64)
    remaining = np.zeros(n_gpus)
    alone = np.zeros(n_workloads, dtype=np.int64)
    for gpu in range(n_gpus):
        if occupancy[gpu] == 1:
            job = resident[gpu, 0]
            partner[gpu] = job
            partner_wl[gpu] = job_workload[job]
            remaining[gpu] = job_remaining[job]
            alone[job_workload[job]] += 1
    return partner, partner_wl, remaining, alone


@njit(cache=True, nogil=True)
def release_times(resident, remaining, workload, speed, allowed, p50, m):  # pragma: no cover - compiled
    """Return the ``m`` soonest GPU releases (seconds from now, p50 slowdowns), ascending; a free GPU counts
    as 0. A pair's release is the later of its two ends (``shared_completion``)."""
    n_gpus = resident.shape[0]
    out = np.zeros(n_gpus)
    for gpu in range(n_gpus):
        a = resident[gpu, 0]
        b = resident[gpu, 1]
        if a < 0:
            continue
        if b < 0:
            out[gpu] = remaining[a] / speed[gpu]
            continue
        wa = workload[a]
        wb = workload[b]
        s_ab = p50[wa, wb] if allowed[wa, wb] else 1.0
        s_ba = p50[wb, wa] if allowed[wb, wa] else 1.0
        e_a = remaining[a]
        e_b = remaining[b]
        f_a = s_ab * e_a
        f_b = s_ba * e_b
        if f_a <= f_b:
            c_a = f_a
            c_b = f_a + e_b - f_a / s_ba
        else:
            c_a = f_b + e_a - f_b / s_ab
            c_b = f_b
        out[gpu] = (c_a if c_a > c_b else c_b) / speed[gpu]
    if m < n_gpus:
        out = np.partition(out, m - 1)[:m]
    return np.sort(out)


@njit(cache=True, nogil=True)
def advance(resident, now, anchor_t, remaining, rate, attained, ngpus):  # pragma: no cover - compiled
    """Bring every running job's remaining work and attained service up to ``now`` (a multi-GPU job, seen on
    each of its GPUs, once: its anchor is ``now`` after the first)."""
    for gpu in range(resident.shape[0]):
        for slot in range(resident.shape[1]):
            job = resident[gpu, slot]
            if job < 0 or anchor_t[job] == now:
                continue
            dt = now - anchor_t[job]
            remaining[job] -= rate[job] * dt
            attained[job] += ngpus[job] * dt
            anchor_t[job] = now
