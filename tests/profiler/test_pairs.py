"""Real pair runs on the CPU: slowdowns, the pinned-core fact, failures recorded as rows, no orphans.

Tests that assert on measured numbers go through ``measure_quietly``: they retry when foreign processes
loaded the measured cores during the windows (or, for the tight pinned-core bounds, when the repeats
disagree), and skip with that reason rather than fail falsely.
"""

import math
import os
import time

import psutil
import pytest
from loadguard import QUIET_LIMIT, clearly_above_one, load_problem, measure_quietly, quietest_core

from sharewise.profiler.config import DISTURBANCE_LIMIT, RunConfig
from sharewise.profiler.executors.local import LocalExecutor
from sharewise.profiler.hostload import wait_until_idle
from sharewise.profiler.modes import CoreAssignment, placements
from sharewise.profiler.pair import PairTask, aggregate, ci_halfwidth, cv, measure_pair, precise_enough
from sharewise.profiler.session import RepeatResult, Window, Worker, common_window
from sharewise.profiler.worker import summarize_window

FAST = RunConfig(
    window_s=0.5,
    repeats=3,
    max_repeats=6,
    warmup_steps=10,
    idle_wait_s=2.0,
    disturbance_retries=1,
    features=False,
    timeout_s=120,
)


def _task(user_spec, a, b):
    return PairTask(user_spec(a), user_spec(b), a, b)


def _no_orphans():
    return [p for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != "zombie"]


def _quiet_pair(task, config, what, pinned_to_one_core=False, limit=QUIET_LIMIT, max_ci=None):
    """Measure ``task`` until no foreign load disturbed its windows (see ``measure_quietly``).

    Disturbed repeats are rerun inside the pair run first (``disturbance_limit``). A pinned pair runs on
    the core that was least busy just before; its ``other_cpu_frac`` is the larger of the foreign share of
    that core and of the machine (load on the other core slows it too). No attempt starts on a busy machine.
    With ``max_ci`` an unsteady machine disturbs too (``_unsteady``).
    """
    config = config.replace(disturbance_limit=limit, disturbance_retries=2)

    def before():
        share = wait_until_idle(limit, max_wait_s=5.0)
        return load_problem(max(share, quietest_core()[1]) if pinned_to_one_core else share, limit)

    def measure():
        pinned = None
        if pinned_to_one_core:
            core, _ = quietest_core()
            pinned = [CoreAssignment((core,), 1), CoreAssignment((core,), 1)]
        with LocalExecutor(config, "cpu0") as executor:
            row = measure_pair(task, config, "cpu0", executor.pool, pinned=pinned)
        assert row["status"] == "ok", row["error"]
        unsteady = _unsteady(row, max_ci) if max_ci is not None else None
        return row, load_problem(row["other_cpu_frac"], limit) or unsteady

    return measure_quietly(measure, what, before=before)


def _unsteady(row, max_ci):
    """Say so when the machine's speed drifted during a pair run, else None.

    A VM's speed drifts with load on its host that no process here shows: then the repeats' slowdowns
    stay uncertain by more than ``max_ci`` (95% half-width, after the pair run's own extra repeats), or,
    for a workload paired with itself, its two processes ran alone at different speeds.
    """
    spread = max(row["ci_a"], row["ci_b"])
    if spread > max_ci:
        return f"repeats disagree: 95% half-width {spread:.1%} (limit {max_ci:.0%})"
    drift = abs(row["solo_a"] / row["solo_b"] - 1)
    if row["workload_a"] == row["workload_b"] and drift > 2 * max_ci:
        return f"one workload's solo speed differed by {drift:.0%} between its processes (limit {2 * max_ci:.0%})"
    return None


@pytest.mark.slow
def test_cpu_pair_measures_real_interference(user_spec):
    """A compute-bound conv net sharing both cores with another busy process loses speed: on any machine.

    How much depends on the machine (it lost about half on this VM when idle, and 4.71x once under host
    steal that no quiet check saw), so the assertion is the property that holds everywhere: the slowdown is
    measured, finite and above 1 by more than its own 95% half-width. Repeats that disagree by more than
    ``UNSTEADY_CI`` make the attempt disturbed (retried, then skipped), not failed. (The tiny matmul loop can
    even speed up next to a partner: its threads sleep between small ops when alone, OMP_WAIT_POLICY=PASSIVE;
    so only its being measured is asserted.)
    """
    row = _quiet_pair(
        _task(user_spec, "TinyConv", "MatmulLoop"), FAST, "conv next to matmul", limit=DISTURBANCE_LIMIT,
        max_ci=UNSTEADY_CI,
    )
    assert row["trials"] >= 3
    clearly_above_one(row["slowdown_a"], row["ci_a"], "conv's slowdown next to matmul")
    assert math.isfinite(row["slowdown_b"]) and row["slowdown_b"] > 0 and math.isfinite(row["ci_b"])
    assert row["steps_a"] >= FAST.min_window_steps and row["steps_b"] >= FAST.min_window_steps
    assert row["solo_a"] > row["coloc_a"] and 0 <= row["other_cpu_frac"] < 1
    assert not _no_orphans()


