"""``pal``: PAL (Jain et al., SC'24): PM-First's variability-aware placement, weighed against locality."""

from __future__ import annotations

import numpy as np

from sharewise.engine import gpus
from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.table import SlowdownTable
from sharewise.policy.pm_first import by_sensitivity, start_on_free


def pal(
    queue: Queue,
    cluster: ClusterState,
    table: SlowdownTable,
    now: float,
    *,
    order: str = "sjf",
    locality_penalty: float | None = None,
) -> list[Placement]:
    """Start jobs exclusively; each gets the placement with the best effective speed, locality included.

    For a job of ``k`` GPUs the candidates are the ``k`` fastest free GPUs of each node that has ``k`` free,
    and the ``k`` fastest free GPUs anywhere. A candidate's effective speed is its slowest GPU's speed,
    divided by ``locality_penalty`` when it spans nodes (default: the cluster's cross-node slowdown). The best
    wins; ties go to fewer nodes, then to the node with fewer free GPUs (keeping whole nodes for big jobs).
    Jobs are chosen in ``order`` and placed most variability-sensitive first, as in ``pm-first``. Speeds are
    the GPUs' speeds for the job's class where the cluster has PAL's per-class variability
    (``ClusterState.speed_of``). PAL as its artifact defines it (FIFO, rounds, re-placement) is
    ``pal-artifact``.

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=2, gpus=(5,)), Placement(job=8, gpus=(8, 9, 10, 11))]``.
    """
    free, chosen = start_on_free(queue, cluster, order)
    if not chosen:
        return []
    penalty = cluster.cross_node_slowdown if locality_penalty is None else float(locality_penalty)
    placements = []
    for i in by_sensitivity(queue, chosen):
        k = int(queue.gpus[i])
        best = fastest_block(free, cluster.speed_of(int(queue.job[i])), cluster.node, k, penalty)
        free[best] = False
        placements.append(Placement(int(queue.job[i]), tuple(sorted(int(g) for g in best))))
    return placements


def fastest_block(free: np.ndarray, speed: np.ndarray, node: np.ndarray, k: int, penalty: float) -> np.ndarray:
    """Return the ``k`` free GPUs with the best effective speed (PAL's placement rule), fastest first.

    Candidates: the ``k`` fastest free GPUs of each node that has ``k`` free, and the ``k`` fastest free GPUs
    anywhere. A candidate's effective speed is its slowest GPU's speed, divided by ``penalty`` when it spans
    nodes; the best wins, ties going to fewer nodes, then to the node with fewer free GPUs (whole nodes stay
    free for big jobs). The caller makes sure ``k`` GPUs are free. The rule is compiled
    (``engine.gpus.fastest_block``), the one ``sharewise`` places its jobs by.
    """
    return gpus.fastest_block(~np.asarray(free, dtype=bool), speed, node, k, float(penalty))

# Exclusive: the simulator need not call it while no queued job fits on the free GPUs.
pal.shares_gpus = False
