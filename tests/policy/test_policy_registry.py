"""Every registered policy: the registry, invariants on random clusters, the placement check."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from policy_cases import make_cluster, make_queue, random_state, table

from sharewise.engine.policy_types import Queue, as_decision
from sharewise.engine.queue_order import smallest_first
from sharewise.engine.validation import check_placements
from sharewise.errors import ConfigError
from sharewise.policy import Placement, get_policy, policy_names


# ---- registry and invariants ------------------------------------------------------------------------
def test_registry_names_and_unknown_policy():
    assert policy_names() == [
        "exclusive-fifo-strict",
        "exclusive-fifo-backfill",
        "exclusive-sjf",
        "easy-backfill",
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
    with pytest.raises(ConfigError, match="known policies: easy-backfill, exclusive-fifo-backfill, exclusive-fifo"):
        get_policy("round-robin")


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", range(6))
def test_policy_invariants(name, seed):
    queue, cluster, tab = random_state(seed)
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
    queue2, cluster2, tab2 = random_state(seed)
    assert as_decision(policy(queue2, cluster2, tab2, 50.0)).start == placements
    if name.startswith("exclusive") or name in ("pm-first", "pal", "packed-sticky", "tiresias") or "artifact" in name:
        assert all(cluster.occupancy()[list(p.gpus)].max() == 0 for p in placements)


def test_check_placements_catches_bad_policies():
    queue = make_queue([(5, 10, 1, 0), (6, 10, 2, 0)])
    cluster = make_cluster([[-1, -1], [0, 1]], n_jobs=10)
    tab = table(np.full((1, 1), 1.5))
    from sharewise.errors import InvalidPlacementError

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


