"""The baselines, each by hand: SJF-BSBF and SJF-FFS, PAL and PM-First, Tiresias, Packed-Sticky, strict and
backfilling FIFO, EASY backfilling."""

from __future__ import annotations

import numpy as np
import pytest
from policy_cases import make_cluster, make_queue, table

from sharewise.policy import Placement, get_policy
from sharewise.policy.pal import pal
from sharewise.policy.pm_first import pm_first
from sharewise.policy.sjf_bsbf import sharing_times, sjf_bsbf


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




# ---- EASY backfilling, by hand ----------------------------------------------------------------------
def _easy_case(n_gpus: int):
    """GPU 0 ends in 100 s, GPU 1 in 300 s (and GPU 4, if there are 5, in 300 s); the others are free. In arrival
    order: A asks for 4 GPUs (the head: 2 free), B for 1 GPU for 400 s, C for 1 GPU for 250 s, D for 2 GPUs."""
    resident = [[0, -1], [1, -1], [-1, -1], [-1, -1]] + ([[2, -1]] if n_gpus == 5 else [])
    remaining = np.zeros(20)
    remaining[:3] = [100.0, 300.0, 300.0]
    cluster = make_cluster(resident, 20, remaining=remaining)
    queue = make_queue([(10, 50.0, 4, 0), (11, 400.0, 1, 0), (12, 250.0, 1, 0), (13, 100.0, 2, 0)])
    return queue, cluster, table(np.full((1, 1), 1.5))


def test_easy_backfill_starts_only_what_does_not_delay_the_head():
    from sharewise.policy.exclusive import exclusive_fifo_backfill

    # A's shadow time: its 4th GPU frees at 300 s, with no extra GPU. B (400 s) would hold a free GPU past it;
    # C (250 s) ends before it and starts; D no longer fits. FIFO with backfilling starts B and C.
    queue, cluster, tab = _easy_case(4)
    easy = get_policy("easy-backfill")
    assert easy(queue, cluster, tab, 0.0) == [Placement(12, (2,))]
    assert exclusive_fifo_backfill(queue, cluster, tab, 0.0) == [Placement(11, (2,)), Placement(12, (3,))]
    # A fifth GPU freeing at 300 s is extra: B takes it (on a free GPU now), then C starts as before.
    queue, cluster, tab = _easy_case(5)
    assert easy(queue, cluster, tab, 0.0) == [Placement(11, (2,)), Placement(12, (3,))]
    # Jobs that fit start in arrival order before any reservation, as in FIFO.
    cluster = make_cluster([[-1, -1]] * 4, 20)
    assert easy(queue, cluster, tab, 0.0) == [Placement(10, (0, 1, 2, 3))]


def test_easy_backfill_on_a_tiny_trace_by_hand():
    """Two GPUs: j0 (1 GPU, 100 s) at 0 s, j1 (2 GPUs, 50 s) at 1 s, j2 (1 GPU, 200 s) at 2 s, j3 (1 GPU, 50 s) at
    3 s. EASY: j1's shadow time is j0's end (100 s); j2 would run past it on the free GPU and waits, j3 (3-53 s)
    ends before it; j1 runs 100-150 s, j2 150-350 s. FIFO with backfilling lets j2 take the free GPU at 2 s, and
    j1 waits for it until 202 s; strict FIFO idles the free GPU until 100 s."""
    from sharewise.datasets.traces import Trace
    from sharewise.engine.simulator import Cluster, simulate
    from sharewise.engine.table import SlowdownTable

    rows = [(0.0, 100.0, 1), (1.0, 50.0, 2), (2.0, 200.0, 1), (3.0, 50.0, 1)]
    trace = Trace(job_id=np.array([f"j{i}" for i in range(4)], dtype=object),
                  arrival=np.array([r[0] for r in rows]), duration=np.array([r[1] for r in rows]),
                  gpus=np.array([r[2] for r in rows], np.int64), workload=np.array(["a"] * 4, dtype=object),
                  line=np.arange(2, 6), source="inline")
    truth = SlowdownTable(["a"], np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)), np.zeros((1, 1), bool),
                          device_name="gpu-x", source="test")
    runs = {name: simulate(trace, get_policy(name), truth, cluster=Cluster(2, 2), name=name)
            for name in ("easy-backfill", "exclusive-fifo-backfill", "exclusive-fifo-strict")}
    assert runs["easy-backfill"].start.tolist() == [0.0, 100.0, 150.0, 3.0]
    assert runs["easy-backfill"].finish.tolist() == [100.0, 150.0, 350.0, 53.0]
    assert runs["exclusive-fifo-backfill"].start.tolist() == [0.0, 202.0, 2.0, 100.0]
    assert runs["exclusive-fifo-strict"].start.tolist() == [0.0, 100.0, 150.0, 150.0]
    avg = {name: r.metrics["avg_jct"] for name, r in runs.items()}
    assert avg["easy-backfill"] == pytest.approx((100 + 149 + 348 + 50) / 4)
    assert avg["easy-backfill"] < avg["exclusive-fifo-backfill"] < avg["exclusive-fifo-strict"]
