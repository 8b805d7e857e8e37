"""Re-placement, ``sharewise``'s last step: where migration costs nothing, jobs running alone move to the GPUs that
are fastest for them, as PAL re-places every job at every round.

PAL's artifact re-places every running job each round at no cost, so a job that had to start on a GPU slow for
its class moves once a better one frees up, and a job of a class the GPU does not slow takes that GPU instead.
Our step does the same for the jobs that hold all their GPUs alone (a job sharing a GPU stays: its partner's
rate depends on it), after the rest of the call's decision:

- **Pool**: the GPUs free after the decision plus the GPUs of every job running alone.
- **Order**: the job that would lose most on a bad placement first: its remaining run time x (1 / slowest -
  1 / fastest) speed for its class over the pool (its *regret*); ties, and clusters where every GPU is
  equally fast, go longest remaining first (``by_sensitivity``'s order).
- **Where**: PAL's effective speed (``_gpus.fastest_block``: the slowest GPU for its class, over the cross-node
  slowdown when it spans nodes). A job whose GPUs are still in the pool and as fast as the best keeps them,
  so nothing moves without a gain.

A job that moves pays the cluster's restart cost (the simulator counts a migration), so ``sharewise`` takes this
step only where that cost is 0 (``Params.replace=None``, the default) or when told (``replace=True``).
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.gpus import effective_speed, fastest_block
from sharewise.engine.policy_types import ClusterState, Decision, Placement, Queue


def replace_lone_jobs(decision: Decision, queue: Queue, cluster: ClusterState) -> Decision:
    """Return ``decision`` with every job that runs alone after it re-placed on the fastest GPUs for it.

    A running job that moves is stopped and started again on its new GPUs in the returned decision; a job
    the decision starts gets its new GPUs directly. Example: a running job 3 on GPU 0 (slow for its class)
    with GPU 1 free gives ``Decision(start=[Placement(3, (1,))], preempt=(3,))``.
    """
    stopped = set(decision.preempt)
    gpus_of: dict[int, list[int]] = {}
    for g, j in zip(*np.nonzero(cluster.resident >= 0), strict=True):
        job = int(cluster.resident[g, j])
        if job not in stopped:
            gpus_of.setdefault(job, []).append(int(g))
    started = {int(p.job): list(p.gpus) for p in decision.start}
    gpus_of.update(started)
    holders = np.zeros(cluster.n_gpus, dtype=np.int64)
    for gs in gpus_of.values():
        holders[gs] += 1
    lone = [j for j, gs in gpus_of.items() if (holders[gs] == 1).all()]
    if not lone:
        return decision
    pool = holders == 0
    for j in lone:
        pool[gpus_of[j]] = True
    remaining = {int(j): float(r) for j, r in zip(queue.job, queue.remaining, strict=True) if int(j) in started}
    regret = {}
    for j in lone:
        rem = remaining.get(j, float(cluster.job_remaining[j]))
        speed = cluster.speed_of(j)[pool]
        regret[j] = (rem * (1.0 / speed.min() - 1.0 / speed.max()), rem, len(gpus_of[j]), -j)
    penalty = float(cluster.cross_node_slowdown)
    new: dict[int, tuple[int, ...]] = {}
    for j in sorted(lone, key=regret.__getitem__, reverse=True):
        speed, old = cluster.speed_of(j), np.asarray(gpus_of[j])
        best = fastest_block(~pool, speed, cluster.node, old.shape[0], penalty)
        if pool[old].all() and effective_speed(old, speed, cluster.node, penalty)[0] >= effective_speed(
            best, speed, cluster.node, penalty
        )[0]:
            best = old
        pool[best] = False
        new[j] = tuple(sorted(int(g) for g in best))
    moved = [j for j in lone if j not in started and new[j] != tuple(sorted(gpus_of[j]))]
    start = [Placement(p.job, new.get(int(p.job), p.gpus)) for p in decision.start]
    start += [Placement(j, new[j]) for j in sorted(moved)]
    return Decision(start=start, preempt=tuple(decision.preempt) + tuple(sorted(moved)), wake_at=decision.wake_at)