#: 95% half-width of a slowdown beyond which a pair run's repeats are taken to disagree (an unsteady machine).
UNSTEADY_CI = 0.25


#: What time-sharing one core costs beyond halving it (context switches, refetched caches, a VM's timer
#: exits): on this 2-vCPU VM, idle, two pinned MatmulLoops together ran at 0.88-0.98 of one alone in
#: repeats that agreed (CV under 5%, the same solo speed back to back).
SWITCH_COST = 0.12


@pytest.mark.slow
def test_two_processes_pinned_to_one_core_halve_each_other(user_spec):
    """The robust fact: two 1-thread processes on one core each run at about half speed.

    The scheduler shares the core fairly, so the two normalized speeds are equal within a few percent and
    add up to one core less the switching cost (``SWITCH_COST`` here; the floor allows twice it), never more.
    Only while nothing else runs: on this VM a busy other core alone moved a repeat's sum to 0.73-0.96, and its
    speed drifts with load on its host that no process here shows (a spin loop ran at 4.4-8.1 M/s with zero
    steal time), so the repeats must also agree (95% half-width within 3%) and the two processes must run
    alone at the same speed. Warm workers: two process starts, then short repeats until the interval is narrow.
    """
    task = _task(user_spec, "MatmulLoop", "MatmulLoop")
    config = FAST.replace(window_s=0.4, max_repeats=8, isolation="warm")
    row = _quiet_pair(task, config, "two matmuls pinned to one core", pinned_to_one_core=True, max_ci=0.03)
    seen = {k: row[k] for k in ("slowdown_a", "slowdown_b", "solo_a", "solo_b", "trials", "ci_a", "other_cpu_frac")}
    total = 1 / row["slowdown_a"] + 1 / row["slowdown_b"]
    # Never more than the one core; the floor allows twice the switching cost this VM showed, so a machine
    # whose switches cost more does not fail a quiet window.
    assert 1.0 - 2 * SWITCH_COST <= total <= 1.06, seen
    assert 1 / row["slowdown_a"] == pytest.approx(total / 2, rel=0.12), seen
    assert 1 / row["slowdown_b"] == pytest.approx(total / 2, rel=0.12), seen


