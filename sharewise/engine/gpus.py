"""Compiled GPU picks the policies share: packed free GPUs, PAL's fastest block, and the GPUs holding one job.

The one implementation of each rule: ``free_gpus.packed_block``, ``pal.fastest_block``, the sharing baselines'
bookkeeping and ``sharewise``'s kernels all call these. ``tests/policy_oracles.py`` holds the Python rules they
replaced, and ``tests/policy/test_policy_kernels.py`` holds them equal. A GPU is free where ``occupancy`` is 0 (any
array whose free entries compare equal to 0: counts of jobs, or a mask of the GPUs not free).
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.compiled import kernel
from sharewise.engine.order import stable_order


@kernel
def pick_free_gpus(occupancy, node, k):  # pragma: no cover - compiled; tested against the oracle
    """``k`` free GPUs on as few nodes as possible, ascending; empty if fewer than ``k`` (or none) are asked
    for or free. A job that fits on one node goes to the lowest node with the fewest free GPUs that still
    holds it (best fit: whole nodes stay free for big jobs), one GPU to the first free GPU of a node with the
    fewest free; a bigger job takes the fullest-free nodes first (ties: GPU order)."""
    n_gpus = occupancy.shape[0]
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    n_nodes = 0
    for gpu in range(n_gpus):
        if node[gpu] + 1 > n_nodes:
            n_nodes = node[gpu] + 1
    counts = np.zeros(n_nodes, dtype=np.int64)
    n_free = 0
    for gpu in range(n_gpus):
        if occupancy[gpu] == 0:
            counts[node[gpu]] += 1
            n_free += 1
    if n_free < k:
        return np.empty(0, dtype=np.int64)
    out = np.empty(k, dtype=np.int64)
    if k == 1:
        best = -1
        for gpu in range(n_gpus):
            if occupancy[gpu] == 0 and (best < 0 or counts[node[gpu]] < counts[node[best]]):
                best = gpu
        out[0] = best
        return out
    fit = -1
    for nd in range(n_nodes):
        if counts[nd] >= k and (fit < 0 or counts[nd] < counts[fit]):
            fit = nd
    if fit >= 0:
        taken = 0
        for gpu in range(n_gpus):
            if occupancy[gpu] == 0 and node[gpu] == fit:
                out[taken] = gpu
                taken += 1
                if taken == k:
                    break
        return out
    chosen = np.zeros(n_gpus, dtype=np.bool_)
    taken = 0
    for c in range(counts.max(), 0, -1):
        for gpu in range(n_gpus):
            if taken < k and occupancy[gpu] == 0 and counts[node[gpu]] == c:
                chosen[gpu] = True
                taken += 1
    return np.flatnonzero(chosen)


@kernel
def fastest_block(occupancy, speed, node, k, penalty):  # pragma: no cover - compiled; tested against the oracle
    """The ``k`` free GPUs with the best effective speed (PAL's placement rule), fastest first.

    Candidates: the ``k`` fastest free GPUs (ties: lower index) of each node that has ``k`` free, and the
    ``k`` fastest free GPUs anywhere. A candidate's effective speed is its slowest GPU's speed, divided by
    ``penalty`` when it spans nodes; the best wins, ties going to fewer nodes, then to the node with fewer free
    GPUs, then to the earlier candidate (anywhere first, then nodes ascending). The caller makes sure ``k``
    GPUs are free.
    """
    n_gpus = occupancy.shape[0]
    n_free = 0
    for g in range(n_gpus):
        if occupancy[g] == 0:
            n_free += 1
    idx = np.empty(n_free, dtype=np.int64)
    slower = np.empty(n_free, dtype=np.float64)
    n_nodes = 0
    c = 0
    for g in range(n_gpus):
        if occupancy[g] == 0:
            idx[c] = g
            slower[c] = -speed[g]
            c += 1
        n_nodes = max(n_nodes, node[g] + 1)
    ranked = idx[stable_order(slower)]
    free_on = np.zeros(n_nodes, dtype=np.int64)
    for c in range(n_free):
        free_on[node[ranked[c]]] += 1
    best = ranked[:k].copy()
    best_key0, best_key1, best_key2 = _block_key(best, speed, node, penalty, free_on, n_free)
    picked = np.empty(k, dtype=np.int64)
    for nd in range(n_nodes):
        if free_on[nd] < k:
            continue
        m = 0
        for c in range(n_free):
            if node[ranked[c]] == nd:
                picked[m] = ranked[c]
                m += 1
                if m == k:
                    break
        key0, key1, key2 = _block_key(picked, speed, node, penalty, free_on, n_free)
        if key0 < best_key0 or (key0 == best_key0 and (key1 < best_key1 or (key1 == best_key1 and key2 < best_key2))):
            best_key0, best_key1, best_key2 = key0, key1, key2
            best = picked.copy()
    return best


@kernel
def effective_speed(gpus, speed, node, penalty):  # pragma: no cover - compiled
    """PAL's effective speed of a job on ``gpus``: its slowest GPU's ``speed``, over ``penalty`` when the GPUs
    span nodes; with the number of nodes spanned."""
    slowest = np.inf
    spans = 1
    for c in range(gpus.shape[0]):
        slowest = min(slowest, speed[gpus[c]])
        new = True
        for d in range(c):
            new = new and node[gpus[d]] != node[gpus[c]]
        spans += 1 if new and c > 0 else 0
    return slowest / (penalty if spans > 1 else 1.0), spans


@kernel
def _block_key(gpus, speed, node, penalty, free_on, n_free):  # pragma: no cover - compiled
    """``(-effective speed, nodes spanned, free GPUs of its node)``: the lower the better (``fastest_block``)."""
    eff, spans = effective_speed(gpus, speed, node, penalty)
    return -eff, spans, free_on[node[gpus[0]]] if spans == 1 else n_free


@kernel
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
