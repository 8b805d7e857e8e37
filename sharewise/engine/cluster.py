"""The simulated cluster: GPUs on nodes, their speed factors, and what spanning nodes or a restart costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sharewise.datasets.variability import GpuVariability
from sharewise.errors import ConfigError


@dataclass(frozen=True)
class Cluster:
    """GPUs to simulate: ``n_gpus`` on nodes of ``gpus_per_node``, each with a speed factor (1.0 = nominal).

    ``cross_node_slowdown`` divides the rate of a job whose GPUs span more than one node (1.0: no penalty);
    ``preempt_delay_s`` is what restarting a preempted job costs in exclusive run time (checkpoint restore),
    and what a job moved to other GPUs pays (a migration is a restart elsewhere). ``variability`` gives each
    GPU a speed per application class instead (PAL's measured factors: a job runs at 1 / its class's factor on
    each GPU); ``speeds`` and ``variability`` exclude each other.
    """

    n_gpus: int = 160
    gpus_per_node: int = 8
    speeds: tuple[float, ...] | None = None
    cross_node_slowdown: float = 1.0
    preempt_delay_s: float = 0.0
    variability: GpuVariability | None = None

    def __post_init__(self) -> None:
        if self.n_gpus < 1 or self.gpus_per_node < 1:
            raise ConfigError(
                f"a cluster needs at least one GPU and one GPU per node, got {self.n_gpus} GPUs with "
                f"{self.gpus_per_node} per node"
            )
        if self.speeds is not None:
            if len(self.speeds) != self.n_gpus:
                raise ConfigError(f"got {len(self.speeds)} GPU speeds for {self.n_gpus} GPUs")
            if not all(math.isfinite(s) and s > 0 for s in self.speeds):
                raise ConfigError("GPU speed factors must be positive finite numbers")
        if self.variability is not None:
            if self.speeds is not None:
                raise ConfigError("give GPU speeds as one speed per GPU or as per-class variability, not both")
            if self.variability.n_gpus != self.n_gpus:
                raise ConfigError(
                    f"got variability factors for {self.variability.n_gpus} GPUs, the cluster has {self.n_gpus}"
                )
        if not (math.isfinite(self.cross_node_slowdown) and self.cross_node_slowdown >= 1.0):
            raise ConfigError(f"cross-node slowdown must be >= 1.0, got {self.cross_node_slowdown}")
        if not (math.isfinite(self.preempt_delay_s) and self.preempt_delay_s >= 0.0):
            raise ConfigError(f"preemption delay must be a number of seconds >= 0, got {self.preempt_delay_s}")

    def speed_array(self) -> np.ndarray:
        """Return the speed factor of each GPU (with ``variability``: its class-blind speed, the geometric mean
        over classes)."""
        if self.variability is not None:
            return self.variability.gpu_speed()
        if self.speeds is None:
            return np.ones(self.n_gpus)
        return np.asarray(self.speeds, dtype=float)

    def node_array(self) -> np.ndarray:
        """Return the node index of each GPU."""
        return np.arange(self.n_gpus) // self.gpus_per_node


def seeded_speeds(n_gpus: int, sigma: float, seed: int) -> tuple[float, ...]:
    """Draw GPU speed factors from a log-normal distribution with median 1.0 (``Generator(seed)``)."""
    if sigma < 0:
        raise ConfigError(f"speed spread (sigma) must be >= 0, got {sigma}")
    rng = np.random.default_rng(seed)
    return tuple(float(x) for x in np.exp(rng.normal(0.0, sigma, size=n_gpus)))
