"""Ours by mechanism, each on a case worked out by hand: sharing within the SLO at p90, waiting, SRPT
preemption, the SLO rescue, urgent restarts, the reservation for a large waiting job, and the knobs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from policy_cases import make_cluster, make_queue, table
from policy_oracles import shared_completion

from sharewise.engine.policy_types import as_decision
from sharewise.policy import Placement, get_policy
from sharewise.policy.ours import sharewise


# ---- ours ------------------------------------------------------------------------------------------
def test_shared_completion_hand_computed():
    from sharewise.policy.ours.slo import shared_ends

    c_a, c_b = shared_completion(np.array([2.0]), np.array([4.0]), np.array([1.5]), np.array([1.5]))
    assert (c_a[0], c_b[0]) == pytest.approx((3.0, 5.0))
    assert shared_ends(2.0, 4.0, 1.5, 1.5) == pytest.approx((3.0, 5.0))
    assert shared_ends(4.0, 2.0, 1.5, 1.5) == pytest.approx((5.0, 3.0))  # b ends first: a runs alone after


def _ours_case(p50, p90, e_a=100.0, e_b=10_000.0, slo=2.0, start_b=0.0, work_b=10_000.0, start_a=np.nan):
    remaining = np.zeros(20)
    remaining[0] = e_b
    workload = np.zeros(20, np.int64)
    workload[0] = 1
    start = np.full(20, np.nan)  # queued jobs never ran (the simulator's NaN)
    start[0], start[10] = start_b, start_a
    work = np.ones(20)
    work[0], work[10] = work_b, e_a
    cluster = make_cluster(
        [[0, -1]], 20, remaining=remaining, workload=workload, start=start, work=work, slo=slo
    )
    queue = make_queue([(10, e_a, 1, 0)])
    return sharewise(queue, cluster, table(p50, p90), 0.0, preempt=False)  # the sharing step alone


def test_sharewise_shares_within_the_slo_at_p90():
    p50 = np.array([[2.0, 1.3], [1.2, 2.0]])
    assert _ours_case(p50, p50 * 1.2) == [Placement(10, (0,))]
    # The newcomer would run 2.4x slower at p90: over the SLO of 2.
    assert _ours_case(p50, np.array([[2.0, 2.4], [1.2, 2.0]])) == []
    # The resident has (almost) used its budget: it ran 19,999.5 s for 10,000 s of work and has 1 s left.
    assert _ours_case(p50, p50 * 1.2, start_b=-19_999.5, e_b=1.0) == []
    assert _ours_case(p50, p50 * 1.2, start_b=-19_000.0, e_b=1.0) == [Placement(10, (0,))]


def test_sharewise_counts_what_a_preempted_joiner_has_spent():
    """A preempted job's realized slowdown counts from its first start, so joining must fit what is left of
    its budget. Here it ends first, at 1.56 x 100 = 156 s (p90); its budget is 2 x 100 - (time since its
    first start)."""
    p50 = np.array([[2.0, 1.3], [1.2, 2.0]])
    assert _ours_case(p50, p50 * 1.2, start_a=-40.0) == [Placement(10, (0,))]  # 160 s left
    assert _ours_case(p50, p50 * 1.2, start_a=-50.0) == []  # 150 s left


def _multi_join_case(start_short: float):
    """A 2-GPU job (workload 0, 100 s) and two residents alone on GPUs 0 and 1: job 0 (workload 1, 10,000 s
    left) and job 1 (workload 2, 1,000 s left of 1,500 s of work, started at ``start_short``)."""
    p = np.array([[2.0, 1.9, 1.2], [1.1, 2.0, 2.0], [1.1, 2.0, 2.0]])
    cluster = make_cluster(
        [[0, -1], [1, -1]], 20, remaining=[10_000.0, 1_000.0] + [0.0] * 18,
        workload=[1, 2] + [0] * 18, start=[0.0, start_short] + [np.nan] * 18,
        work=[10_000.0, 1_500.0] + [100.0] * 18,
    )
    queue = make_queue([(10, 100.0, 2, 0)])
    return sharewise(queue, cluster, table(p), 0.0, preempt=False)


def test_sharewise_checks_a_multi_gpu_joiner_over_all_its_residents():
    """Next to job 0 the joiner runs 1.9x slower, so it ends at 190 s, not the 120 s GPU 1's own check
    assumes next to job 1 (1.2x). Job 1 (1.1x next to it) then ends by 1,000 + 190 (1 - 1/1.1) = 1,017.3 s
    instead of 1,010.9 s. With job 1's budget at 3,000 - 1,985 = 1,015 s only the joint check refuses;
    at 3,000 - 1,900 = 1,100 s both hold."""
    assert _multi_join_case(-1_985.0) == []
    assert _multi_join_case(-1_900.0) == [Placement(10, (0, 1))]


def test_sharewise_does_not_join_a_job_that_shares_another_of_its_gpus():
    """Job 0 holds GPUs 0 and 1; it shares GPU 1 with job 1, so it runs slowed, not alone as GPU 0's check
    would picture it: GPU 0 is not offered to a newcomer. A job alone on all its GPUs is (GPU 2)."""
    p50 = np.array([[1.2, 1.2], [1.2, 1.2]])
    cluster = make_cluster(
        [[0, -1], [0, 1], [2, -1]], 20, remaining=[10_000.0, 10_000.0, 10_000.0] + [0.0] * 17,
        workload=[1] * 20, start=[0.0, 0.0, 0.0] + [np.nan] * 17, work=[10_000.0] * 3 + [100.0] * 17,
        ngpus=[2, 1, 1] + [1] * 17,
    )
    queue = make_queue([(10, 100.0, 1, 0), (11, 100.0, 1, 0)])
    assert sharewise(queue, cluster, table(p50), 0.0, preempt=False) == [Placement(10, (2,))]


def test_sharewise_waits_rather_than_stretching_a_long_job():
    # Sharing would stretch both jobs by thousands of seconds, while a GPU frees up at once (the resident
    # ends in 10 s): waiting is cheaper.
    p50 = np.array([[2.0, 1.9], [1.9, 2.0]])
    assert _ours_case(p50, p50, e_a=50_000.0, e_b=10.0, work_b=10.0) == []


def _preemption_case(victim_start=0.0, waiter=100.0, delay=0.0, now=1_000.0):
    """GPU 0 runs job 0 alone (10,000 s of work, 9,000 s left, started at ``victim_start``); job 10 (never
    started) waits for 1 GPU; sharing is forbidden, so only a preemption can start it now."""
    n = 20
    remaining, work, start = np.zeros(n), np.ones(n), np.full(n, np.nan)
    remaining[0], work[0], start[0] = 9_000.0, 10_000.0, victim_start
    cluster = dataclasses.replace(
        make_cluster([[0, -1]], n, remaining=remaining, work=work, start=start), preempt_delay_s=delay
    )
    queue = make_queue([(10, waiter, 1, 0)])
    return as_decision(sharewise(queue, cluster, table(np.full((1, 1), 1.5), allowed=np.zeros((1, 1), bool)), now))


def test_sharewise_preempts_a_long_job_for_a_short_one_while_the_slo_holds():
    # Job 0's slack at t = 1,000: 2 x 10,000 - 9,000 - (1,000 - 0) = 10,000 s; its urgency limit is
    # 0.5 x (2 - 1) x 10,000 = 5,000 s; waiting job 10's 100 s costs it 100 / 0.5 = 200 s of that, and
    # 9,000 s > 4 x 100 s: job 0 is paused for job 10.
    d = _preemption_case()
    assert d.preempt == (0,) and d.start == [Placement(10, (0,))]
    # Not for a job that is not much shorter: 9,000 s <= 4 x 3,000 s.
    assert _preemption_case(waiter=3_000.0).preempt == ()
    # Not when job 0 has spent its slack: it must keep slack - 200 > 5,000, and its slack is
    # 20,000 - 9,000 - (1,000 - first start), so the first start must be after -4,800.
    assert _preemption_case(victim_start=-4_900.0).preempt == ()
    assert _preemption_case(victim_start=-4_700.0).preempt == (0,)
    # A restart cost counts on both sides: 9,000 > 4 x 100 + 1,000, slack 9,000 - 1,100 / 0.5 > 5,000.
    assert _preemption_case(delay=1_000.0).preempt == (0,)
    assert _preemption_case(delay=6_000.0).preempt == ()  # 9,000 <= 4 x 100 + 6,000
    # Off, the policy never stops a job.
    queue = make_queue([(10, 100.0, 1, 0)])
    cluster = make_cluster([[0, -1]], 20, remaining=np.full(20, 9_000.0), work=np.full(20, 10_000.0))
    tab = table(np.full((1, 1), 1.5), allowed=np.zeros((1, 1), bool))
    assert sharewise(queue, cluster, tab, 1_000.0, preempt=False) == []


def test_sharewise_knobs_are_one_frozen_params_object_overridden_by_keyword():
    """Every knob is a field of ``Params``; a keyword overrides one (so an ablation or a sweep is a
    ``functools.partial`` of the registered function), an unknown one is refused naming the known ones. The
    preemption ratio, editable only in source before: job 10's 2,400 s is too long to pause job 0 (9,000 s
    left) at the default ratio 4 (9,000 <= 4 x 2,400), not at 2 (9,000 > 2 x 2,400, and job 0 keeps its
    urgency slack: 10,000 - 2,400 / 0.5 = 5,200 > 5,000)."""
    import functools

    from sharewise.policy.ours import PARAMS, Params

    n = 20
    remaining, work, start = np.zeros(n), np.ones(n), np.full(n, np.nan)
    remaining[0], work[0], start[0] = 9_000.0, 10_000.0, 0.0
    cluster = make_cluster([[0, -1]], n, remaining=remaining, work=work, start=start)
    queue = make_queue([(10, 2_400.0, 1, 0)])
    tab = table(np.full((1, 1), 1.5), allowed=np.zeros((1, 1), bool))
    assert as_decision(sharewise(queue, cluster, tab, 1_000.0)).preempt == ()
    sweep = functools.partial(get_policy("sharewise"), preempt_ratio=2.0)
    assert as_decision(sweep(queue, cluster, tab, 1_000.0)).preempt == (0,)
    assert as_decision(sharewise(queue, cluster, tab, 1_000.0, params=Params(preempt_ratio=2.0))).preempt == (0,)
    assert sharewise(queue, cluster, tab, 1_000.0, preempt=False) == []
    with pytest.raises(TypeError, match="no knob head; its knobs are .*preempt_ratio"):
        sharewise(queue, cluster, tab, 1_000.0, head=32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PARAMS.urgency = 0.3
    with pytest.raises(ValueError, match="quantile must be 'p10', 'p50' or 'p90', got 'p95'"):
        Params(quantile="p95")
    assert PARAMS.sharing_head == 24 and PARAMS.srpt_head == 32  # two heads, named for what each bounds


def _rescue_case(s_ab, s_ba, work_b=1_000.0, queue_rows=(), start_a=-1_000.0, gpus=1, placed_at=None):
    """GPU 0 (and with ``gpus=2`` GPU 1: two 2-GPU jobs) holds job 0 (workload a: 10,000 s of work, 9,000 s
    left, first started at ``start_a``) and job 1, which just joined it (workload b: ``work_b`` s of work,
    all left, started now); the table holds the pair's measured slowdowns (a next to b ``s_ab``, b next to
    a ``s_ba``); workload c may share with nobody."""
    n = 20
    remaining, work, start = np.zeros(n), np.ones(n), np.full(n, np.nan)
    remaining[:2], work[:2], start[:2] = (9_000.0, work_b), (10_000.0, work_b), (start_a, 0.0)
    workload = np.zeros(n, np.int64)
    workload[1] = 1
    ngpus = np.ones(n, np.int64)
    ngpus[:2] = gpus
    cluster = make_cluster(
        [[0, 1]] * gpus, n, remaining=remaining, work=work, start=start, workload=workload, ngpus=ngpus
    )
    if placed_at is not None:
        cluster = dataclasses.replace(cluster, placed_at=np.full(gpus, placed_at))
    p = np.array([[1.5, s_ab, 1.5], [s_ba, 1.5, 1.5], [1.5, 1.5, 1.5]])
    allowed = np.array([[True, True, False], [True, True, False], [False, False, False]])
    return as_decision(sharewise(make_queue(queue_rows), cluster, table(p, allowed=allowed), 0.0))


def test_sharewise_pauses_a_sharing_job_once_the_pair_breaks_the_slo():
    # Measured 1.2 (a) and 3.0 (b): sharing on, b ends at 3 x 1,000 = 3,000 s, realized 3.0 > 2. Pausing b
    # until a ends breaks b's SLO too ((9,000 + 1,000) / 1,000 = 10); pausing a until b ends (1,000 s) keeps
    # both: b 1.0, a (1,000 + 1,000 + 9,000) / 10,000 = 1.1. So a, the resident, is paused, with or without
    # a job waiting (the policy asks to be woken after a join to check the pair).
    d = _rescue_case(1.2, 3.0)
    assert d.preempt == (0,) and d.start == []
    assert _rescue_case(1.2, 3.0, queue_rows=[(10, 50_000.0, 1, 2)]).preempt == (0,)
    # Measured 1.5 and 1.5: b ends at 1,500 s (1.5), a at 1,500 + 9,000 - 1,500 / 1.5 = 9,500 s from now,
    # (1,000 + 9,500) / 10,000 = 1.05: both hold, the pair shares on.
    assert _rescue_case(1.5, 1.5).preempt == ()
    # a is hurt (5.0) by a long b (20,000 s, 1.1): b ends at 22,000 s, a at 22,000 + 9,000 - 22,000 / 5 =
    # 26,600 s, (1,000 + 26,600) / 10,000 = 2.76 > 2. Pausing b: a 1.0, b (9,000 + 20,000) / 20,000 = 1.45,
    # both hold; pausing a: a (1,000 + 20,000 + 9,000) / 10,000 = 3.0. So b, the joiner, is paused.
    assert _rescue_case(5.0, 1.1, work_b=20_000.0).preempt == (1,)
    # Where the cluster says when each GPU's newest job came, only pairs formed in the last 2 s are checked:
    # one formed 1 s ago is (the wake-up after a join comes 1 s after it), one formed an hour ago passed the
    # check when it was first measured.
    assert _rescue_case(1.2, 3.0, placed_at=-1.0).preempt == (0,)
    assert _rescue_case(1.2, 3.0, placed_at=-3_600.0).preempt == ()
    # Two 2-GPU jobs sharing both GPUs are checked alike: a is paused (1.1).
    assert _rescue_case(1.2, 3.0, gpus=2).preempt == (0,)
    # With a first started at -6,000, pausing it leaves it at (6,000 + 1,000 + 9,000) / 10,000 = 1.6: within
    # the SLO, so a single-GPU a is paused; a multi-GPU job must also stay out of urgency, 2 - 0.5 x (2 - 1)
    # = 1.5 (getting all its GPUs back may take longer), so the 2-GPU pair shares on.
    assert _rescue_case(1.2, 3.0, start_a=-6_000.0).preempt == (0,)
    assert _rescue_case(1.2, 3.0, start_a=-6_000.0, gpus=2).preempt == ()
    # A hub: 2-GPU job 0 (a) shares GPU 0 with job 1 and GPU 1 with job 2 (b, 1,000 s each, just joined).
    # Sharing on, job 0 ends by 1.2 x 9,000 = 10,800 s (1.18) and each b by min(3 x 1,000, 1,000 + 10,800 x
    # (1 - 1/3)) = 3,000 s (3.0): two over the SLO. Pausing both b: 10 each. Pausing job 0 until the last b
    # ends: the b 1.0, job 0 (1,000 + 1,000 + 9,000) / 10,000 = 1.1, within 1.5: job 0 is paused.
    n = 20
    remaining, work, start = np.zeros(n), np.ones(n), np.full(n, np.nan)
    remaining[:3], work[:3], start[:3] = (9_000.0, 1_000.0, 1_000.0), (10_000.0, 1_000.0, 1_000.0), (-1_000.0, 0, 0)
    workload, ngpus = np.ones(n, np.int64), np.ones(n, np.int64)
    workload[0], ngpus[0] = 0, 2
    cluster = make_cluster(
        [[0, 1], [0, 2]], n, remaining=remaining, work=work, start=start, workload=workload, ngpus=ngpus
    )
    p = np.array([[1.5, 1.2], [3.0, 1.5]])
    assert as_decision(sharewise(make_queue([]), cluster, table(p), 0.0)).preempt == (0,)
    # Without preemption the policy never stops a job.
    n = 20
    cluster = make_cluster([[0, 1]], n, remaining=np.full(n, 1_000.0), work=np.full(n, 1_000.0), start=np.zeros(n))
    assert sharewise(make_queue([]), cluster, table(np.full((1, 1), 3.0)), 0.0, preempt=False) == []


def test_sharewise_restarts_a_preempted_job_before_its_slack_runs_out():
    # GPU 1 is free; job 0 (preempted: first start at s0, 10,000 s of work, 5,000 s left) and job 11 (50 s,
    # never started) wait; GPU 0 runs job 1 (150 s left: too short to preempt for either).
    def case(s0):
        n = 20
        remaining, work, start = np.zeros(n), np.ones(n), np.full(n, np.nan)
        remaining[1], work[1], start[1] = 150.0, 600.0, -100.0
        work[0], start[0] = 10_000.0, s0
        cluster = make_cluster([[1, -1], [-1, -1]], n, remaining=remaining, work=work, start=start)
        queue = make_queue([(0, 5_000.0, 1, 0), (11, 50.0, 1, 0)])
        tab = table(np.full((1, 1), 1.5), allowed=np.zeros((1, 1), bool))
        return as_decision(sharewise(queue, cluster, tab, 0.0))

    # s0 = -12,000: slack 20,000 - 5,000 - 12,000 = 3,000 s <= its limit 0.5 x 10,000 (+1 s): urgent, so
    # job 0 takes the free GPU ahead of the shorter job 11.
    d = case(-12_000.0)
    assert d.start == [Placement(0, (1,))] and d.preempt == ()
    # s0 = -1,000: slack 14,000 s, not urgent: shortest first, and a wake-up when job 0 becomes urgent,
    # 14,000 - 5,001 = 8,999 s from now.
    d = case(-1_000.0)
    assert d.start == [Placement(11, (1,))] and d.preempt == ()
    assert d.wake_at == pytest.approx(8_999.0)




def _one_resident(gpus, resident_work, waiting_work):
    """A cluster of 20 job slots whose job 0 (workload a, ``resident_work`` s in all) started at -5 s and has 10 s
    left, on the GPUs ``gpus`` describes; jobs 10 and 11 wait with ``waiting_work`` s of work each."""
    remaining = np.zeros(20)
    remaining[0] = 10.0
    start = np.full(20, np.nan)
    start[0] = -5.0
    work = np.ones(20)
    work[0], work[10], work[11] = resident_work, *waiting_work
    return make_cluster(gpus, 20, remaining=remaining, start=start, work=work)


def _two_joiners(**knobs):
    """One GPU whose job (workload a, 10 s left) runs alone; two jobs wait: 12 s of workload b, 25 s of c. By
    hand (p50 = p90; ``shared_ends``): the resident ends first next to either, so its stretch decides. Next to b:
    10 x (2 x 1.2 - 1 - 1.2/1.6) = 6.5 s, saving 10 - 6.5 = 3.5 s; next to c: 10 x (2 x 1.05 - 1 - 1) = 1.0 s,
    saving 9.0 s. Both save; the shorter job is b."""
    p50 = np.array([[1.0, 1.2, 1.05], [1.6, 1.0, 1.0], [1.05, 1.0, 1.0]])
    cluster = _one_resident([[0, -1]], 15.0, (12.0, 25.0))
    queue = make_queue([(10, 12.0, 1, 1), (11, 25.0, 1, 2)])
    return sharewise(queue, cluster, table(p50), 5.0, preempt=False, **knobs)


def test_the_shortest_waiting_job_joins_first_as_sjf_bsbf_orders_them():
    # Issue 41: shortest waiting job first (as SJF-BSBF), each where it saves most; the summed-saving assignment
    # gave the GPU to the 25 s job, leaving the 12 s one to wait behind it.
    assert _two_joiners() == [Placement(10, (0,))]
    assert _two_joiners(share_order="sum") == [Placement(11, (0,))]
    with pytest.raises(ValueError, match="share_order"):
        _two_joiners(share_order="best")


def test_a_gpu_taken_in_this_call_is_busy_in_the_joiners_alternative():
    """Two GPUs: GPU 0 free, GPU 1 holding job 0 (workload a, 10 s left, alone). Jobs 10 (5 s) and 11 (12 s,
    workload b) wait. Step 1 starts job 10 on GPU 0; job 11's alternative to joining is its turn at the GPUs'
    releases: GPU 0 frees when job 10 ends (5 s), not now, and GPU 1 at 10 s. By hand (p50 = p90 = 1.2 both
    ways): job 11 ends after the resident: stretch 10 x (2 x 1.2 - 1 - 1) = 4 s; its wait is its turn, 5 s; it
    saves 1 s and joins GPU 1. Counting GPU 0 as free (release 0), it would save -4 s and wait."""
    p50 = np.array([[1.2, 1.2, 1.0], [1.2, 1.2, 1.0], [1.0, 1.0, 1.0]])
    cluster = _one_resident([[-1, -1], [0, -1]], 15.0, (5.0, 12.0))
    queue = make_queue([(10, 5.0, 1, 2), (11, 12.0, 1, 1)])
    got = sharewise(queue, cluster, table(p50), 5.0, preempt=False)
    assert got == [Placement(10, (0,)), Placement(11, (1,))]


def _fresh_case(gpus, **knobs):
    """``gpus`` as ``make_cluster`` takes them (job 0, workload c, shares with nobody: 100 s left); jobs 10 (10 s,
    workload a) and 11 (12 s, workload b) wait. By hand (p50 = p90 = 1.2 between a and b, SLO 2): step 1 starts
    job 10 on the free GPU 0. Job 11 next to it: the resident ends first (1.2 x 10 = 12 <= 1.2 x 12), stretch
    10 x (2 x 1.2 - 1 - 1) = 4 s; its alternative is job 10's end, 10 s: it saves 6 s, and both keep the SLO
    (12 <= 2 x 10; 12 + 10 x 1.2 x (1 - 1/1.2) = 14 <= 2 x 12)."""
    remaining, work, start = np.zeros(20), np.ones(20), np.full(20, np.nan)
    remaining[0], work[0], start[0] = 100.0, 100.0, 0.0
    work[10], work[11] = 10.0, 12.0
    workload = np.zeros(20, np.int64)
    workload[0] = 2
    cluster = make_cluster(gpus, 20, remaining=remaining, start=start, work=work, workload=workload)
    p50 = np.full((3, 3), 1.2)
    allowed = np.array([[True, True, False], [True, True, False], [False, False, False]])
    queue = make_queue([(10, 10.0, 1, 0), (11, 12.0, 1, 1)])
    return sharewise(queue, cluster, table(p50, allowed=allowed), 5.0, preempt=False, **knobs)


def test_a_job_started_on_an_idle_cluster_is_joined_at_once_as_sjf_bsbf_pairs():
    # Issue 41's six-job trace: on an idle GPU the next call would come only when job 10 ends, so offering it
    # "from the next call on" made the queue take turns where SJF-BSBF pairs (47.24 s against 41.49 s).
    both = [Placement(10, (0,)), Placement(11, (0,))]
    assert _fresh_case([[-1, -1]]) == both
    assert _fresh_case([[-1, -1]], share_fresh="next-call") == [Placement(10, (0,))]
    # Where another job runs, its end brings the next call: job 10 is offered then (or at once with "always").
    busy = [[-1, -1], [0, -1]]
    assert _fresh_case(busy) == [Placement(10, (0,))]
    assert _fresh_case(busy, share_fresh="always") == both
    with pytest.raises(ValueError, match="share_fresh must be one of 'next-call', 'idle', 'always', got 'now'"):
        _fresh_case(busy, share_fresh="now")


def _reserved_case(resident, remaining, queue_rows, **knobs):
    """Residents of workload a (job ``j`` on ``resident``'s GPUs, ``remaining[j]`` s left, started now with that
    much work: their SLO holds next to a joiner); the queue's 4-GPU job (workload b, which shares with nobody) is
    the first in SJF order that cannot start. Slowdowns 1.2 both ways between a's."""
    rem, work, start = np.zeros(20), np.ones(20), np.full(20, np.nan)
    rem[: len(remaining)], work[: len(remaining)], start[: len(remaining)] = remaining, remaining, 0.0
    for job, r, _, _ in queue_rows:
        work[job] = r
    cluster = make_cluster(resident, 20, remaining=rem, start=start, work=work)
    allowed = np.array([[True, False], [False, False]])
    queue = make_queue(queue_rows)
    return sharewise(queue, cluster, table(np.full((2, 2), 1.2), allowed=allowed), 0.0, preempt=False, **knobs)


