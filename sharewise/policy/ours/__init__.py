"""``sharewise``: ours. Shortest job first on free GPUs placed by effective speed, SLO-safe sharing where the gain
holds at the pessimistic end of the predicted interval, and SLO-guarded preemption of long jobs.

One module per mechanism, composed in ``sharewise`` below, in this order:

0. ``rescue``: where a shared pair, once measured, would break a job's SLO, the side whose pause helps is paused.
1. ``urgent``: a preempted job whose slack runs low restarts before anything else (on victims' GPUs if need be).
2. ``placement``: queued jobs start shortest first on free GPUs, the longest on the fastest placement; then
   ``sharing``: the head of the queue that found no free GPU joins a GPU holding one job where the SLO holds and
   it pays, by one assignment. ``reservation``: once a job that needs a large share of the cluster is the first in
   SJF order that cannot start, no start or join may delay its predicted start (EASY backfilling's reservation).
3. ``srpt``: a job still waiting may preempt jobs with several times its remaining run time that hold their GPUs
   alone, where the victims' SLO still holds after the wait (``victims``: the rule both 1 and 3 take GPUs by) and
   the reservation keeps its GPUs.
4. ``replacement``: where migrating is free, jobs running alone move to the GPUs fastest for them (PAL).

**Learning**: once a pair has run together its measured slowdown replaces the prediction (the simulator's
observation, on by default; a cluster measures its running jobs' throughput), so every later decision about that
pair is certain: p10 = p50 = p90 = measured. Pausing a long job costs it little of its SLO, where sharing costs
both jobs a slowdown for the whole time they share. The closed forms all steps use are in ``slo``, every knob in
``params.Params``, and the kernels' inputs in ``arrays``.
"""

from __future__ import annotations

from sharewise.engine.policy_types import ClusterState, Decision, Placement, Queue, as_decision
from sharewise.engine.table import SlowdownTable
from sharewise.policy.ours import placement, replacement, rescue, reservation, srpt, urgent
from sharewise.policy.ours.arrays import gpus_of, jobs_of, knobs_of, pairs_of, unsure_of
from sharewise.policy.ours.params import PARAMS, Params, with_knobs
from sharewise.policy.ours.sharing import release_times
from sharewise.policy.ours.stage import Stage, after, occupy

__all__ = ["PARAMS", "Params", "release_times", "sharewise"]


def sharewise(
    queue: Queue, cluster: ClusterState, table: SlowdownTable, now: float, *, params: Params = PARAMS, **knobs
) -> Decision | list[Placement]:
    """Rescue the SLO, restart urgent jobs, place on free GPUs, share, preempt for SRPT, re-place: the steps of
    the module docstring, with the knobs of ``params`` (any of them overridden by keyword, e.g.
    ``preempt=False``; ``Params`` says what each does and where its default came from).

    Returns
    -------
    Decision, or without ``preempt`` a list of Placement, e.g. ``Decision(start=[Placement(job=4, gpus=(17,))],
    preempt=(2,), wake_at=7200.0)``.
    """
    p = with_knobs(params, tuple(sorted(knobs.items()))) if knobs else params
    if not p.preempt and len(queue) == 0:
        return []
    slo = cluster.slo if p.max_slowdown is None else p.max_slowdown
    pairs, k, jobs = pairs_of(table, p.slo_quantile, p.quantile), knobs_of(p, cluster, now, slo), jobs_of(cluster)
    if not p.preempt:
        decision = placement.place(queue, gpus_of(cluster), jobs, pairs, k, p.share_order)[0]
    else:
        stage = Stage.of(queue, cluster)
        paused = rescue.pauses(stage, jobs, pairs, k) if p.rescue else []
        stage = after(stage, [], paused)
        restarted, stopped, wake = urgent.restarts(stage, jobs, k)
        stage = after(stage, restarted, stopped)
        placed, reserved = (placement.place(stage.queue, stage.gpus, jobs, pairs, k, p.share_order)
                            if len(stage.queue) else ([], reservation.NONE))
        if p.rescue and rescue.recheck(placed, stage, queue, unsure_of(table), pairs.n):
            wake = min(wake, now + p.tolerance_s)  # at the next call the cluster has seen the new pair run
        occupy(stage.occupancy, placed)
        start = restarted + placed
        taken, victims = srpt.preemptions(queue, start, paused + stopped, stage, jobs, k, reserved)
        decision = Decision(start=start + taken, preempt=tuple(paused + stopped + victims),
                            wake_at=max(wake, now + p.tolerance_s))
    if p.replace or (p.replace is None and cluster.preempt_delay_s == 0 and cluster.class_speed is not None):
        return replacement.replace_lone_jobs(as_decision(decision), queue, cluster)
    return decision


sharewise.preemptive = True  # the simulator calls it whenever jobs wait (it may stop running jobs)

sharewise.summary = (
    "Ours: shortest job first on free GPUs, placed by speed; a waiting job shares a GPU where the SLO holds at the "
    "pessimistic end of the predicted interval and sharing pays; SLO-guarded preemption of long jobs; nothing "
    "delays the predicted start of a waiting job of half the cluster or more once it is next."
)
