"""Policies (invariants over the registry, SJF-BSBF by hand, ours), the slowdown table, and ``recommend``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from policy_oracles import shared_completion

from sharewise.engine.interface import ClusterState, Queue, as_decision, check_placements, smallest_first
from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, DatasetError, SchemaError, TraceError, UnknownWorkloadError
from sharewise.planner.pairing import plan_pairs
from sharewise.policy import REGISTRY, Placement, get_policy, policy_names
from sharewise.policy.ours import sharewise
from sharewise.policy.pal import pal
from sharewise.policy.pm_first import pm_first
from sharewise.policy.sjf_bsbf import sharing_times, sjf_bsbf
from sharewise.predictor.memory import memory_fit

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


# ---- registry and invariants ------------------------------------------------------------------------
def test_registry_names_and_unknown_policy():
    assert policy_names() == [
        "exclusive-fifo-strict",
        "exclusive-fifo-backfill",
        "exclusive-sjf",
        "tiresias",
        "sjf-ffs",
        "sjf-bsbf",
        "packed-sticky",
        "pm-first",
        "pal",
        "packed-sticky-artifact",
        "packed-non-sticky",
        "pm-first-artifact",
        "pal-artifact",
        "sharewise",
    ]
    with pytest.raises(ConfigError, match="known policies: exclusive-fifo-backfill, exclusive-fifo-strict"):
        get_policy("round-robin")


def _random_state(seed: int):
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


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", range(6))
def test_policy_invariants(name, seed):
    queue, cluster, tab = _random_state(seed)
    policy = get_policy(name)
    decision = as_decision(policy(queue, cluster, tab, 50.0))
    if decision.preempt:  # a preemptive policy: check its placements on the cluster after the stops
        assert getattr(policy, "preemptive", False), f"{name} preempts but is not marked preemptive"
        resident = np.where(np.isin(cluster.resident, decision.preempt), -1, cluster.resident)
        resident = np.sort(resident, axis=1)[:, ::-1]  # slot 0 fills first
        cluster = dataclasses.replace(cluster, resident=resident)
        # Stopped jobs return to the queue (as the simulator does), so a policy may place them again.
        stopped = np.array(sorted(decision.preempt), dtype=np.int64)
        both = np.concatenate([queue.job, stopped])
        order = np.argsort(both)
        queue = Queue(
            job=both[order],
            arrival=np.concatenate([queue.arrival, cluster.job_arrival[stopped]])[order],
            gpus=np.concatenate([queue.gpus, cluster.job_ngpus[stopped]])[order],
            remaining=np.concatenate([queue.remaining, cluster.job_remaining[stopped]])[order],
            workload=np.concatenate([queue.workload, cluster.job_workload[stopped]])[order],
            attained=np.concatenate([queue.attained, cluster.job_attained[stopped]])[order],
        )
    placements = decision.start
    # Valid: each job queued and placed once, as many GPUs as asked, at most two jobs per GPU, allowed pairs.
    check_placements(placements, queue, cluster, tab, name)
    jobs = [p.job for p in placements]
    assert len(jobs) == len(set(jobs))
    occupancy = cluster.occupancy().copy()
    for p in placements:
        occupancy[list(p.gpus)] += 1
    assert occupancy.max() <= 2
    # Deterministic: the same inputs give the same placements.
    queue2, cluster2, tab2 = _random_state(seed)
    assert as_decision(policy(queue2, cluster2, tab2, 50.0)).start == placements
    if name.startswith("exclusive") or name in ("pm-first", "pal", "packed-sticky", "tiresias") or "artifact" in name:
        assert all(cluster.occupancy()[list(p.gpus)].max() == 0 for p in placements)


def test_check_placements_catches_bad_policies():
    queue = make_queue([(5, 10, 1, 0), (6, 10, 2, 0)])
    cluster = make_cluster([[-1, -1], [0, 1]], n_jobs=10)
    tab = table(np.full((1, 1), 1.5))
    from sharewise.engine.interface import InvalidPlacementError

    for bad, msg in [
        ([Placement(5, (0,)), Placement(5, (0,))], "twice"),
        ([Placement(7, (0,))], "not in the queue"),
        ([Placement(6, (0,))], "asked for 2"),
        ([Placement(5, (1,))], "already holds 2"),
        ([Placement(5, (9,))], "has GPUs 0..1"),
    ]:
        with pytest.raises(InvalidPlacementError, match=msg):
            check_placements(bad, queue, cluster, tab, "bad")


def test_smallest_first_is_a_prefix_of_the_stable_sort():
    keys = np.random.default_rng(0).integers(0, 20, 500).astype(float)
    full = np.argsort(keys, kind="stable")
    for m in (1, 5, 64, 499):
        got = smallest_first(keys, m)
        assert got.shape[0] >= m and np.array_equal(got, full[: got.shape[0]])


# ---- SJF-BSBF, by hand ------------------------------------------------------------------------------
def test_sharing_times_hand_computed():
    # f_a = 15 < f_b = 120: t_con = e_b/2 + (1 - 1/(2 s_b)) f_a = 50 + (1 - 1/2.4) * 15 = 58.75.
    t_con, t_seq = sharing_times(np.array([10.0]), np.array([100.0]), np.array([1.5]), np.array([1.2]))
    assert t_con[0] == pytest.approx(58.75) and t_seq[0] == pytest.approx(105.0)
    # f_a = 300 >= f_b = 30: t_con = e_a/2 + (1 - 1/(2 s_a)) f_b = 50 + (1 - 1/6) * 30 = 75 > t_seq = 60.
    t_con, t_seq = sharing_times(np.array([100.0]), np.array([10.0]), np.array([3.0]), np.array([3.0]))
    assert t_con[0] == pytest.approx(75.0) and t_seq[0] == pytest.approx(60.0)


def _bsbf_case(e_a, e_b_list, s_ab, s_ba):
    n = len(e_b_list)
    resident = [[j, -1] for j in range(n)]
    remaining = np.zeros(20)
    remaining[:n] = e_b_list
    workload = np.zeros(20, np.int64)
    workload[:n] = 1  # residents run workload b
    cluster = make_cluster(resident, 20, remaining=remaining, workload=workload)
    p = np.array([[2.0, s_ab], [s_ba, 2.0]])
    queue = make_queue([(10, e_a, 1, 0)])
    return sjf_bsbf(queue, cluster, table(p), 0.0)


def test_bsbf_shares_when_t_con_below_t_seq_and_picks_lowest_t_con():
    # Residents with 100 s and 50 s left: t_con 58.75 and 33.75, both below t_seq: the 50 s one wins.
    assert _bsbf_case(10.0, [100.0, 50.0], 1.5, 1.2) == [Placement(10, (1,))]


def test_bsbf_waits_when_sharing_does_not_pay():
    assert _bsbf_case(100.0, [10.0], 3.0, 3.0) == []


def test_bsbf_uses_free_gpus_first_and_shortest_job_first():
    cluster = make_cluster([[-1, -1], [0, -1]], 20, remaining=np.full(20, 1000.0))
    queue = make_queue([(10, 500.0, 1, 0), (11, 5.0, 1, 0)])
    placements = sjf_bsbf(queue, cluster, table(np.full((1, 1), 1.2)), 0.0)
    assert placements[0] == Placement(11, (0,))  # the shorter job takes the free GPU
    # The other then shares, and prefers the job just started (t_con 253.5 < t_seq 255) over the resident
    # with 1,000 s left (t_con 850 < t_seq 1,250): ascending t_con.
    assert placements[1] == Placement(10, (0,))


def test_sjf_ffs_shares_without_looking_at_slowdowns():
    cluster = make_cluster([[0, -1]], 20, remaining=np.full(20, 10.0))
    queue = make_queue([(10, 1000.0, 1, 0)])
    assert get_policy("sjf-ffs")(queue, cluster, table(np.full((1, 1), 9.0)), 0.0) == [Placement(10, (0,))]
    forbid = table(np.full((1, 1), 1.1), allowed=np.zeros((1, 1), bool))
    assert get_policy("sjf-ffs")(queue, cluster, forbid, 0.0) == []


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


# ---- PAL and PM-First --------------------------------------------------------------------------------
def test_pm_first_gives_the_fastest_gpus_to_the_longest_job():
    cluster = make_cluster(np.full((4, 2), -1), 10, speed=[0.8, 1.0, 0.9, 0.7])
    queue = make_queue([(1, 10.0, 1, 0), (2, 500.0, 1, 0)])
    placements = pm_first(queue, cluster, table(np.full((1, 1), 1.5)), 0.0)
    assert sorted(placements) == [Placement(1, (2,)), Placement(2, (1,))]


def test_pal_trades_speed_for_locality():
    speed = [1.0, 0.6, 0.97, 0.9, 0.9, 0.2]
    node = [0, 0, 1, 1, 1, 1]
    queue = make_queue([(1, 10.0, 2, 0)])
    tab = table(np.full((1, 1), 1.5))
    # No locality penalty: the two fastest GPUs, across nodes (min speed 0.97).
    cluster = make_cluster(np.full((6, 2), -1), 10, speed=speed, node=node, cross=1.0)
    assert pal(queue, cluster, tab, 0.0) == [Placement(1, (0, 2))]
    # A 1.2x cross-node penalty (0.97 / 1.2 = 0.81) makes node 1's GPUs 2 and 3 (0.9, one node) the best.
    cluster = make_cluster(np.full((6, 2), -1), 10, speed=speed, node=node, cross=1.2)
    assert pal(queue, cluster, tab, 0.0) == [Placement(1, (2, 3))]
    assert pm_first(queue, cluster, tab, 0.0) == [Placement(1, (0, 2))]


# ---- the slowdown table ------------------------------------------------------------------------------
def _pairs(rows, device="gpu-x"):
    return pd.DataFrame(
        [
            {
                "workload_a": a,
                "workload_b": b,
                "status": st,
                "slowdown_a": sa,
                "slowdown_b": sb,
                "device_name": device,
                "mode": "timeslice",
            }
            for a, b, st, sa, sb in rows
        ]
    )


def test_table_from_pairs_gives_both_directions_and_forbids_oom():
    t = SlowdownTable.from_pairs(
        _pairs(
            [
                ("a", "b", "ok", 1.2, 1.6),
                ("b", "a", "ok", 1.8, 1.4),
                ("a", "c", "oom", np.nan, np.nan),
                ("c", "c", "ok", 1.5, 1.5),
                ("a", "c", "ok", 1.1, 1.1),
            ]
        )
    )
    ids = t.ids(["a", "b", "c"])
    p10, p50, p90 = t.quantiles(ids[[0, 1]], ids[[1, 0]])
    assert p50.tolist() == pytest.approx([1.3, 1.7])  # (1.2 + 1.4) / 2 and (1.6 + 1.8) / 2
    assert p10.tolist() == p50.tolist() == p90.tolist()
    assert not t.may_share(ids[[0]], ids[[2]])[0]  # oom wins over an ok row
    assert t.may_share(ids[[2]], ids[[2]])[0]
    with pytest.raises(UnknownWorkloadError, match="known workloads: a, b, c"):
        t.ids(["zeta"])


def test_table_needs_a_device_choice_when_ambiguous():
    pairs = pd.concat([_pairs([("a", "b", "ok", 1.2, 1.3)]), _pairs([("a", "b", "ok", 1.5, 1.5)], "gpu-y")])
    with pytest.raises(ConfigError, match=r"\['gpu-x', 'gpu-y'\].*--device-name"):
        SlowdownTable.from_pairs(pairs)
    assert SlowdownTable.from_pairs(pairs, device_name="gpu-y").p50[0, 1] == 1.5
    with pytest.raises(DatasetError, match="gpu-z"):
        SlowdownTable.from_pairs(pairs, device_name="gpu-z")


def test_table_from_predictions_sorts_crossing_quantiles():
    pred = pd.DataFrame(
        {
            "workload_a": ["a"],
            "workload_b": ["b"],
            "device_name": ["gpu-x"],
            "p10_a": [1.5],
            "p50_a": [1.2],
            "p90_a": [1.9],
            "p10_b": [1.1],
            "p50_b": [1.2],
            "p90_b": [1.3],
        }
    )
    t = SlowdownTable.from_predictions(pred)
    assert (t.p10[0, 1], t.p50[0, 1], t.p90[0, 1]) == (1.2, 1.5, 1.9)
    assert not t.allowed[0, 0]  # never predicted
    with pytest.raises(SchemaError, match="missing column"):
        SlowdownTable.from_predictions(pred.drop(columns=["p90_b"]))


# ---- recommend -------------------------------------------------------------------------------------
def _queue(workloads, remaining=None, gpus=None):
    df = pd.DataFrame({"job_id": [f"j{i}" for i in range(len(workloads))], "workload": workloads})
    if remaining is not None:
        df["remaining_s"] = remaining
    if gpus is not None:
        df["gpus"] = gpus
    return df


def test_recommend_pairs_only_within_max_slowdown():
    p50 = np.array([[1.3, 1.2], [1.25, 1.4]])
    p90 = np.array([[1.6, 1.5], [2.6, 1.7]])  # b next to a: p90 2.6
    plan = plan_pairs(_queue(["a", "b", "a", "b"]), table(p50, p90), gpus=2, max_slowdown=2.0)
    kinds = sorted(tuple(p["workloads"]) for p in plan.placements)
    assert kinds == [("a", "a"), ("b", "b")]  # a with b would break the SLO at p90
    plan = plan_pairs(_queue(["a", "b", "a", "b"]), table(p50, p90), gpus=2, max_slowdown=3.0)
    assert sorted(tuple(p["workloads"]) for p in plan.placements) == [("a", "b"), ("a", "b")]
    assert all(p["kind"] == "pair" for p in plan.placements) and not plan.waiting
    assert plan.work_rate == pytest.approx(2 * (1 / 1.2 + 1 / 1.25))
    assert plan.exclusive_work_rate == pytest.approx(2.0)


def test_recommend_leaves_jobs_alone_when_gpus_suffice_and_respects_memory():
    p50 = np.full((2, 2), 1.1)
    plan = plan_pairs(_queue(["a", "b"]), table(p50), gpus=2)
    assert [p["kind"] for p in plan.placements] == ["alone", "alone"]
    profiles = pd.DataFrame(
        {"workload": ["a", "b"], "f_mem_peak_reserved_bytes": [6e9, 3e9], "f_device_mem_bytes": [10e9, 10e9]}
    )
    fits, note = memory_fit(profiles, ["a", "b"])
    assert fits.tolist() == [[False, True], [True, True]] and "GiB" in note
    plan = plan_pairs(_queue(["a", "a", "b"]), table(p50).restricted(fits), gpus=2)
    assert sorted(tuple(p["workloads"]) for p in plan.placements) == [("a",), ("a", "b")]


def test_recommend_joins_residents_and_keeps_multi_gpu_jobs_alone():
    p50 = np.array([[1.2, 1.1], [1.15, 1.3]])
    cluster = pd.DataFrame(
        {"gpu": ["g0", "g1", "g2", "g2"], "job_id": ["", "r1", "r2", "r3"], "workload": ["", "b", "a", "a"]}
    )
    plan = plan_pairs(_queue(["a", "a", "b"], gpus=[1, 1, 2]), table(p50), cluster=cluster)
    by_kind = {p["kind"]: p for p in plan.placements}
    assert by_kind["join"]["gpus"] == ["g1"] and by_kind["join"]["jobs"][1] == "r1"
    assert by_kind["alone"]["gpus"] == ["g0"]
    assert {by_kind["alone"]["jobs"][0], by_kind["join"]["jobs"][0]} == {"j0", "j1"}
    assert plan.waiting == ["j2"]  # the 2-GPU job finds only one free GPU
    with pytest.raises(TraceError, match="third job"):
        plan_pairs(_queue(["a"]), table(p50), cluster=pd.concat([cluster, cluster.tail(1)]))


def test_recommend_exact_and_greedy_agree_on_a_small_case_and_auto_says_which():
    rng = np.random.default_rng(4)
    p50 = rng.uniform(1.05, 1.9, (3, 3))
    queue = _queue(list(rng.choice(WORKLOADS, 12)), remaining=rng.uniform(10, 100, 12))
    exact = plan_pairs(queue, table(p50), gpus=5, method="exact")
    greedy = plan_pairs(queue, table(p50), gpus=5, method="greedy")
    assert exact.method == "exact" and greedy.method == "greedy"
    assert greedy.work_rate <= exact.work_rate + 1e-9
    assert greedy.work_rate >= 0.9 * exact.work_rate
    simple = plan_pairs(_queue(["a", "a"]), table(np.full((1, 1), 1.25)), gpus=1, method="greedy")
    assert simple.work_rate == pytest.approx(1.6)
    auto = plan_pairs(queue, table(p50), gpus=5, exact_max_variables=3)
    assert auto.method == "greedy" and "exceed the exact limit" in auto.method_note
    # Within a workload type, the job with less remaining time goes first.
    one = plan_pairs(_queue(["a", "a"], remaining=[50, 5]), table(np.full((1, 1), 3.0)), gpus=1)
    assert one.placements[0]["jobs"] == ["j1"] and one.waiting == ["j0"]


def test_recommend_queue_errors_name_the_line():
    tab = table(np.full((1, 1), 1.2))
    with pytest.raises(TraceError, match="line 3: column 'gpus'"):
        plan_pairs(_queue(["a", "a"], gpus=["1", "x"]), tab, gpus=1)
    with pytest.raises(TraceError, match="line 3: job_id 'j0' appears twice"):
        plan_pairs(pd.DataFrame({"job_id": ["j0", "j0"], "workload": ["a", "a"]}), tab, gpus=1)
    with pytest.raises(UnknownWorkloadError, match="zeta"):
        plan_pairs(_queue(["zeta"]), tab, gpus=1)
    with pytest.raises(ConfigError, match="--gpus N"):
        plan_pairs(_queue(["a"]), tab)


# ---- CLI ------------------------------------------------------------------------------------------
def test_cli_policies_lists_the_registry(capsys):
    assert run_cli(["policies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(REGISTRY) and all(r["summary"] for r in rows)


@pytest.mark.parametrize("command", ["policies", "simulate", "recommend"])
def test_cli_commands_have_help(command, capsys):
    assert run_cli([command, "--help"]) == 0
    assert "Example:" in capsys.readouterr().out


def _tiny_dataset(folder: Path) -> Path:
    from sharewise.datasets.store import Dataset

    names = ["w0", "w1", "w2", "w3"]
    rng = np.random.default_rng(0)
    feats: dict = {
        "f_busy_frac": [0.3, 0.5, 0.7, 0.9],
        "f_mem_peak_reserved_bytes": [2e9, 3e9, 4e9, 9e9],
        "f_device_mem_bytes": [16e9] * 4,
    }
    profiles = pd.DataFrame(
        {
            "workload": names,
            "family": ["x", "x", "y", "z"],
            "batch_size": 8,
            "device_kind": "cuda",
            "device_name": "gpu-x",
            "mode": "timeslice",
            "host": "h",
            "torch_version": "",
            "created_at": "t",
            "iter_time_ms": [10.0, 20.0, 30.0, 40.0],
            "throughput": [100.0, 50.0, 33.0, 25.0],
            **feats,
        }
    )
    rows = []
    for i in range(4):
        for j in range(i, 4):
            sa = 1.0 + feats["f_busy_frac"][j] * rng.uniform(0.8, 1.2)
            sb = 1.0 + feats["f_busy_frac"][i] * rng.uniform(0.8, 1.2)
            rows.append(
                {
                    "workload_a": names[i],
                    "workload_b": names[j],
                    "device_kind": "cuda",
                    "device_name": "gpu-x",
                    "mode": "timeslice",
                    "solo_a": 1.0,
                    "solo_b": 1.0,
                    "coloc_a": 1 / sa,
                    "coloc_b": 1 / sb,
                    "slowdown_a": sa,
                    "slowdown_b": sb,
                    "trials": 1,
                    "cv_a": 0.0,
                    "cv_b": 0.0,
                    "status": "ok",
                    "error": "",
                    "created_at": "t",
                }
            )
    ds = Dataset(folder)
    ds.write_profiles(profiles)
    ds.write_pairs(pd.DataFrame(rows))
    return folder


def test_cli_recommend_json_and_bad_queue(tmp_path, capsys):
    pytest.importorskip("xgboost")
    from sharewise.datasets.store import Dataset
    from sharewise.predictor import train_model

    data = _tiny_dataset(tmp_path / "data")
    ds = Dataset(data)
    model = train_model(ds.read_profiles(), ds.read_pairs(), n_estimators=20)
    model.save(tmp_path / "model.json")
    queue = tmp_path / "queue.csv"
    queue.write_text("job_id,workload,remaining_s\nq1,w0,100\nq2,w1,50\nq3,w2,10\nq4,w0,70\nq5,w3,20\n")
    argv = [
        "recommend",
        "--model",
        str(tmp_path / "model.json"),
        "--data",
        str(data),
        "--queue",
        str(queue),
        "--gpus",
        "2",
        "--max-slowdown",
        "5",
        "--json",
    ]
    assert run_cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exact"
    placed = [j for p in out["placements"] for j in p["jobs"]]
    assert len(placed) == len(set(placed)) and len(placed) + len(out["waiting"]) == 5
    for p in out["placements"]:
        assert len(p["gpus"]) == 1 and len(p["jobs"]) <= 2
        if p["kind"] != "alone":
            assert max(p["p90"]) <= 5 and "why" in p and p["why"]["a"]
            assert p["workloads"] != ["w3", "w3"]  # 2 x 9 GB does not fit in 16 GB
    assert run_cli(argv[:-1]) == 0  # the table
    assert "GPU-equivalents" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("job,workload\nq1,w0\n")
    assert run_cli([*argv[:6], str(bad), "--gpus", "2"]) == 2
    assert "missing column(s) ['job_id']" in capsys.readouterr().err


# ---- the baselines of SJF-BSBF and PAL -------------------------------------------------------------------
def test_tiresias_preempts_by_attained_service_and_wakes_at_the_next_demotion():
    from sharewise.policy.tiresias import tiresias

    # GPU 0 runs job 0 (1 GPU, 4,000 GPU-s attained: queue 1); GPU 1 runs job 1 (1 GPU, 100 GPU-s: queue 0).
    cluster = make_cluster([[0, -1], [1, -1]], n_jobs=10, attained=[4000.0, 100.0] + [0.0] * 8)
    # Job 5 arrives (queue 0, no service yet): it outranks job 0 (queue 1) but not job 1 (same queue, running).
    queue = make_queue([(5, 10.0, 1, 0, 0.0)])
    d = tiresias(queue, cluster, table(np.full((1, 1), 1.5)), 0.0)
    assert d.preempt == (0,) and d.start == [Placement(5, (0,))]
    # Job 1 keeps running and reaches 3,600 GPU-s after 3,500 more seconds on its one GPU.
    assert d.wake_at == pytest.approx(3500.0)
    # A two-GPU job of queue 0 needs both GPUs: it preempts job 0 but not job 1, so it cannot start;
    # the walk skips it (work-conserving) and job 0 keeps running.
    d2 = tiresias(make_queue([(6, 10.0, 2, 0, 0.0)]), cluster, table(np.full((1, 1), 1.5)), 0.0)
    assert d2.preempt == () and d2.start == []
    # With thresholds (700,) as in the SJF-BSBF authors' testbed, job 1 (100 GPU-s) is still in queue 0.
    d3 = tiresias(queue, cluster, table(np.full((1, 1), 1.5)), 0.0, thresholds=(700.0,))
    assert d3.preempt == (0,) and d3.wake_at == pytest.approx(600.0)


def test_packed_sticky_packs_jobs_blind_to_gpu_speed():
    from sharewise.policy.packed_sticky import packed_sticky
    from sharewise.policy.pal import pal

    # Node 0 holds GPUs 0-1 (slow), node 1 GPUs 2-3 (fast); GPU 0 is busy.
    cluster = make_cluster(
        [[0, -1], [-1, -1], [-1, -1], [-1, -1]], n_jobs=10, speed=[0.5, 0.5, 1.0, 1.0], node=[0, 0, 1, 1]
    )
    queue = make_queue([(5, 100.0, 1, 0)])
    # Packed: the node with the fewest free GPUs that fits (node 0, GPU 1), whatever its speed.
    assert packed_sticky(queue, cluster, table(np.full((1, 1), 1.5)), 0.0) == [Placement(5, (1,))]
    # PAL takes the fastest placement instead.
    assert pal(queue, cluster, table(np.full((1, 1), 1.5)), 0.0) == [Placement(5, (2,))]


def test_strict_fifo_stops_at_the_head_backfill_passes_it():
    from sharewise.policy.exclusive import exclusive_fifo_backfill, exclusive_fifo_strict

    cluster = make_cluster([[0, -1], [-1, -1], [-1, -1]], n_jobs=10)  # two GPUs free
    queue = make_queue([(5, 10.0, 4, 0), (6, 10.0, 1, 0)])  # the head asks for 4 GPUs
    tab = table(np.full((1, 1), 1.5))
    assert exclusive_fifo_strict(queue, cluster, tab, 0.0) == []
    assert exclusive_fifo_backfill(queue, cluster, tab, 0.0) == [Placement(6, (1,))]


@pytest.mark.parametrize("seed", range(8))
def test_sharewise_kernels_match_the_closed_forms(seed):
    """The compiled scoring and release kernels give, bit for bit, what the numpy closed forms of the oracle
    (``tests/policy_oracles.py``) give."""
    from policy_oracles import budget
    from policy_oracles import release_times as release_oracle
    from policy_oracles import savings as savings_oracle

    from sharewise.engine.gpus import lone_residents
    from sharewise.policy.ours.arrays import Jobs, Knobs, Pairs, Waiting, pairs_of
    from sharewise.policy.ours.sharing import release_times, savings

    rng = np.random.default_rng(seed)
    n_wl, n_gpus, n_jobs, m = 4, 40, 120, 12
    p50 = rng.uniform(1.0, 2.4, (n_wl, n_wl))
    allowed = rng.random((n_wl, n_wl)) < 0.8
    tab = SlowdownTable(list("abcd"), p50 * 0.95, p50, p50 * rng.uniform(1.0, 1.3, (n_wl, n_wl)), allowed)
    occupancy = rng.integers(0, 3, n_gpus)
    jobs = rng.permutation(n_jobs)[: 2 * n_gpus].reshape(n_gpus, 2)
    speed = rng.uniform(0.6, 1.0, n_gpus)
    # Multi-GPU jobs: runs of neighbouring GPUs holding the same job(s) at one speed (the kernels reuse a
    # column there), and one neighbour at another speed (they must not).
    for g in rng.choice(n_gpus - 3, 6, replace=False):
        jobs[g + 1 : g + 3], occupancy[g + 1 : g + 3], speed[g + 1 : g + 3] = jobs[g], occupancy[g], speed[g]
    speed[g + 2] *= 0.9
    resident = np.where(np.arange(2)[None, :] < occupancy[:, None], jobs, -1)
    # A multi-GPU job that shares one of its GPUs and holds another alone: that GPU is not joinable.
    full, lone = np.flatnonzero(occupancy == 2), np.flatnonzero(occupancy == 1)
    resident[lone[0], 0] = resident[full[0], 1]
    work = rng.uniform(100, 5000, n_jobs)
    remaining, workload = work * rng.uniform(0.05, 1.0, n_jobs), rng.integers(0, n_wl, n_jobs)
    start = rng.uniform(0, 3000, n_jobs)
    start[rng.random(n_jobs) < 0.5] = np.nan  # never ran (queued): no budget of their own yet
    partner, partner_wl, rem, alone = lone_residents(occupancy, resident, workload, remaining, n_wl)
    single = np.flatnonzero(occupancy == 1)
    assert np.array_equal(partner[single], resident[single, 0]) and np.all(partner[occupancy != 1] == -1)
    assert np.array_equal(partner_wl[single], workload[resident[single, 0]])
    assert np.array_equal(alone, np.bincount(workload[resident[single, 0]], minlength=n_wl))
    wl_a, rem_a, release_a = rng.integers(0, n_wl, m), rng.uniform(10, 4000, m), rng.uniform(0, 3000, m)
    job_a = rng.choice(np.setdiff1d(np.arange(n_jobs), resident), m, replace=False)  # queued: preempted or new
    rem_a = np.minimum(rem_a, work[job_a])
    now, slo = 3000.0, 1.6
    shared_elsewhere = np.zeros(n_jobs, dtype=bool)
    shared_elsewhere[resident[occupancy == 2].ravel()] = True
    job_arrays = Jobs(workload, remaining, work, start, np.ones(n_jobs, np.int64), np.empty(0, np.int64))
    knobs = Knobs(now, slo, 0.0, 24, 4.0, 0.5, 0.5, 8, 32, 1.0, 2.0, 1e18)
    for q_slo, q_gain in [("p90", "p90"), ("p90", "p50"), ("p50", "p10")]:
        pairs = Pairs(*pairs_of(tab, q_slo, q_gain))
        joiners = Waiting(job_a, np.ones(m, np.int64), wl_a, rem_a)
        got, n_good = savings(joiners, release_a, single, (partner, partner_wl, rem), speed, job_arrays, pairs, knobs,
                              shared_elsewhere)
        sp = speed[single]
        bud = budget(slo, work[partner[single]], sp, now - start[partner[single]])
        bud_a = budget(slo, work[job_a][:, None], sp[None, :], now - start[job_a][:, None])
        want = savings_oracle(
            wl_a, rem_a, release_a, partner_wl[single], rem[single] / sp, bud, sp, tab, q_slo, q_gain, slo,
            bud_a, ~shared_elsewhere[partner[single]],
        )
        assert np.isneginf(want[:, 0]).all()  # the resident that shares another GPU
        assert np.isfinite(want).any() and np.array_equal(got, want)
        assert np.array_equal(n_good, (want > 0).sum(axis=1))
    # Release times: a lone job's remaining time over its GPU's speed; a pair's later end (shared_completion).
    cluster = make_cluster(resident, n_jobs, remaining, workload, speed=speed, start=start, work=work)
    want = release_oracle(cluster, tab)
    assert np.array_equal(release_times(cluster, tab), want)
    assert np.array_equal(release_times(cluster, tab, m=7), want[:7])


@pytest.mark.parametrize("seed", range(20))
def test_compiled_orderings_are_numpys(seed):
    """The hand-written sorts of the kernels give what numpy gives: ``stable_order`` and ``smallest`` the
    stable argsort (ties by position; many ties here), ``select_smallest`` the values ``np.partition`` keeps;
    ``sjf_walk`` the SJF walk of the oracle (written with ``base.in_order``), ``by_sensitivity`` the oracle's
    sort (longest first, ties: more GPUs, then position)."""
    from policy_oracles import by_sensitivity as by_sensitivity_oracle
    from policy_oracles import sjf_walk as sjf_walk_oracle

    from sharewise.engine.order import by_sensitivity, select_smallest, smallest, stable_order
    from sharewise.policy.ours.placement import sjf_walk

    rng = np.random.default_rng(seed)
    for n in (1, 2, 7, 64, 65, 300):
        keys = rng.integers(0, 6, n).astype(float) if seed % 2 else rng.uniform(0, 1e4, n)
        want = np.argsort(keys, kind="stable")
        assert np.array_equal(stable_order(keys), want)
        for m in {0, 1, n // 2, n, n + 3}:
            assert np.array_equal(smallest(keys, m), want[:m])
            if 1 <= m <= n:
                got = select_smallest(keys, m)
                assert np.array_equal(np.sort(got), np.sort(np.partition(keys, m - 1)[:m]))
        gpus = rng.choice([1, 1, 2, 4, 8], n)
        for n_free in (0, 1, 5, 40, 400):
            for head in (0, 1, 3, 24):
                got_s, got_w = sjf_walk(keys, gpus, n_free, head)
                assert (got_s.tolist(), got_w.tolist()) == sjf_walk_oracle(keys, gpus, n_free, head)
        queue = make_queue((j, float(keys[j]), int(gpus[j]), 0) for j in range(n))
        chosen = rng.permutation(n)[: max(1, n // 2)]
        assert by_sensitivity(chosen, queue.remaining, queue.gpus).tolist() == by_sensitivity_oracle(
            queue, chosen.tolist()
        )


@pytest.mark.parametrize("seed", range(40))
def test_compiled_free_gpu_pick_is_the_python_rule(seed):
    """``pick_free_gpus`` (compiled; the baselines' and sharewise's one rule) chooses what the Python rule of
    the oracle chooses, on random free masks, node layouts and job sizes."""
    from policy_oracles import pick_free_gpus as pick_oracle

    from sharewise.engine import gpus
    from sharewise.engine.interface import pick_free_gpus

    rng = np.random.default_rng(seed)
    per_node = int(rng.choice([1, 2, 4, 8]))
    n_gpus = per_node * int(rng.integers(1, 7))
    node = np.arange(n_gpus) // per_node
    occupancy = rng.integers(0, 3, n_gpus) * (rng.random(n_gpus) < 0.6)
    for k in range(1, n_gpus + 2):
        want = pick_oracle(occupancy == 0, node, k)
        got = gpus.pick_free_gpus(occupancy, node, k)
        if want is None:
            assert got.shape[0] == 0 and pick_free_gpus(occupancy == 0, node, k) is None
        else:
            assert np.array_equal(got, np.sort(want))
            assert np.array_equal(pick_free_gpus(occupancy == 0, node, k), np.sort(want))


@pytest.mark.parametrize("seed", range(40))
def test_compiled_fastest_block_is_pals_rule(seed):
    """``fastest_block`` (compiled; PAL's, the re-placement's and sharewise's one rule) chooses what the
    oracle's Python rule chooses, GPU for GPU and in its order, on random speeds (many ties), free masks,
    node layouts, job sizes and cross-node penalties."""
    from policy_oracles import fastest_block as fastest_oracle

    from sharewise.policy.pal import fastest_block

    rng = np.random.default_rng(seed)
    per_node = int(rng.choice([1, 2, 4, 8]))
    n_gpus = per_node * int(rng.integers(1, 7))
    node = np.arange(n_gpus) // per_node
    free = rng.random(n_gpus) < 0.7
    speed = rng.choice([0.5, 0.8, 1.0], n_gpus) if seed % 2 else rng.uniform(0.5, 1.0, n_gpus)
    for k in range(1, int(free.sum()) + 1):
        for penalty in (1.0, 1.3):
            want = fastest_oracle(free, speed, node, k, penalty)
            assert fastest_block(free, speed, node, k, penalty).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(30))
def test_fast_placement_check_agrees_with_the_detailed_one(seed):
    """The fast validity check accepts exactly the placements the one-by-one walk accepts: on real
    policies' placements (valid), and on the same with one random change (often invalid)."""
    from sharewise.engine.interface import InvalidPlacementError, _all_valid, _walk_placements

    queue, cluster, tab = _random_state(seed % 6)
    rng = np.random.default_rng(seed)
    name = policy_names()[seed % len(policy_names())]
    if getattr(get_policy(name), "preemptive", False):
        name = "sjf-bsbf"
    placements = list(as_decision(get_policy(name)(queue, cluster, tab, 50.0)).start)
    if seed >= 10 and placements:  # change one placement: a GPU, the job, or a duplicate
        k = int(rng.integers(len(placements)))
        job, gpus = placements[k]
        change = seed % 3
        if change == 0:
            gpus = tuple(int(g) for g in rng.choice(cluster.n_gpus, size=len(gpus), replace=False))
        elif change == 1:
            job = int(rng.choice(queue.job))
        else:
            placements.append(placements[k])
        placements[k] = Placement(job, gpus)
    try:
        _walk_placements(placements, queue, cluster, tab, "p")
        walk_ok = True
    except InvalidPlacementError:
        walk_ok = False
    assert _all_valid(placements, queue, cluster, tab) == walk_ok
    if seed < 10:
        assert walk_ok  # a registered policy's own placements are valid


def _random_preemption_state(seed: int, delay: float = 60.0):
    """A cluster of 24 GPUs on 3 nodes (two speeds) running single- and multi-GPU jobs, some GPUs shared, some
    free, and a queue of preempted jobs (slack around their urgency limit) and new ones."""
    rng = np.random.default_rng(seed)
    n_gpus, now = 24, 100_000.0
    resident = np.full((n_gpus, 2), -1, np.int64)
    ngpus, job = [], 0
    g = 0
    while g < n_gpus:
        kind = rng.choice(["free", "one", "two", "pair"], p=[0.08, 0.52, 0.25, 0.15])
        if kind == "two" and g + 1 < n_gpus:
            resident[g : g + 2, 0] = job
            ngpus.append(2)
            job, g = job + 1, g + 2
            continue
        if kind in ("one", "pair"):
            resident[g, 0] = job
            ngpus.append(1)
            job += 1
        if kind == "pair":
            resident[g, 1] = job
            ngpus.append(1)
            job += 1
        g += 1
    n_run, n_queue = job, 10
    n_jobs = n_run + n_queue
    work = rng.uniform(1_000.0, 50_000.0, n_jobs)
    remaining = work * rng.uniform(0.05, 1.0, n_jobs)
    start = now - rng.uniform(0.0, 0.6, n_jobs) * work  # running jobs: slack to spare, victims
    start[n_run:] = now - rng.uniform(0.6, 1.6, n_queue) * work[n_run:]  # queued: some urgent
    preempted = rng.random(n_queue) < 0.7
    start[n_run:][~preempted] = np.nan
    cluster = ClusterState(
        resident=resident, node=np.arange(n_gpus) // 8, speed=rng.choice([0.7, 1.0], n_gpus),
        job_remaining=remaining, job_workload=np.zeros(n_jobs, np.int64),
        job_ngpus=np.array(ngpus + [1] * n_queue, np.int64), job_start=start, job_work=work,
        slo=2.0, preempt_delay_s=delay, job_attained=np.zeros(n_jobs), job_arrival=np.zeros(n_jobs),
    )
    q_gpus = rng.choice([1, 1, 2, 3, 8], n_queue)
    queue = Queue(job=np.arange(n_run, n_jobs), arrival=np.zeros(n_queue), gpus=q_gpus,
                  remaining=remaining[n_run:] * 0.2, workload=np.zeros(n_queue, np.int64))
    return queue, cluster, now


def _urgent_case(seed: int):
    """``(kernel, oracle)``: the urgent restarts of ``_random_preemption_state(seed)``, each as (placements,
    victims stopped, wake-up)."""
    from policy_oracles import urgent_restarts as urgent_oracle

    from sharewise.policy.ours import urgent
    from sharewise.policy.ours.arrays import jobs_of, knobs_of
    from sharewise.policy.ours.params import PARAMS
    from sharewise.policy.ours.stage import Stage

    queue, cluster, now = _random_preemption_state(seed)
    knobs = knobs_of(PARAMS, cluster, now, cluster.slo)
    got = urgent.restarts(Stage.of(queue, cluster), jobs_of(cluster), knobs)
    return got, urgent_oracle(queue, cluster, now, cluster.slo, PARAMS.urgency, PARAMS.slack_share,
                              PARAMS.tolerance_s)


@pytest.mark.parametrize("seed", range(60))
def test_urgent_restarts_take_victims_by_the_oracles_rule(seed):
    """The urgent-restart kernel (selection, and ``victims.take``, the rule SRPT takes GPUs by too) restarts the
    jobs the oracle restarts, on the same GPUs, stopping the same victims, and asks to be woken at the same
    time, on random clusters where urgent jobs compete for free GPUs and victims."""
    got, want = _urgent_case(seed)
    assert got == want


def test_urgent_restarts_cases_exercise_the_rule():
    """The random cases of the test above restart jobs on free GPUs and on victims' GPUs, and leave some
    urgent job waiting: the comparison covers every branch of the rule."""
    from sharewise.policy.ours.arrays import knobs_of
    from sharewise.policy.ours.params import PARAMS
    from sharewise.policy.ours.urgent import urgent_jobs

    restarted = stopped = urgent = 0
    for seed in range(60):
        (start, stop, _), _ = _urgent_case(seed)
        queue, cluster, now = _random_preemption_state(seed)
        knobs = tuple(knobs_of(PARAMS, cluster, now, 2.0))
        urgent += len(urgent_jobs(queue.job, queue.remaining, cluster.job_start, cluster.job_work, knobs)[0])
        restarted += len(start)
        stopped += len(stop)
    assert restarted > 20 and stopped > 5 and urgent > restarted