def test_a_large_waiting_job_is_not_delayed_by_starts_on_free_gpus():
    """GPU 0 frees at 100 s, GPU 1 at 300 s, GPUs 2 and 3 are free; H (job 10: 50 s on 4 GPUs) is first in SJF
    order and cannot start: its shadow time is 300 s (its 4th GPU), with no spare GPU. X (job 11, 80 s) ends by then
    and starts; Y (job 12, 400 s) would hold a GPU H counts on until 400 s: it waits (joining GPU 0 or 1 it would
    still run at 400 + 100 x 1.2 x (1 - 1/1.2) = 420 s or 400 + 300 x 0.2 = 460 s). Without the reservation both
    start, the longer first on the first free GPU. A fifth GPU freeing at 300 s is spare: Y takes it."""
    rows = [(10, 50.0, 4, 1), (11, 80.0, 1, 0), (12, 400.0, 1, 0)]
    four = [[0, -1], [1, -1], [-1, -1], [-1, -1]]
    assert _reserved_case(four, [100.0, 300.0], rows) == [Placement(11, (2,))]
    both = [Placement(12, (2,)), Placement(11, (3,))]
    assert _reserved_case(four, [100.0, 300.0], rows, reserve_share=math.inf) == both
    assert _reserved_case(four + [[2, -1]], [100.0, 300.0, 300.0], rows) == both
    # 4 of 5 GPUs is a large share at 0.5, not at 0.9 (and a one-GPU job is never reserved).
    assert _reserved_case(four + [[2, -1]], [100.0, 300.0, 300.0], rows, reserve_share=0.9) == both
    with pytest.raises(ValueError, match="reserve_share must be > 0"):
        _reserved_case(four, [100.0, 300.0], rows, reserve_share=0.0)


def test_a_large_waiting_job_is_not_delayed_by_a_pair():
    """Every GPU busy: jobs 0-3 end at 100, 300, 300 and 500 s; H (4 GPUs) cannot start before 500 s. W (job 11,
    200 s) joins GPU 0 either way: by hand the resident ends first (1.2 x 100 < 1.2 x 200), stretch 100 x 0.4 = 40 s
    against its turn at 100 s, saving 60 s; the pair is done by 200 + 100 x 0.2 = 220 s, before 500 s. Y (job 12,
    1,000 s) saves 300 - 300 x 0.4 = 180 s on GPU 1, but that pair would hold GPU 1 until 1,000 + 300 x 0.2 =
    1,060 s, and on any GPU past 500 s: with the reservation it waits."""
    rows = [(10, 50.0, 4, 1), (11, 200.0, 1, 0), (12, 1_000.0, 1, 0)]
    busy = [[0, -1], [1, -1], [2, -1], [3, -1]]
    remaining = [100.0, 300.0, 300.0, 500.0]
    assert _reserved_case(busy, remaining, rows) == [Placement(11, (0,))]
    assert _reserved_case(busy, remaining, rows, reserve_share=math.inf) == [Placement(11, (0,)), Placement(12, (1,))]
