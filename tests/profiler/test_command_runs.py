"""Unmodified training scripts (``tests/fixtures``) run as workloads: launched with the step hook, paused and
resumed from outside, profiled and paired on the CPU, and every failure one line with exit code 2.

Everything here starts processes (``slow``). On a busy machine measured numbers move, so the tests assert
what holds on any machine: step counts, exit codes, finite features and half-widths, FLOPs counted exactly.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import FIXTURES, wait_steps

from sharewise.command_spec import parse_command
from sharewise.profiler.blackbox import UNMEASURED
from sharewise.profiler.commands import launch
from sharewise.profiler.progress import read_progress

pytestmark = pytest.mark.slow

PY = shlex.quote(sys.executable)


def script(name: str, file: str, *args: str, options: str = "") -> str:
    """A command spec running ``tests/fixtures/<file>`` with this interpreter."""
    return f"{name}=cmd:{options}{PY} {shlex.quote(str(FIXTURES / file))} {' '.join(args)}".strip()


def run_cli(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sharewise", *args], capture_output=True, text=True, timeout=timeout)


# -- the launcher and the hook ----------------------------------------------------------------------------------
def test_steps_are_updates_calls_or_matching_lines_and_the_job_stops_at_max_steps(tmp_path):
    jobs = {
        # Gradient accumulation: 5 updates of 3 micro-batches each are 5 steps; the script ends by itself.
        "lm": (script("lm", "lm_accum.py", "--updates", "5", "--accum", "3"), {}),
        # Counted from 10 (a restart), stopped at 14 by the hook.
        "cnn": (script("cnn", "cnn_train.py"), {"max_steps": 14, "start_step": 10}),
        # No optimizer: sys.audit("sharewise.step") per iteration.
        "infer": (script("infer", "infer_loop.py"), {"max_steps": 3}),
        # Not PyTorch at all: a line of output per step.
        "ticks": (f"ticks=cmd:--progress-regex '^tick ' {PY} -c \"import time\nfor i in range(10**6): "
                  "print('tick', i, flush=True); print('noise', flush=True); time.sleep(0.01)\"", {"max_steps": 5}),
    }
    procs = {}
    for name, (spec, kw) in jobs.items():
        procs[name] = launch(parse_command(spec), progress_path=tmp_path / f"{name}.progress",
                             stdout=tmp_path / f"{name}.log", die_with_parent=True, **kw)
    for name, proc in procs.items():
        assert proc.wait(timeout=120) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    steps = {name: [s for s, _ in read_progress(tmp_path / f"{name}.progress")] for name in jobs}
    assert steps == {"lm": [1, 2, 3, 4, 5], "cnn": [11, 12, 13, 14], "infer": [1, 2, 3], "ticks": [1, 2, 3, 4, 5]}
    assert "tick 4" in (tmp_path / "ticks.log").read_text()


def test_the_hook_chains_to_the_users_sitecustomize_and_pins_the_job(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(f"open({str(tmp_path / 'marker')!r}, 'w').write('ran')\n")
    spec = (f"c=cmd:PYTHONPATH={own} {PY} -c \"import os, sys; sys.audit('sharewise.step'); "
            "print(sorted(os.sched_getaffinity(0)))\"")
    core = min(os.sched_getaffinity(0))
    proc = launch(parse_command(spec), progress_path=tmp_path / "p", stdout=tmp_path / "log", cores=(core,))
    assert proc.wait(timeout=60) == 0
    assert (tmp_path / "marker").read_text() == "ran"
    assert [s for s, _ in read_progress(tmp_path / "p")] == [1]
    assert f"[{core}]" in (tmp_path / "log").read_text()


def test_a_signal_to_the_job_reaches_its_whole_process_tree(tmp_path):
    psutil = pytest.importorskip("psutil")
    # A job with a child process (as a DataLoader's workers are), stepping by the explicit call.
    spec = (f"tree=cmd:{PY} -c \"import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
            "while True: sys.audit('sharewise.step'); time.sleep(0.01)\"")
    proc = launch(parse_command(spec), progress_path=tmp_path / "p", stdout=tmp_path / "log")
    try:
        wait_steps(tmp_path / "p", 3, proc)
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len(tree) == 2
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(0.3)
        assert {p.status() for p in tree} == {psutil.STATUS_STOPPED}
        paused = len(read_progress(tmp_path / "p"))
        time.sleep(0.3)
        assert len(read_progress(tmp_path / "p")) == paused, "a paused job steps no further"
        os.killpg(proc.pid, signal.SIGCONT)
        wait_steps(tmp_path / "p", paused + 3, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    time.sleep(0.3)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree)


# -- profiles and pairs through the CLI -------------------------------------------------------------------------
def _measured_features_finite(row, may_lack: tuple[str, ...] = ()) -> None:
    measured = [c for c in row.index if c.startswith("f_") and c not in UNMEASURED and c not in may_lack]
    bad = [c for c in measured if not np.isfinite(float(row[c]))]
    assert not bad, f"{row['workload']}: features not finite: {bad}"
    assert all(math.isnan(float(row[c])) for c in UNMEASURED if c in row.index)


def test_profile_a_training_script_as_it_is(tmp_path):
    spec = script("mytrain", "cnn_train.py", options="--batch-size 16 ")
    out = run_cli(["profile", spec, "--out", str(tmp_path / "d"), "--repeats", "2", "--window", "0.2",
                   "--idle-wait", "2"])
    assert out.returncode == 0, out.stderr[-3000:]
    from sharewise.datasets.store import Dataset

    (_, row), = Dataset(tmp_path / "d").read_profiles().iterrows()
    assert row["workload"] == "mytrain" and row["spec"] == spec and row["batch_size"] == 16
    assert row["throughput"] > 0 and row["samples_per_s"] == pytest.approx(16 * row["throughput"])
    assert np.isfinite([row["cv"], row["probe_cv"], row["f_probe_slowdown"], row["f_probe_pressure"]]).all()
    _measured_features_finite(row)
    # The hook's FLOP count is the count of the same model as a workload class, exactly:
    # conv 3->16 and 16->32 at 32x32 and 16x16, a 2048->10 linear layer, batch 16, forward and backward.
    assert row["f_flops_per_step"] == 143_523_840
    assert row["f_param_bytes"] == 4 * (16 * 3 * 9 + 16 + 32 * 16 * 9 + 32 + 2048 * 10 + 10)


@pytest.mark.gpu
def test_profile_a_training_script_on_a_gpu(tmp_path):
    from sharewise.datasets.store import Dataset

    spec = script("gpucnn", "cnn_train.py", options="--batch-size 16 ")
    out = run_cli(["profile", spec, "--device", "cuda", "--out", str(tmp_path / "d"), "--repeats", "2",
                   "--window", "0.2"])
    assert out.returncode == 0, out.stderr[-3000:]
    (_, row), = Dataset(tmp_path / "d").read_profiles().iterrows()
    assert row["device_kind"] == "cuda" and row["throughput"] > 0
    _measured_features_finite(row)
    assert 0 < row["f_mem_peak_allocated_bytes"] <= row["f_mem_peak_reserved_bytes"]
    assert row["f_nvml_samples"] > 0 and row["f_device_mem_bytes"] > 0
    assert row["f_flops_per_step"] == 143_523_840, "the same formulas count the same step on any device"


def test_a_pairs_campaign_of_two_scripts_and_a_built_in_workload(tmp_path):
    from sharewise.datasets.store import Dataset
    from sharewise.profiler.hostload import ForeignCpuMeter

    specs = [script("cnn", "cnn_train.py", options="--batch-size 16 "), script("infer", "infer_loop.py")]
    meter = ForeignCpuMeter()
    meter.start()
    out = run_cli(["pairs", "-w", specs[0], "-w", specs[1], "-w", "ncf", "--size", "tiny", "--out",
                   str(tmp_path / "d"), "--repeats", "2", "--max-repeats", "2", "--window", "0.2", "--no-probe",
                   "--idle-wait", "0"], timeout=420)
    foreign = meter.stop()
    pairs = Dataset(tmp_path / "d").read_pairs()
    if out.returncode != 0 or (pairs["status"] != "ok").any():
        failed = pairs.loc[pairs["status"] != "ok", ["workload_a", "workload_b", "status", "error"]]
        if foreign > 0.5:
            pytest.skip(f"other processes used {foreign:.0%} of the machine during the campaign; failed: {failed}")
        raise AssertionError(f"{out.stderr[-3000:]}\n{failed}")
    profiles = Dataset(tmp_path / "d").read_profiles()
    assert set(profiles["workload"]) == {"cnn", "infer", "ncf"}
    cnn, infer = (profiles[profiles["workload"] == n].iloc[0] for n in ("cnn", "infer"))
    _measured_features_finite(cnn)
    _measured_features_finite(infer, may_lack=("f_param_bytes", "f_batch_size"))
    assert math.isnan(infer["f_param_bytes"]), "an inference loop has no optimizer"
    assert math.isnan(infer["samples_per_s"]), "no --batch-size: steps, not samples"
    assert len(pairs) == 6 and set(pairs["status"]) == {"ok"}
    values = pairs[["slowdown_a", "slowdown_b", "ci_a", "ci_b", "solo_a", "coloc_b"]].to_numpy(dtype=float)
    assert np.isfinite(values).all() and (values[:, :2] > 0).all()
    assert set(pairs["trials"]) == {2}


# -- failures: one line, exit code 2 ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, needle, timeout",
    [
        ("bad=cmd:no-such-program-xyz", "bad: cannot start 'no-such-program-xyz': No such file or directory", 60),
        (f"early=cmd:{PY} -c \"print('boom: bad flag'); raise SystemExit(4)\"",
         "early: the command exited with code 4 before reporting a step; output ends: boom: bad flag", 60),
        (f"idle=cmd:{PY} -c \"import time; time.sleep(120)\"", "idle: no step reported within 3 s (--timeout)", 3),
        (script("short", "cnn_train.py", "--epochs", "1", "--samples", "64"),
         "short: the command exited with code 0 after 4 steps, during the warm-up", 120),
    ],
    ids=["cannot-start", "exits-before-a-step", "never-steps", "ends-too-soon"],
)
def test_a_failing_command_is_one_line_and_exit_2(spec, needle, timeout, tmp_path):
    out = run_cli(["profile", spec, "--out", str(tmp_path / "d"), "--timeout", str(timeout), "--no-probe",
                   "--idle-wait", "0"], timeout=240)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: profiling failed"), out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


def test_a_campaign_that_measured_nothing_exits_2_and_keeps_the_failure_rows(tmp_path):
    from sharewise.datasets.store import Dataset

    spec = f"early=cmd:{PY} -c \"print('boom: no data at /x'); raise SystemExit(4)\""
    out = run_cli(["pairs", "-w", spec, "--out", str(tmp_path / "d"), "--no-probe", "--idle-wait", "0"])
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: nothing could be measured")
    (_, row), = Dataset(tmp_path / "d").read_pairs().iterrows()
    assert row["status"] == "failed" and "output ends: boom: no data at /x" in row["error"]
