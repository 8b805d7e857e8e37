"""What ``sharewise``'s kernels see: the cluster, the queue, the pair table and the call's numbers, as named
tuples of arrays.

A kernel takes a few of these instead of twenty positional arrays. The policy hands them over as plain tuples
(``tuple(gpus)``) and the kernel names them again in its first line (``Gpus(*gpus)``): numba types a plain
tuple in C but a named one in Python, about 1.5 us per tuple per call, which over the Philly replay's 145,000
calls of several kernels each would cost seconds.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from sharewise.engine.policy_types import ClusterState, Queue, readonly
from sharewise.engine.table import SlowdownTable
from sharewise.policy.ours.params import Params
from sharewise.policy.ours.slo import pair_constants

# Cost that marks a forbidden (job, GPU) cell in the assignment; finite, as linear_sum_assignment requires.
FORBIDDEN = 1e18
_NO_CLASS = readonly(np.empty(0, dtype=np.int64))


class Gpus(NamedTuple):
    """The GPUs: ``resident[g]`` the (up to two) jobs on GPU ``g`` (``-1`` empty; slot 0 fills first),
    ``occupancy[g]`` their number, its ``node`` and ``speed`` (class-blind); ``class_speed[c]`` the speeds for
    a job of class ``c`` (one row, ``speed``, without PAL's per-class variability); ``cross`` the cross-node
    slowdown."""

    resident: np.ndarray
    occupancy: np.ndarray
    node: np.ndarray
    speed: np.ndarray
    class_speed: np.ndarray
    cross: float


class Jobs(NamedTuple):
    """Per job id (meaningful for running jobs): workload id, remaining and whole exclusive run time (seconds on
    a speed-1.0 GPU), first start (NaN: never ran), GPUs held, and class (empty without classes)."""

    workload: np.ndarray
    remaining: np.ndarray
    work: np.ndarray
    start: np.ndarray
    ngpus: np.ndarray
    job_class: np.ndarray


class Waiting(NamedTuple):
    """The queue (``Queue``'s fields a kernel reads), by queue position: job id, GPUs asked for, workload id and
    remaining exclusive run time."""

    job: np.ndarray
    gpus: np.ndarray
    workload: np.ndarray
    remaining: np.ndarray


class Pairs(NamedTuple):
    """The policy's pair table: ``allowed`` and ``p50`` (``n x n``), and flattened per pair (``i * n + j``,
    ``slo.pair_constants``) at the SLO's quantile ``ok``, ``q``, ``extra`` and at the benefit's ``gain``,
    ``stretch``; ``same_quantile`` where the two quantiles are one."""

    n: int
    allowed: np.ndarray
    p50: np.ndarray
    ok: np.ndarray
    q: np.ndarray
    extra: np.ndarray
    gain: np.ndarray
    stretch: np.ndarray
    same_quantile: bool


class Knobs(NamedTuple):
    """The numbers of one call: the time, the SLO, the restart cost, and ``Params``' numeric knobs."""

    now: float
    slo: float
    delay: float
    sharing_head: int
    preempt_ratio: float
    slack_share: float
    urgency: float
    max_preemptions: int
    srpt_head: int
    tolerance_s: float
    recheck_s: float
    share_fresh: int
    reserve_share: float
    forbidden: float


def gpus_of(cluster: ClusterState) -> Gpus:
    """The cluster's GPUs (``occupancy`` as the owner keeps it, else counted)."""
    occupancy = cluster.occupied if cluster.occupied is not None else readonly(cluster.occupancy())
    class_speed = cluster.class_speed if _has_classes(cluster) else cluster.speed[None, :]
    return Gpus(cluster.resident, occupancy, cluster.node, cluster.speed, class_speed,
                float(cluster.cross_node_slowdown))


def jobs_of(cluster: ClusterState) -> Jobs:
    job_class = cluster.job_class if _has_classes(cluster) else _NO_CLASS
    return Jobs(cluster.job_workload, cluster.job_remaining, cluster.job_work, cluster.job_start, cluster.job_ngpus,
                job_class)


def _has_classes(cluster: ClusterState) -> bool:
    """Whether GPU speeds depend on the job's class (``ClusterState.speed_of``)."""
    return cluster.class_speed is not None and cluster.job_class is not None


def waiting_of(queue: Queue) -> Waiting:
    return Waiting(queue.job, queue.gpus, queue.workload, queue.remaining)


@functools.lru_cache(maxsize=16)
def pairs_of(table: SlowdownTable, slo_quantile: str, quantile: str) -> Pairs:
    """The pair table at the two quantiles (cached per table: the table changes only when a pair is observed)."""
    ok, q, _, extra = pair_constants(table.allowed, getattr(table, slo_quantile))
    _, gain, stretch, _ = pair_constants(table.allowed, getattr(table, quantile))
    return Pairs(len(table), table.allowed, table.p50, ok, q, extra, gain, stretch, slo_quantile == quantile)


@functools.lru_cache(maxsize=16)
def unsure_of(table: SlowdownTable) -> np.ndarray:
    """Per workload pair, flattened: whether its slowdowns (either way) are predicted, not measured (p10 < p90)."""
    spread = table.allowed & (table.p10 != table.p90)
    return np.ascontiguousarray(spread | spread.T).ravel()


def knobs_of(params: Params, cluster: ClusterState, now: float, slo: float) -> Knobs:
    return Knobs(float(now), float(slo), float(cluster.preempt_delay_s), *params.numbers, FORBIDDEN)
