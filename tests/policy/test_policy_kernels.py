"""The compiled kernels against their Python oracles (``policy_oracles``) on generated cases: the closed forms,
orderings and GPU picks, the placement check, urgent restarts, the SLO rescue, SRPT and the reservation
(docs/development/conventions.md, practice 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from policy_cases import make_cluster, make_queue, random_state

from sharewise.engine.policy_types import ClusterState, Queue, as_decision
from sharewise.engine.table import SlowdownTable
from sharewise.policy import Placement, get_policy, policy_names
from sharewise.policy.ours.reservation import NONE, Reservation


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
    knobs = Knobs(now, slo, 0.0, 24, 4.0, 0.5, 0.5, 8, 32, 1.0, 2.0, 1, np.inf, 1e18)
    cases = [("p90", "p90", False), ("p90", "p50", False), ("p50", "p10", False), ("p90", "p90", True)]
    held = {0: 0, 2: 0}  # cells the reservation forbids (no spare GPU), cells that take a spare one
    for q_slo, q_gain, fresh_ok in cases:
        pairs = Pairs(*pairs_of(tab, q_slo, q_gain))
        joiners = Waiting(job_a, np.ones(m, np.int64), wl_a, rem_a)
        got, n_good, costly = savings(joiners, release_a, single, (partner, partner_wl, rem), speed, job_arrays,
                                      pairs, knobs, shared_elsewhere, fresh_ok, (-1, np.inf, 0))
        sp = speed[single]
        ran = now - start[partner[single]]  # NaN: started in this call, joinable only where fresh_ok (ran 0)
        bud = budget(slo, work[partner[single]], sp, np.where(np.isnan(ran), 0.0, ran) if fresh_ok else ran)
        bud_a = budget(slo, work[job_a][:, None], sp[None, :], now - start[job_a][:, None])
        want = savings_oracle(
            wl_a, rem_a, release_a, partner_wl[single], rem[single] / sp, bud, sp, tab, q_slo, q_gain, slo,
            bud_a, ~shared_elsewhere[partner[single]],
        )
        assert np.isneginf(want[:, 0]).all()  # the resident that shares another GPU
        assert np.isfinite(want).any() and np.array_equal(got, want)
        assert np.array_equal(n_good, (want > 0).sum(axis=1)) and not costly.any()
        # A reservation with shadow time t: cells that hold a GPU released by t past it take a spare GPU (or are
        # forbidden without one); the reserved job's own row is exempt.
        t = float(np.median(rem[single] / sp))
        for spare in (0, 2):
            exempt = job_a == job_a[1]
            got_r, _, costly = savings(joiners, release_a, single, (partner, partner_wl, rem), speed, job_arrays,
                                       pairs, knobs, shared_elsewhere, fresh_ok, (int(job_a[1]), t, spare))
            want_r, want_costly = savings_oracle(
                wl_a, rem_a, release_a, partner_wl[single], rem[single] / sp, bud, sp, tab, q_slo, q_gain, slo,
                bud_a, ~shared_elsewhere[partner[single]], (t, spare, exempt),
            )
            assert np.array_equal(got_r, want_r) and np.array_equal(costly, want_costly)
            held[spare] += int(costly.sum()) if spare else int(np.isfinite(want).sum() - np.isfinite(want_r).sum())
    assert held[0] > 0 and held[2] > 0
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
    from sharewise.engine.free_gpus import packed_block

    rng = np.random.default_rng(seed)
    per_node = int(rng.choice([1, 2, 4, 8]))
    n_gpus = per_node * int(rng.integers(1, 7))
    node = np.arange(n_gpus) // per_node
    occupancy = rng.integers(0, 3, n_gpus) * (rng.random(n_gpus) < 0.6)
    for k in range(1, n_gpus + 2):
        want = pick_oracle(occupancy == 0, node, k)
        got = gpus.pick_free_gpus(occupancy, node, k)
        if want is None:
            assert got.shape[0] == 0 and packed_block(occupancy == 0, node, k) is None
        else:
            assert np.array_equal(got, np.sort(want))
            assert np.array_equal(packed_block(occupancy == 0, node, k), np.sort(want))


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
    from sharewise.engine.validation import _all_valid, _walk_placements
    from sharewise.errors import InvalidPlacementError

    queue, cluster, tab = random_state(seed % 6)
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


def _single_gpu_jobs(resident: np.ndarray, ngpus: list[int], g: int, job: int, pair: bool) -> int:
    """Put job ``job`` alone on GPU ``g`` (and job ``job + 1`` beside it with ``pair``); return the next job id."""
    for slot in range(2 if pair else 1):
        resident[g, slot] = job
        ngpus.append(1)
        job += 1
    return job


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
            job = _single_gpu_jobs(resident, ngpus, g, job, pair=kind == "pair")
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


def _srpt_case(seed: int, reserve: bool = False):
    """``(kernel, oracle)``: SRPT's preemptions on ``_random_preemption_state(seed)``, with some queued jobs
    started and some running ones stopped by the steps before it, each as (starts, victims stopped); with
    ``reserve``, a reservation for a queued job (shadow time shorter than some waiting jobs, 0-2 spare GPUs)."""
    from policy_oracles import srpt_preemptions

    from sharewise.policy.ours import srpt
    from sharewise.policy.ours.arrays import jobs_of, knobs_of
    from sharewise.policy.ours.params import PARAMS
    from sharewise.policy.ours.stage import Stage

    # Half the cases with a restart cost as long as a short job: the bounds with and without it then part.
    queue, cluster, now = _random_preemption_state(seed, delay=60.0 if seed % 2 else 3_000.0)
    rng = np.random.default_rng(1000 + seed)
    started = [int(j) for j in queue.job if rng.random() < 0.2]
    running = np.unique(cluster.resident[cluster.resident >= 0])
    stopped = [int(j) for j in running if rng.random() < 0.1]
    knobs = knobs_of(PARAMS, cluster, now, cluster.slo)
    start = [Placement(j, (0,)) for j in started]
    reserved = NONE
    if reserve:
        # A victim has more than 4x its preemptor's run time left, so it is the free GPUs a preemptor takes that the
        # reservation counts on: a shadow time shorter than some waiting jobs' run times makes those take spares.
        shadow = float(rng.choice(queue.remaining)) * rng.uniform(0.0, 0.5)
        reserved = Reservation(int(rng.choice(queue.job)), shadow, int(rng.integers(0, 3)))
    taken, victims = srpt.preemptions(queue, start, stopped, Stage.of(queue, cluster), jobs_of(cluster), knobs,
                                      reserved)
    got = ([(int(np.searchsorted(queue.job, p.job)), tuple(sorted(p.gpus))) for p in taken], victims)
    want = srpt_preemptions(queue, started, stopped, cluster.occupancy(), cluster, now, cluster.slo,
                            cluster.preempt_delay_s, PARAMS.preempt_ratio, PARAMS.slack_share, PARAMS.urgency,
                            PARAMS.max_preemptions, PARAMS.srpt_head, tuple(reserved))
    return got, want


@pytest.mark.parametrize("seed", range(60))
def test_srpt_preempts_the_victims_the_oracle_takes(seed):
    """The SRPT kernel (its quick bound, victims kept from one waiting job to the next, sizes that failed, and a
    reservation in half the cases) starts the jobs the oracle starts, on the same GPUs, stopping the same
    victims."""
    got, want = _srpt_case(seed, reserve=seed % 2 == 1)
    assert got == want


def test_srpt_reservation_cases_refuse_some_preemptions():
    """The reservation cases of the test above hold SRPT back in some cases (a preemption that would take a GPU
    released by the shadow time past it, with no spare GPU) and not in others."""
    held = same = 0
    for seed in range(1, 60, 2):
        (taken, _), _ = _srpt_case(seed, reserve=True)
        (free_taken, _), _ = _srpt_case(seed, reserve=False)
        held += len(taken) < len(free_taken)
        same += len(taken) == len(free_taken) > 0
    assert held >= 3 and same >= 3


def test_srpt_cases_exercise_the_rule():
    starts = stops = 0
    for seed in range(60):
        (taken, victims), _ = _srpt_case(seed)
        starts += len(taken)
        stops += len(victims)
    assert starts > 10 and stops > 10


def _random_sharing_state(seed: int):
    """A cluster of 16 GPUs on 2 nodes (two speeds) where jobs share: two single-GPU jobs on a GPU, a 2-GPU hub
    with a partner on each GPU, two 2-GPU jobs on the same GPUs, a 2-GPU job sharing with a 2-GPU job on one
    GPU only (a chain, no group), and jobs alone; slowdowns of 4 workloads in [1, 3]; jobs near their SLO; pairs
    formed at random times around the recheck window. Returns ``(cluster, q, n, placed_at, now)``."""
    rng = np.random.default_rng(seed)
    n_gpus, now, n = 16, 50_000.0, 4
    resident = np.full((n_gpus, 2), -1, np.int64)
    ngpus, job, g = [], 0, 0
    while g < n_gpus:
        kind = rng.choice(["pair", "hub", "twin", "chain", "lone"], p=[0.3, 0.2, 0.2, 0.1, 0.2])
        if kind in ("hub", "twin") and g + 1 < n_gpus:
            resident[g : g + 2, 0] = job
            if kind == "hub":
                resident[g : g + 2, 1] = [job + 1, job + 2]
                ngpus += [2, 1, 1]
                job += 3
            else:
                resident[g : g + 2, 1] = job + 1
                ngpus += [2, 2]
                job += 2
            g += 2
        elif kind == "chain" and g + 2 < n_gpus:
            resident[g : g + 2, 0] = job
            resident[g + 1 : g + 3, 1] = job + 1
            ngpus += [2, 2]
            job, g = job + 2, g + 3
        else:
            job = _single_gpu_jobs(resident, ngpus, g, job, pair=kind == "pair")
            g += 1
    work = rng.uniform(1_000.0, 20_000.0, job)
    remaining = work * rng.uniform(0.05, 1.0, job)
    start = now - rng.uniform(0.2, 1.2, job) * work
    cluster = ClusterState(
        resident=resident, node=np.arange(n_gpus) // 8, speed=rng.choice([0.7, 1.0], n_gpus),
        job_remaining=remaining, job_workload=rng.integers(0, n, job), job_ngpus=np.array(ngpus, np.int64),
        job_start=start, job_work=work, slo=2.0, preempt_delay_s=60.0, cross_node_slowdown=1.1,
        job_attained=np.zeros(job), job_arrival=np.zeros(job),
    )
    q = rng.uniform(1.0, 3.0, n * n)
    placed_at = now - rng.uniform(0.0, 4.0, n_gpus)  # recheck_s is 2 s: about half formed just now
    return cluster, q, n, placed_at, now


def _rescue_case(seed: int):
    from policy_oracles import rescue_pauses

    from sharewise.policy.ours.arrays import gpus_of, jobs_of, knobs_of
    from sharewise.policy.ours.params import PARAMS
    from sharewise.policy.ours.rescue import rescue_kernel

    cluster, q, n, placed_at, now = _random_sharing_state(seed)
    knobs = knobs_of(PARAMS, cluster, now, cluster.slo)
    got = rescue_kernel(placed_at, q, n, tuple(gpus_of(cluster)), tuple(jobs_of(cluster)), tuple(knobs)).tolist()
    want = rescue_pauses(cluster, q, n, placed_at, now, cluster.slo, cluster.preempt_delay_s, PARAMS.urgency,
                         PARAMS.recheck_s)
    return got, want


@pytest.mark.parametrize("seed", range(60))
def test_the_slo_rescue_pauses_the_jobs_the_oracle_pauses(seed):
    """The rescue kernel (single-GPU pairs in its first pass, groups with a multi-GPU job gathered after) pauses
    the jobs the oracle pauses, in the same order, on random clusters of every kind of group."""
    got, want = _rescue_case(seed)
    assert got == want


def test_the_rescue_cases_exercise_the_rule():
    paused = multi = 0
    for seed in range(60):
        got, _ = _rescue_case(seed)
        cluster = _random_sharing_state(seed)[0]
        paused += len(got)
        multi += sum(int(cluster.job_ngpus[j] > 1) for j in got)
    assert paused > 30 and multi > 5


def _reservation_case(seed: int, share: float):
    """``(kernel, oracle)``: a ``sharewise`` call's placements and reservation (steps 1 and 2) on
    ``random_state(seed)`` (12 GPUs, jobs of 1, 2 and 4 GPUs) with jobs of at least ``share`` of the GPUs reserved;
    half the cases with the summed-saving assignment, some with p50 != p90."""
    from policy_oracles import sharewise_placements

    from sharewise.policy.ours import placement
    from sharewise.policy.ours.arrays import gpus_of, jobs_of, knobs_of, pairs_of
    from sharewise.policy.ours.params import Params

    queue, cluster, tab = random_state(seed)
    order = "sum" if seed % 2 else "sjf"
    quantile = "p50" if seed % 3 == 0 else "p90"
    params = Params(reserve_share=share, quantile=quantile, share_fresh="always" if seed % 5 == 0 else "idle")
    now = 50.0
    knobs = knobs_of(params, cluster, now, cluster.slo)
    got = placement.place(queue, gpus_of(cluster), jobs_of(cluster), pairs_of(tab, "p90", quantile), knobs, order)
    want = sharewise_placements(queue, cluster, tab, now, cluster.slo, quantile=quantile, order=order,
                                share_fresh=params.share_fresh, reserve_share=share, reservation=True)
    return (got[0], tuple(got[1])), want


@pytest.mark.parametrize("seed", range(40))
def test_the_reservation_places_as_the_oracle(seed):
    """Steps 1 and 2 with the reservation (``reservation``: the head, its shadow time on the releases once the jobs
    ahead of it started, EASY's walk behind it, joins that take spare GPUs or are forbidden, a reserved job that
    joins) place the jobs the oracle places, on the same GPUs, and leave the same reservation."""
    got, want = _reservation_case(seed, 0.3)
    assert got == want


def test_the_reservation_cases_exercise_the_rule():
    """The cases above reserve a job in most calls, and the reservation changes the placements in some: it holds
    back a start or a join that would delay the reserved job."""
    reserved = changed = 0
    for seed in range(40):
        (placed, (job, shadow, _)), _ = _reservation_case(seed, 0.3)
        (free, (none, _, _)), _ = _reservation_case(seed, math.inf)
        reserved += job >= 0 and shadow < math.inf
        changed += placed != free
        assert none == -1
    assert reserved >= 15 and changed >= 5
