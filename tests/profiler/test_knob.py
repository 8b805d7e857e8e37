"""Tests of the sharing knob: splits, the one error where a mode has no knob or the machine cannot set it, the MPS
environment, and CPU quotas through the cgroup CPU controller (a real one where this machine lets us write it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from loadguard import LoadWindow

from sharewise.errors import ConfigError
from sharewise.profiler.knob import (
    MPS_THREADS,
    PERIOD_US,
    CpuQuota,
    KnobError,
    Split,
    knob_for,
    parse_splits,
)


def test_a_split_reads_writes_and_swaps():
    assert Split.parse("70:30") == Split(0.7) == Split.parse("70")
    assert str(Split(0.7)) == "70:30" and Split(0.7).swapped() == Split(0.3)
    assert (Split(0.25).percent_a, Split(0.25).percent_b) == (25, 75)
    assert parse_splits(["70:30,50:50", "70:30"]) == (Split(0.7), Split(0.5))
    for bad, why in (("70:20", "add up to 100"), ("seventy", "A:B"), ("100:0", "between 5 and 95"),
                     ("2:98", "between 5 and 95")):
        with pytest.raises(ConfigError, match=why):
            Split.parse(bad)


def test_timeslice_has_no_knob_and_says_what_has_one():
    with pytest.raises(KnobError, match="'timeslice' sharing mode has no knob.*--mode mps.*cpu"):
        knob_for("timeslice").check()


def test_mps_sets_each_clients_thread_percentage_at_start():
    knob = knob_for("mps")
    assert not knob.live and knob.environment(0.7) == {MPS_THREADS: "70"}


# ---- CPU quotas: the files the kernel reads (a cgroup tree in a folder: the kernel itself is tested below) ----


def _tree(tmp_path, version):
    if version == "v2":
        (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (tmp_path / "cgroup.subtree_control").write_text("")
    else:
        cpu = tmp_path / "cpu"
        cpu.mkdir()
        (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    return tmp_path


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cpu_quota_is_share_times_cores_per_period(tmp_path, version):
    root = _tree(tmp_path, version)
    knob = CpuQuota("cpu", cores=2, root=root)
    assert knob.controller()[0] == version
    knob.apply(os.getpid(), 0.7)  # the files only: nothing here is the kernel
    group = knob._groups[os.getpid()]
    if version == "v2":
        assert (group / "cpu.max").read_text() == f"{int(0.7 * 2 * PERIOD_US)} {PERIOD_US}"
        assert (group / "cgroup.procs").read_text() == str(os.getpid())
    else:
        assert (group / "cpu.cfs_quota_us").read_text() == str(int(0.7 * 2 * PERIOD_US))
        assert (group / "cpu.cfs_period_us").read_text() == str(PERIOD_US)
    assert knob.quota_of(os.getpid()) == pytest.approx(0.7)


def test_no_cgroup_controller_is_one_clear_error(tmp_path):
    with pytest.raises(KnobError, match="no cgroup CPU controller under .*run without --split"):
        CpuQuota("cpu", cores=2, root=tmp_path).check()


def _writable_cpu_controller() -> str | None:
    """Why a real quota cannot be tested here, or None when it can."""
    try:
        knob_for("cpu").check()
    except KnobError as exc:
        return str(exc)
    return None


@pytest.mark.skipif(_writable_cpu_controller() is not None, reason=f"no writable cgroup CPU controller: "
                    f"{_writable_cpu_controller()}")
def test_a_check_alone_leaves_no_cgroup_behind():
    # ``pairs --split`` and ``run`` check the knob before anything runs; a check must not leave its process's
    # cgroup on the machine (one empty ``sharewise-<pid>`` per command, before this was fixed).
    knob = knob_for("cpu")
    _version, where = knob.controller()
    knob.check()
    assert not (where / f"sharewise-{os.getpid()}").exists()
    knob.apply(os.getpid(), 0.9)  # a knob in use keeps its parent through a later check, until it is closed
    try:
        knob.check()
        assert (where / f"sharewise-{os.getpid()}").is_dir()
    finally:
        knob.close()
    assert not (where / f"sharewise-{os.getpid()}").exists()


@pytest.mark.skipif(_writable_cpu_controller() is not None, reason=f"no writable cgroup CPU controller: "
                    f"{_writable_cpu_controller()}")
def test_the_kernel_throttles_a_busy_process_to_its_quota_and_lets_it_go():
    knob = knob_for("cpu")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        knob.apply(busy.pid, 0.1)
        assert knob.quota_of(busy.pid) == pytest.approx(0.1)
        # A busy loop under a tenth of the cores is throttled within a few periods, however loaded the machine is,
        # as soon as it runs at all; wait up to 10 s for that.
        # On a machine so loaded that the loop never gets a tenth of the cores, nothing is throttled: that window
        # says nothing about the quota, and the test skips naming the load.
        with LoadWindow(pids=[busy.pid]) as window:
            deadline = time.monotonic() + 10
            while knob.throttled(busy.pid) == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
        if knob.throttled(busy.pid) == 0 and window.problem() is not None:
            pytest.skip(f"the busy loop was never throttled while {window.problem()}")
        assert knob.throttled(busy.pid) > 0
        knob.release(busy.pid)
        assert knob.quota_of(busy.pid) is None
    finally:
        busy.kill()
        busy.wait()
        knob.close()
    leftovers = [p for p in os.listdir(knob.controller()[1]) if p == f"sharewise-{os.getpid()}"]
    assert leftovers == []  # the knob removed what it created


@pytest.mark.slow
@pytest.mark.skipif(_writable_cpu_controller() is not None, reason=f"no writable cgroup CPU controller: "
                    f"{_writable_cpu_controller()}")
def test_profile_and_pairs_measure_under_the_knob_each_split_its_own_row(tmp_path):
    from conftest import run_cli

    from sharewise.datasets import read_datasets

    out = tmp_path / "d"
    common = ["--size", "tiny", "--device", "cpu", "--mode", "cpu", "--out", out, "--window", "0.2", "--repeats",
              "2", "--no-probe", "--idle-wait", "0"]
    assert run_cli(["profile", "ncf", *common, "--shares", "25,75"]) == 0
    profiles, _ = read_datasets([str(out)], pairs=False)
    curve = profiles.iloc[0][["f_share_25", "f_share_75"]].to_numpy(dtype=float)
    assert ((curve > 0) & (curve < 1.5)).all() and "f_share_50" not in profiles or profiles["f_share_50"].isna().all()
    pairs_args = ["pairs", "-w", "ncf", *common, "--max-repeats", "2"]
    assert run_cli([*pairs_args, "--split", "70:30"]) == 0
    assert run_cli([*pairs_args]) == 0  # without a knob: another row, not a resume of the split's
    assert run_cli([*pairs_args, "--split", "70:30"]) == 0  # resumed: nothing measured again
    _, pairs = read_datasets([str(out)])
    assert sorted(pairs["split_a"].fillna(-1).tolist()) == [-1.0, 70.0] and (pairs["status"] == "ok").all()
    # A split on a mode without a knob is one clear error before anything runs.
    assert run_cli(["pairs", "-w", "ncf", "--size", "tiny", "--device", "cpu", "--mode", "cpu-partition", "--out",
                    out, "--split", "70:30"]) == 2
