"""PAL's policies as its artifact defines them (hal-uw/blox-pal, tag artifact-v1.4, a fork of msr-fiddle/blox):
``packed-sticky-artifact``, ``packed-non-sticky``, ``pm-first-artifact`` and ``pal-artifact``.

One round of blox's scheduling and placement, as each of the four runs it (every 360 s in PAL's experiment):

1. **Which jobs run: FIFO, strict.** Every active job (running and waiting) in arrival order (then job id);
   the jobs run while their GPUs add up to what is available, and the first job that does not fit stops the
   walk (blox ``break``s: no backfilling), so every job after it waits. *Sticky* (Packed-Sticky): running
   jobs keep their GPUs; the walk admits waiting jobs onto the free GPUs. (blox would first stop lower-
   priority running jobs to make room; under FIFO with head-of-line blocking no running job is ever behind a
   waiting one, so that step never acts and is left out.) *Non-sticky* (Packed-Non-Sticky, PM-First, PAL):
   every GPU counts as free and every job is placed again, running ones included; a running job the walk
   does not admit is suspended (preempted), one that gets other GPUs migrates, one that gets exactly its
   GPUs back keeps running (the simulator's re-placement rule: a migration costs
   ``Cluster.preempt_delay_s``, 0 in the artifact).
2. **In which order they are placed.** FIFO; PM-First and PAL re-sort the admitted jobs by application class,
   stably, the most variability-sensitive class first (the classes' listed order, PAL's A..D;
   ``ClusterState.job_class``), so the most sensitive jobs get the best GPUs. The class order decides who
   is placed first, not who runs: PAL is a placement policy under any scheduler. (Sorting the whole queue by
   class, a class priority over FIFO, made PM-First and PAL 1.5x *worse* than Packed-Sticky on PAL's 8
   traces, the opposite of the paper's result, so that reading of the artifact is not the one kept.)
3. **Where a job goes.**
   - *packed* (blox's consolidated placement): a node with exactly as many free GPUs as the job needs, else
     the fitting node with the fewest free GPUs, else spread over the nodes with the most free GPUs first
     (``packed_block``).
   - *PM-First*: the free GPUs of the lowest factor level for the job's class (ties: lower GPU index).
     Levels: each class's per-GPU factors (1 / ``ClusterState.speed_of``) clustered into ``levels`` groups
     by 1-D k-means (scikit-learn, seeded); a GPU's level is its group's centroid.
   - *PAL*: for a job of 2 up to a node's GPUs, the best node that holds it (its best GPUs there; score: the
     largest level among them; ties: lower node) against PM-First's GPUs anywhere (score: the largest level
     x ``locality_penalty`` when they span nodes); the lower score wins, a tie stays on one node. Other
     sizes take PM-First's GPUs.

Every admitted job finds GPUs (each rule spreads when it must), so the four admit the same jobs in a round
and differ only in where they put them: the comparison isolates placement, as PAL's paper intends.

A job then runs at its slowest GPU's factor for its class x the cross-node slowdown (the simulator's rule).
These policies never share a GPU. They are defined for rounds: ``bench_pal_setting.py`` runs them with
360 s rounds on 16 nodes x 4 GPUs, PAL's setting; the event-driven policy suite leaves them out.
"""

from __future__ import annotations

import functools

import numpy as np

from sharewise.engine.free_gpus import packed_block
from sharewise.engine.policy_types import ClusterState, Decision, Placement, Queue
from sharewise.engine.table import SlowdownTable

RULES = ("packed", "pm-first", "pal")


def blox_round(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    now: float,
    *,
    rule: str = "packed",
    sticky: bool = True,
    by_class: bool = False,
    levels: int = 4,
    locality_penalty: float | None = None,
) -> Decision:
    """PAL's artifact, one round: strict FIFO admission, then placement by ``rule``, in FIFO or class order.

    The module docstring states the round.

    Parameters
    ----------
    rule
        Where a job goes: ``packed``, ``pm-first`` or ``pal``.
    sticky
        Running jobs keep their GPUs; otherwise every job is placed again each round.
    by_class
        Place the admitted jobs class by class, most variability-sensitive first (stable: FIFO within a class).
    levels
        Factor levels per class (1-D k-means) for ``pm-first`` and ``pal``.
    locality_penalty
        PAL's weight of spanning nodes (default: the cluster's cross-node slowdown).

    Returns
    -------
    Decision, e.g. ``Decision(start=[Placement(job=3, gpus=(0, 1)), Placement(job=7, gpus=(4,))],
    preempt=(3,))``: non-sticky, job 3 was running and is placed again.
    """
    if rule not in RULES:
        raise ValueError(f"placement rule must be one of {list(RULES)}, got {rule!r}")
    running = np.unique(cluster.resident[cluster.resident >= 0])
    if sticky:  # running jobs stay where they are; only waiting jobs are admitted, onto the free GPUs
        jobs, arrival, ngpus = queue.job, queue.arrival, queue.gpus
        free = cluster.occupancy() == 0
    else:
        jobs = np.concatenate([running, queue.job])
        arrival = np.concatenate([_arrival(cluster, running), queue.arrival])
        ngpus = np.concatenate([cluster.job_ngpus[running], queue.gpus])
        free = np.ones(cluster.n_gpus, dtype=bool)
    jobs, ngpus = np.asarray(jobs, np.int64), np.asarray(ngpus, np.int64)
    size = dict(zip(jobs.tolist(), ngpus.tolist(), strict=True))
    admitted = _fifo_strict(jobs, arrival, ngpus, int(free.sum()))
    if by_class and cluster.job_class is not None:
        admitted = admitted[np.argsort(cluster.job_class[admitted], kind="stable")]
    penalty = cluster.cross_node_slowdown if locality_penalty is None else float(locality_penalty)
    per_node = int(np.bincount(cluster.node).max())
    placements = []
    for j in admitted.tolist():
        k = size[j]
        if rule == "packed":
            gpus = packed_block(free, cluster.node, k)
        else:
            level = _levels(cluster, j, levels)
            gpus = _lowest_levels(free, level, k)
            if rule == "pal" and 1 < k <= per_node:
                gpus = _pal_choice(free, level, cluster.node, k, gpus, penalty)
        free[gpus] = False
        placements.append(Placement(j, tuple(sorted(int(g) for g in gpus))))
    return Decision(start=placements, preempt=() if sticky else tuple(int(j) for j in running))


