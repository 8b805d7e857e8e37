"""What one run of a policy over a trace gives: per-job times, states and the metrics (simulated or physical)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sharewise.engine.world import DONE
from sharewise.stats import percentile

#: The per-job metrics, averaged over the jobs that finished (``RunResult.compute_metrics``).
PER_JOB = ("avg_jct", "p95_jct", "avg_queue", "slo_violations")


@dataclass
class RunResult:
    """Per-job outcome of one policy run, simulated or physical (arrays follow the trace order), and its metrics.

    ``status`` holds each job's state at the end (``engine.world.DONE``, ``FAILED``; a physical run stopped early
    leaves others), ``restarts`` how often each job started again after a preemption, ``gpus`` how many GPUs each
    asked for (None where the maker did not say: every job counts as done).
    """

    policy: str
    arrival: np.ndarray
    duration: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    realized_slowdown: np.ndarray
    busy_gpu_seconds: float
    n_gpus: int
    slo: float
    wall_s: float = 0.0
    policy_calls: int = 0
    events: int = 0
    preemptions: int = 0
    migrations: int = 0
    metrics: dict = field(default_factory=dict)
    shared: np.ndarray | None = None  # per job, whether it ever had a partner on one of its GPUs (None: unknown)
    status: np.ndarray | None = None
    restarts: np.ndarray | None = None
    gpus: np.ndarray | None = None

    @property
    def jct(self) -> np.ndarray:
        """Job completion time: finish minus arrival, seconds."""
        return self.finish - self.arrival

    def done(self) -> np.ndarray:
        """Which jobs finished done (every job where ``status`` is None)."""
        if self.status is None:
            return np.ones(self.arrival.shape[0], dtype=bool)
        return self.status == DONE

    def compute_metrics(self) -> dict:
        """Return ``{"avg_jct", "p95_jct", "makespan", "avg_queue", "utilization", "slo_violations",
        "preemptions", "migrations"}``.

        The per-job averages (JCT, p95 JCT, queueing, SLO violations) are over the jobs that finished done
        (``done``; NaN, and no violation, where none did); the makespan, utilization and counts are those of the
        whole run.

        Example: ``{"avg_jct": 5400.0, "p95_jct": 20000.0, "makespan": 86400.0, "avg_queue": 120.0,
        "utilization": 0.81, "slo_violations": 3, "preemptions": 0, "migrations": 0}``
        """
        makespan = float(self.finish.max() - self.arrival.min())
        done = self.done()
        keep = slice(None) if done.all() else done
        jct, queue, realized = self.jct[keep], (self.start - self.arrival)[keep], self.realized_slowdown[keep]
        finished = bool(jct.shape[0])
        return {
            "avg_jct": float(jct.mean()) if finished else math.nan,
            "p95_jct": percentile(jct, 95) if finished else math.nan,
            "makespan": makespan,
            "avg_queue": float(queue.mean()) if finished else math.nan,
            "utilization": float(self.busy_gpu_seconds / (self.n_gpus * makespan)) if makespan > 0 else 0.0,
            # A small tolerance so float noise on a job that ran exactly at the SLO is not a violation.
            "slo_violations": int((realized > self.slo * (1 + 1e-9)).sum()),
            "preemptions": int(self.preemptions),
            "migrations": int(self.migrations),
        }

    def to_json(self) -> dict:
        """Every field as JSON values (arrays as lists, NaN in them as None); ``from_json`` takes it back.

        Example: ``{"policy": "sharewise", "arrival": [0.0, 2.5], ..., "finish": [41.2, None], "busy_gpu_seconds":
        60.3, "n_gpus": 1, "slo": 2.0, ..., "status": [3, 4], "restarts": [0, 1], "gpus": [1, 1]}``.
        """
        out = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value = [None if isinstance(x, float) and math.isnan(x) else x for x in value.tolist()]
            out[name] = value
        return out

    @classmethod
    def from_json(cls, data: dict) -> RunResult:
        """The result ``to_json`` wrote."""
        arrays = {"arrival": float, "duration": float, "start": float, "finish": float, "realized_slowdown": float,
                  "shared": bool, "status": np.int8, "restarts": np.int64, "gpus": np.int64}
        kwargs = {}
        for name, value in data.items():
            if name in arrays and value is not None:
                kind = arrays[name]
                value = np.array([math.nan if x is None else x for x in value] if kind is float else value, dtype=kind)
            kwargs[name] = value
        return cls(**kwargs)


#: The name this type had while only the simulator made it; kept for code that imports it (0.1.x), to be removed.
SimulationResult = RunResult