@pytest.mark.slow
def test_stop_that_beats_the_tail_loop_is_not_lost(user_spec):
    """The driver answers a tail window's "measured" with "stop" at once; on a busy machine that stop can
    reach the worker before its tail loop starts. It must still end the tail (it once was cleared and lost,
    and the worker stepped on for good). Sending "stop" inside the window makes that order certain."""
    (place,) = placements(FAST, 1)
    worker = Worker(user_spec("MatmulLoop"), FAST, place)
    try:
        worker.recv("ready", 60)
        for tail in (True, False):
            start_at = time.time() + 1.0
            worker.send(cmd="measure", start_at=start_at, window_s=1.0, min_steps=3, tail=tail)
            if tail:
                time.sleep(max(0.0, start_at + 0.3 - time.time()))
                worker.send(cmd="stop")
            assert worker.recv("measured", 20)["steps"] >= 3  # the second window: the tail loop had ended
            if tail:
                worker.recv("stopped", 20)
    finally:
        worker.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad, status, text, env",
    [
        ("RaisesInStep", "failed", "boom", {}),
        ("Hangs", "timeout", "no 'ready'", {}),
        ("LeaksMemory", "oom", "", {"SHAREWISE_TEST_MEMLIMIT_MB": "3000", "SHAREWISE_TEST_LEAK_MB": "256"}),
    ],
)
def test_misbehaving_workload_is_recorded_and_partner_stopped(user_spec, monkeypatch, bad, status, text, env):
    """Fresh isolation: one attempt, recorded at once (warm isolation retries: test_profiler_faults.py)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    # Room for a worker start-up on a busy machine; the hang is recorded at the timeout whatever the machine's load,
    # so it waits half as long.
    config = FAST.replace(timeout_s=15 if bad == "Hangs" else 30, warmup_max_s=5, isolation="fresh")
    with LocalExecutor(config, "cpu0") as executor:
        row = executor.run(_task(user_spec, "TinyMLP", bad)).row
    assert row["status"] == status, row["error"]
    assert text in row["error"]
    assert row["trials"] == 0
    assert not _no_orphans(), "the partner process must be stopped too"


def test_cpu_partition_splits_cores():
    config = RunConfig(mode="cpu-partition")
    a, b = placements(config, 2)
    if len(os.sched_getaffinity(0)) >= 2:
        assert set(a.cores).isdisjoint(b.cores) and a.threads == len(a.cores)
    shared = placements(RunConfig(mode="cpu"), 2)
    assert shared[0].cores == shared[1].cores


def test_window_holds_enough_steps():
    config = RunConfig(window_s=1.0, min_window_steps=10)
    assert common_window(config, [10.0, 20.0]) == 1.0
    # Sized for the slowest worker's solo steps; a co-located window is extended by the worker itself.
    assert common_window(config, [300.0, 20.0]) == pytest.approx(10 * 0.3 * 1.2)


def test_aggregate_means_and_cv():
    def rep(sa, ca, sb, cb):
        w = lambda tp: Window(20, 1.0, tp, 1, 1, 1, 1)  # noqa: E731
        return RepeatResult([w(sa), w(sb)], [w(ca), w(cb)], 1.0, 0.01)

    agg = aggregate(PairTask("a", "b", "a", "b"), [rep(10, 5, 8, 4), rep(10, 4, 8, 4)])
    assert agg["slowdown_a"] == pytest.approx((2.0 + 2.5) / 2)
    assert agg["slowdown_b"] == pytest.approx(2.0) and agg["cv_b"] == 0.0
    assert agg["cv_a"] == pytest.approx(cv([2.0, 2.5]))
    # t(0.975, 1) = 12.706: two repeats 20% apart leave the slowdown wide open.
    assert agg["ci_a"] == pytest.approx(12.706 * cv([2.0, 2.5]) / 2**0.5, rel=1e-4) and agg["ci_b"] == 0.0
    one = aggregate(PairTask("a", "b", "a", "b"), [rep(10, 5, 8, 4)])
    assert one["ci_a"] != one["ci_a"]  # NaN: one repeat tells nothing about the spread


def test_sequential_stopping_waits_for_a_narrow_interval():
    def rep(ca):
        w = lambda tp: Window(20, 1.0, tp, 1, 1, 1, 1)  # noqa: E731
        return RepeatResult([w(10.0), w(10.0)], [w(ca), w(5.0)], 1.0, 0.0)

    config = RunConfig(repeats=3, max_repeats=6, ci_target=0.02)
    steady = [rep(5.0), rep(5.01), rep(4.99)]
    assert not precise_enough(steady[:2], config)  # fewer than the minimum
    assert precise_enough(steady, config)
    noisy = [rep(5.0), rep(5.5), rep(4.5)]
    assert not precise_enough(noisy, config)
    assert precise_enough(noisy * 2, config)  # the maximum stops it, narrow or not
    assert ci_halfwidth([2.0, 2.0, 2.0]) == 0.0 and ci_halfwidth([2.0]) == float("inf")


def test_summarize_window_uses_the_one_percentile():
    # Linear interpolation (sharewise.stats.percentile): p95 of 1..20 ms sits at rank 18.05, 19.05 ms.
    times = [i / 1e3 for i in range(20, 0, -1)]
    out = summarize_window(times, 0.25)
    assert out["steps"] == 20 and out["throughput"] == 80.0
    assert out["step_mean_ms"] == pytest.approx(10.5) and out["step_p50_ms"] == pytest.approx(10.5)
    assert out["step_p95_ms"] == pytest.approx(19.05) and out["step_p99_ms"] == pytest.approx(19.81)


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_timeslice_pair_synchronizes_and_measures(user_spec):
    config = FAST.replace(device="cuda:0", mode="timeslice")
    with LocalExecutor(config, "gpu") as executor:
        row = executor.run(_task(user_spec, "MatmulLoop", "MatmulLoop")).row
    assert row["status"] == "ok", row["error"]
    assert row["device_kind"] == "cuda" and row["device_name"] != "gpu"  # read from the device
    # Two compute-bound jobs contend on any GPU: each slowdown is clearly above 1 (how far depends on the GPU).
    clearly_above_one(row["slowdown_a"], row["ci_a"], "first matmul's slowdown")
    clearly_above_one(row["slowdown_b"], row["ci_b"], "second matmul's slowdown")


@pytest.mark.slow
@pytest.mark.gpu
def test_cuda_profile_has_memory_and_nvml_features(user_spec):
    from sharewise.profiler.api import profile_one

    row = profile_one(
        user_spec("MatmulLoop"), FAST.replace(device="cuda:0", mode="timeslice", features=True, repeats=2)
    )
    assert row["f_mem_peak_allocated_bytes"] > 0
    assert row["f_kernels_per_step"] >= 4
    assert "f_nvml_sm_util_mean" in row


# --- precision that holds, the solo rule, solo windows shared by a workload's pairs -------------------------


def test_a_row_says_whether_its_interval_met_the_target_and_an_extension_widens_windows():
    from sharewise.profiler.pair import extension_config, judge_precision

    assert judge_precision(0.02, 0.049, 0.05) == "met"
    assert judge_precision(0.02, 0.866, 0.05) == "missed"  # transformer next to vgg16 on the H200: +-87%
    assert judge_precision(0.02, math.nan, 0.05) == "missed"  # one repeat: nothing known about the spread
    config = RunConfig(window_s=0.3, repeats=3, max_repeats=6, max_window_s=1.0)
    assert extension_config(config, 0) is config
    one, two = extension_config(config, 1), extension_config(config, 2)
    assert (one.window_s, one.max_repeats) == (pytest.approx(0.6), 12)
    assert (two.window_s, two.max_repeats) == (1.0, 18)  # capped by max_window_s
    assert one.ci_target == config.ci_target and one.repeats == config.repeats


def test_a_profile_runs_on_the_host_share_of_a_pair_member_in_every_mode():
    """The solo rule: a job alone gets what it has next to a partner, so the profile's worker serves pairs."""
    from sharewise.profiler.modes import SHARING_MODES, modes_for
    from sharewise.profiler.solo import solo_placement

    for mode in SHARING_MODES.names():
        device = "cpu" if mode in modes_for("cpu") else "cuda:0"
        config = RunConfig(device=device, mode=mode)
        first = placements(config, 2)[0]
        assert solo_placement(config) == first, mode
    gpu = RunConfig(device="cuda:0", mode="timeslice")
    assert solo_placement(gpu).threads == max(1, len(os.sched_getaffinity(0)) // 2)
    assert RunConfig().solo_reuse == 0.0 and gpu.solo_reuse > 0  # a CPU's speed drifts; a GPU's holds
    assert RunConfig(solo_reuse_s=5).solo_reuse == 5.0


@pytest.mark.slow
def test_a_workloads_later_pairs_take_its_recent_solo_windows(user_spec):
    """With solo reuse on, the second pair of a warm worker measures its shared windows and its partner's solos;
    the repeated workload's solos come from the first pair, one distinct window per repeat."""
    from sharewise.profiler.pair import measure_pair_repeats

    config = RunConfig(size="tiny", window_s=0.2, repeats=2, max_repeats=2, idle_wait_s=0.5, features=False,
                       timeout_s=60, solo_reuse_s=60, disturbance_retries=0)
    mlp, conv, embed = (user_spec(c) for c in ("TinyMLP", "TinyConv", "TinyEmbed"))
    with LocalExecutor(config, "cpu0") as executor:
        pool = executor.pool
        first, kept_first = measure_pair_repeats(PairTask(mlp, conv, "tiny_mlp", "tiny_conv"), config, "cpu0", pool)
        assert first["status"] == "ok" and pool.solos.reused == 0
        second, kept_second = measure_pair_repeats(PairTask(mlp, embed, "tiny_mlp", "tiny_embed"), config, "cpu0",
                                                   pool)
        assert second["status"] == "ok", second["error"]
        assert pool.solos.reused == 2  # tiny_mlp's two solo windows of the first pair, one per repeat
        firsts = {id(r.solo[0]) for r in kept_first}
        assert {id(r.solo[0]) for r in kept_second} == firsts  # the same windows, each once
        assert len({id(r.solo[1]) for r in kept_second} & {id(r.solo[1]) for r in kept_first}) == 0
    assert not _no_orphans()
