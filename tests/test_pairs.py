"""Real pair runs on the CPU: slowdowns, the pinned-core fact, failures recorded as rows, no orphans."""

import os
import time

import psutil
import pytest

from sharewise.profiler.config import RunConfig
from sharewise.profiler.modes import Placement, placements
from sharewise.profiler.pair import PairTask, aggregate, cv, measure_pair
from sharewise.profiler.session import RepeatResult, Window, Worker, common_window

FAST = RunConfig(
    window_s=0.5,
    repeats=3,
    max_repeats=4,
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


def test_cpu_pair_measures_real_interference(user_spec):
    row = measure_pair(_task(user_spec, "TinyConv", "MatmulLoop"), FAST, "cpu0")
    assert row["status"] == "ok", row["error"]
    assert row["trials"] >= 3
    # A compute-bound conv net sharing both cores with another busy process loses close to half its speed.
    # (The tiny matmul loop can even speed up next to a partner: its threads sleep between small ops when
    # alone, OMP_WAIT_POLICY=PASSIVE; so only its being measured is asserted.)
    assert 1.3 < row["slowdown_a"] < 3.5
    assert 0.3 < row["slowdown_b"] < 3.5
    assert row["steps_a"] >= FAST.min_window_steps and row["steps_b"] >= FAST.min_window_steps
    assert row["solo_a"] > row["coloc_a"] and 0 <= row["other_cpu_frac"] < 1
    assert not _no_orphans()


def test_two_processes_pinned_to_one_core_halve_each_other(user_spec):
    """The robust fact: two 1-thread processes on one core each run at about half speed.

    The scheduler shares the core fairly over the run, so the two normalized speeds add up to one core
    (1/s_a + 1/s_b = 1) tightly; within one window either side may be ahead by a few percent.
    """
    core = min(os.sched_getaffinity(0))
    pinned = [Placement((core,), 1), Placement((core,), 1)]
    config = FAST.replace(window_s=1.0)
    row = measure_pair(_task(user_spec, "MatmulLoop", "MatmulLoop"), config, "cpu0", pinned=pinned)
    assert row["status"] == "ok", row["error"]
    assert 1 / row["slowdown_a"] + 1 / row["slowdown_b"] == pytest.approx(1.0, abs=0.06)
    assert (row["slowdown_a"] + row["slowdown_b"]) / 2 == pytest.approx(2.0, abs=0.1)
    assert row["slowdown_a"] == pytest.approx(2.0, abs=0.25)
    assert row["slowdown_b"] == pytest.approx(2.0, abs=0.25)


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
    finally:
        worker.close()


@pytest.mark.parametrize(
    "bad, status, text, env",
    [
        ("RaisesInStep", "failed", "boom", {}),
        ("Hangs", "timeout", "no 'ready'", {}),
        ("LeaksMemory", "oom", "", {"SHAREWISE_TEST_MEMLIMIT_MB": "3000", "SHAREWISE_TEST_LEAK_MB": "256"}),
    ],
)
def test_misbehaving_workload_is_recorded_and_partner_stopped(user_spec, monkeypatch, bad, status, text, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    config = FAST.replace(timeout_s=20, warmup_max_s=5)
    row = measure_pair(_task(user_spec, "TinyMLP", bad), config, "cpu0")
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
    assert common_window(config, [10.0, 20.0], 1) == 1.0
    assert common_window(config, [300.0], 2) == pytest.approx(10 * 0.3 * 2 * 1.2)


def test_aggregate_means_and_cv():
    def rep(sa, ca, sb, cb):
        w = lambda tp: Window(20, 1.0, tp, 1, 1, 1, 1)  # noqa: E731
        return RepeatResult([w(sa), w(sb)], [w(ca), w(cb)], 1.0, 0.01)

    agg = aggregate(PairTask("a", "b", "a", "b"), [rep(10, 5, 8, 4), rep(10, 4, 8, 4)])
    assert agg["slowdown_a"] == pytest.approx((2.0 + 2.5) / 2)
    assert agg["slowdown_b"] == pytest.approx(2.0) and agg["cv_b"] == 0.0
    assert agg["cv_a"] == pytest.approx(cv([2.0, 2.5]))


@pytest.mark.gpu
def test_cuda_timeslice_pair_synchronizes_and_measures(user_spec):
    config = FAST.replace(device="cuda:0", mode="timeslice")
    row = measure_pair(_task(user_spec, "MatmulLoop", "MatmulLoop"), config, "gpu")
    assert row["status"] == "ok", row["error"]
    assert row["device_kind"] == "cuda" and row["device_name"] != "gpu"  # read from the device
    assert row["slowdown_a"] > 1.2 and row["slowdown_b"] > 1.2  # two compute-bound jobs contend


@pytest.mark.gpu
def test_cuda_profile_has_memory_and_nvml_features(user_spec):
    from sharewise.profiler.api import profile_one

    row = profile_one(
        user_spec("MatmulLoop"), FAST.replace(device="cuda:0", mode="timeslice", features=True, repeats=2)
    )
    assert row["f_mem_peak_allocated_bytes"] > 0
    assert row["f_kernels_per_step"] >= 4
    assert "f_nvml_sm_util_mean" in row