def _fifo_strict(jobs: np.ndarray, arrival: np.ndarray, ngpus: np.ndarray, n_free: int) -> np.ndarray:
    """The jobs admitted in FIFO order (arrival, then id) while they fit on ``n_free`` GPUs; the first that
    does not fit stops the walk."""
    order = np.lexsort((jobs, arrival))
    fits = np.cumsum(ngpus[order]) <= n_free
    return jobs[order[: int(np.argmin(fits)) if not fits.all() else order.shape[0]]]


def _arrival(cluster: ClusterState, running: np.ndarray) -> np.ndarray:
    if cluster.job_arrival is None:
        return np.zeros(running.shape[0])
    return cluster.job_arrival[running]


def _levels(cluster: ClusterState, job: int, levels: int) -> np.ndarray:
    """The level (k-means centroid of the factors) of every GPU for ``job``'s class."""
    factor = 1.0 / np.asarray(cluster.speed_of(job), dtype=float)
    return _cluster_levels(factor.tobytes(), levels)


@functools.lru_cache(maxsize=64)
def _cluster_levels(factor_bytes: bytes, levels: int) -> np.ndarray:
    """1-D k-means of the factors into at most ``levels`` groups; each GPU gets its group's centroid."""
    from sklearn.cluster import KMeans

    factor = np.frombuffer(factor_bytes, dtype=float)
    k = min(levels, np.unique(factor).shape[0])
    if k <= 1:
        return np.full(factor.shape[0], float(factor.mean()))
    model = KMeans(n_clusters=k, n_init=10, random_state=0).fit(factor.reshape(-1, 1))
    out = model.cluster_centers_[model.labels_, 0]
    out.flags.writeable = False
    return out


def _lowest_levels(free: np.ndarray, level: np.ndarray, k: int) -> np.ndarray | None:
    """PM-First: the ``k`` free GPUs of the lowest levels (ties: lower index); ``None`` if fewer are free."""
    idx = np.flatnonzero(free)
    if idx.shape[0] < k:
        return None
    return idx[np.lexsort((idx, level[idx]))[:k]]


def _pal_choice(
    free: np.ndarray, level: np.ndarray, node: np.ndarray, k: int, anywhere: np.ndarray, penalty: float
) -> np.ndarray:
    """PAL: the best node that holds ``k`` free GPUs against ``anywhere`` (PM-First's GPUs) with the penalty."""
    within, within_score = None, np.inf
    idx = np.flatnonzero(free)
    for n in np.unique(node[idx]).tolist():
        on_node = idx[node[idx] == n]
        if on_node.shape[0] >= k:
            mine = on_node[np.lexsort((on_node, level[on_node]))[:k]]
            if float(level[mine].max()) < within_score:
                within, within_score = mine, float(level[mine].max())
    spans = np.unique(node[anywhere]).shape[0] > 1
    if within is not None and within_score <= float(level[anywhere].max()) * (penalty if spans else 1.0):
        return within
    return anywhere


packed_sticky_artifact = functools.partial(blox_round, rule="packed", sticky=True)
packed_non_sticky = functools.partial(blox_round, rule="packed", sticky=False)
pm_first_artifact = functools.partial(blox_round, rule="pm-first", sticky=False, by_class=True)
pal_artifact = functools.partial(blox_round, rule="pal", sticky=False, by_class=True)

# What each variant does, for ``sharewise policies`` (``sharewise.policy.describe``).
packed_sticky_artifact.summary = (
    "PAL's artifact, in rounds: strict FIFO; running jobs keep their GPUs, new ones go on as few nodes as possible."
)
packed_non_sticky.summary = (
    "PAL's artifact, in rounds: strict FIFO; every job is placed again on as few nodes as possible (may migrate)."
)
pm_first_artifact.summary = (
    "PAL's artifact, in rounds: strict FIFO; every job is placed again, most variability-sensitive class first, "
    "on the GPUs that are fastest for its class."
)
pal_artifact.summary = (
    "PAL's artifact, in rounds: strict FIFO; every job is placed again, most variability-sensitive class first, "
    "on the fastest GPUs for its class, weighed against spanning nodes."
)

# Sticky: never stops a job, so it need not be called while no queued job fits on the free GPUs.
packed_sticky_artifact.shares_gpus = False
for _policy in (packed_non_sticky, pm_first_artifact, pal_artifact):
    _policy.preemptive = True  # it suspends running jobs the walk does not reach
    _policy.replaces_running = True  # called every round while jobs run: it re-places them all
for _policy in (packed_sticky_artifact, packed_non_sticky, pm_first_artifact, pal_artifact):
    _policy.round_based = True  # defined for blox's rounds (PAL's setting), not for the event-driven suite
