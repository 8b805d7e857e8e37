"""``sjf-ffs``: shortest job first, first-fit sharing (two jobs per GPU at most), no interference check."""

from __future__ import annotations

import numpy as np

from sharewise.engine.policy_types import ClusterState, Placement, Queue
from sharewise.engine.table import SlowdownTable
from sharewise.policy.occupancy import SharingState, place_in_order


def _first_fit(workloads: np.ndarray, remaining: np.ndarray, gpus: np.ndarray, state: SharingState):
    usable = state.table.allowed[workloads[:, None], state.partner_wl[gpus][None, :]]
    return usable, np.broadcast_to(gpus.astype(float), usable.shape)


def sjf_ffs(queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float) -> list[Placement]:
    """Shortest job first: on free GPUs if enough, else also on the first GPUs holding one job (no slowdown check).

    The only check is whether the pair may share at all (memory); the predicted slowdown is ignored. Free GPUs
    are taken first (on as few nodes as possible), then shared GPUs in index order (first fit).

    Returns
    -------
    list of Placement, e.g. ``[Placement(job=4, gpus=(17,))]``.
    """
    return place_in_order(queue, cluster, table, queue.remaining, _first_fit)
