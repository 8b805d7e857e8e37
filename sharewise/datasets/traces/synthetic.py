"""Seeded synthetic traces for datasets that come without a trace of their own (a CPU campaign, the demo)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sharewise.datasets.traces import Trace
from sharewise.errors import TraceError


def synthetic_trace(
    workloads: Sequence[str],
    n_jobs: int,
    n_gpus: int,
    *,
    seed: int = 0,
    load: float = 1.6,
    median_duration_s: float = 1800.0,
    multi_gpu_share: float = 0.15,
) -> Trace:
    """Draw a trace over ``workloads`` that asks for ``load`` times the GPU-seconds of ``n_gpus`` GPUs.

    Durations are log-normal around ``median_duration_s`` (sigma 0.8), ``multi_gpu_share`` of the jobs ask
    for 2 GPUs and the rest for 1, and arrivals are Poisson at the rate that makes the requested work
    ``load`` times what the cluster can do, so queues form and sharing matters. Every draw comes from one
    ``numpy.random.Generator(seed)``.
    """
    if not workloads:
        raise TraceError("a synthetic trace needs at least one workload")
    if n_jobs < 1 or n_gpus < 1:
        raise TraceError(f"a synthetic trace needs at least one job and one GPU, got {n_jobs} and {n_gpus}")
    rng = np.random.default_rng(seed)
    duration = np.round(rng.lognormal(mean=np.log(median_duration_s), sigma=0.8, size=n_jobs), 1)
    gpus = np.where(rng.random(n_jobs) < 1.0 - multi_gpu_share, 1, 2).astype(np.int64)
    rate = load * n_gpus / float(np.mean(duration * gpus))
    arrival = np.round(np.cumsum(rng.exponential(1.0 / rate, size=n_jobs)), 1)
    arrival -= arrival[0]
    return Trace(
        job_id=np.array([f"job{i:04d}" for i in range(n_jobs)], dtype=object),
        arrival=arrival,
        duration=np.maximum(duration, 1.0),
        gpus=gpus,
        workload=rng.choice(np.asarray(list(workloads), dtype=object), size=n_jobs),
        line=np.arange(2, n_jobs + 2),
        source=f"synthetic(seed={seed}, load={load:g})",
        format="csv",
    )
