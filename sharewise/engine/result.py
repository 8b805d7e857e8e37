"""What one run of a policy over a trace gives: per-job times and the metrics (simulated or physical)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sharewise.stats import percentile


@dataclass
class RunResult:
    """Per-job outcome of one policy run, simulated or physical (arrays follow the trace order), and its metrics."""

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

    @property
    def jct(self) -> np.ndarray:
        """Job completion time: finish minus arrival, seconds."""
        return self.finish - self.arrival

    def compute_metrics(self) -> dict:
        """Return ``{"avg_jct", "p95_jct", "makespan", "avg_queue", "utilization", "slo_violations",
        "preemptions", "migrations"}``.

        Example: ``{"avg_jct": 5400.0, "p95_jct": 20000.0, "makespan": 86400.0, "avg_queue": 120.0,
        "utilization": 0.81, "slo_violations": 3, "preemptions": 0, "migrations": 0}``
        """
        jct = self.jct
        makespan = float(self.finish.max() - self.arrival.min())
        return {
            "avg_jct": float(jct.mean()),
            "p95_jct": percentile(jct, 95),
            "makespan": makespan,
            "avg_queue": float((self.start - self.arrival).mean()),
            "utilization": float(self.busy_gpu_seconds / (self.n_gpus * makespan)) if makespan > 0 else 0.0,
            # A small tolerance so float noise on a job that ran exactly at the SLO is not a violation.
            "slo_violations": int((self.realized_slowdown > self.slo * (1 + 1e-9)).sum()),
            "preemptions": int(self.preemptions),
            "migrations": int(self.migrations),
        }


#: The name this type had while only the simulator made it; kept for code that imports it (0.1.x), to be removed.
SimulationResult = RunResult
