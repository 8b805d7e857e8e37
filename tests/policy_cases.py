"""Small literal cases the policy tests build on: a three-workload table, a queue and a cluster from rows."""

from __future__ import annotations

import numpy as np

from sharewise.engine.policy_types import ClusterState, Queue
from sharewise.engine.table import SlowdownTable

WORKLOADS = ["a", "b", "c"]


def table(p50: np.ndarray, p90: np.ndarray | None = None, allowed: np.ndarray | None = None) -> SlowdownTable:
    p50 = np.asarray(p50, float)
    p90 = p50 if p90 is None else np.asarray(p90, float)
    allowed = np.ones(p50.shape, bool) if allowed is None else allowed
    names = WORKLOADS[: p50.shape[0]]
    return SlowdownTable(names, p50, p50, p90, allowed, device_name="gpu-x", source="test")


def make_queue(rows) -> Queue:
    """rows: (job, remaining, gpus, workload id), in arrival order."""
    rows = list(rows)
    return Queue(
        job=np.array([r[0] for r in rows], np.int64),
        arrival=np.arange(len(rows), dtype=float),
        gpus=np.array([r[2] for r in rows], np.int64),
        remaining=np.array([r[1] for r in rows], float),
        workload=np.array([r[3] for r in rows], np.int64),
        attained=np.array([r[4] if len(r) > 4 else 0.0 for r in rows], float),
    )


def make_cluster(
    resident,
    n_jobs=100,
    remaining=None,
    workload=None,
    speed=None,
    node=None,
    start=None,
    work=None,
    slo=2.0,
    cross=1.0,
    attained=None,
    ngpus=None,
) -> ClusterState:
    resident = np.asarray(resident, np.int64).reshape(-1, 2)
    g = resident.shape[0]
    return ClusterState(
        resident=resident,
        node=np.zeros(g, np.int64) if node is None else np.asarray(node, np.int64),
        speed=np.ones(g) if speed is None else np.asarray(speed, float),
        job_remaining=np.zeros(n_jobs) if remaining is None else np.asarray(remaining, float),
        job_workload=np.zeros(n_jobs, np.int64) if workload is None else np.asarray(workload, np.int64),
        job_ngpus=np.ones(n_jobs, np.int64) if ngpus is None else np.asarray(ngpus, np.int64),
        job_start=np.zeros(n_jobs) if start is None else np.asarray(start, float),
        job_work=np.ones(n_jobs) if work is None else np.asarray(work, float),
        cross_node_slowdown=cross,
        slo=slo,
        job_attained=np.zeros(n_jobs) if attained is None else np.asarray(attained, float),
        job_arrival=np.zeros(n_jobs),
    )




def random_state(seed: int):
    rng = np.random.default_rng(seed)
    n_gpus, n_jobs = 12, 80
    resident = np.full((n_gpus, 2), -1)
    next_job = 0
    job_remaining = np.zeros(n_jobs)
    job_workload = rng.integers(0, 3, n_jobs)
    for g in range(n_gpus):
        for slot in range(int(rng.integers(0, 3))):
            resident[g, slot] = next_job
            job_remaining[next_job] = rng.uniform(10, 1000)
            next_job += 1
    queued = np.arange(next_job, next_job + 25)
    queue = Queue(
        job=queued,
        arrival=np.sort(rng.uniform(0, 100, 25)),
        gpus=rng.choice([1, 1, 1, 2, 4], 25),
        remaining=rng.uniform(10, 1000, 25),
        workload=job_workload[queued],
        attained=np.zeros(25),
    )
    cluster = make_cluster(
        resident,
        n_jobs,
        remaining=job_remaining,
        workload=job_workload,
        speed=rng.uniform(0.8, 1.0, n_gpus),
        node=np.arange(n_gpus) // 4,
        start=np.zeros(n_jobs),
        work=job_remaining * 1.2,
        cross=1.2,
        attained=rng.uniform(0, 8000, n_jobs),
    )
    p50 = rng.uniform(1.0, 2.2, (3, 3))
    allowed = np.ones((3, 3), bool)
    allowed[1, 2] = allowed[2, 1] = False
    return queue, cluster, table(p50, p50 * 1.15, allowed)
