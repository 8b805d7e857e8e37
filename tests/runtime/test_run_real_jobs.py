"""``sharewise run`` with real jobs, as a new user runs them (issue 39, part 1): training scripts that end their own
training are done, whatever the trace guessed; a script may leave its length out (the policies see an estimate,
replaced by the real length once known); a failure is named with its true reason in the table, the verdict and
the exit status; one NAME for two different commands is one line and exit 2.

The fast tests check the pieces on literal inputs (why a job ended, lengths, the trace reader, the averages);
the slow ones run real queues of fixture scripts and built-in workloads and assert what holds on any machine
(statuses, step counts, exit codes, the lengths the policies saw), never a timing bound.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURES
from test_physical import SLEEP, _dataset, _jobs, _measured

from sharewise.datasets.traces.generic import read_generic_csv
from sharewise.engine.result import RunResult
from sharewise.engine.world import DONE, FAILED
from sharewise.errors import TraceError
from sharewise.runtime.exits import (
    Evidence,
    cgroup_oom_kills,
    evidence,
    exit_reason,
    kernel_oom_pids,
)
from sharewise.runtime.lengths import Length, OutputTotal, argv_total

PY = shlex.quote(sys.executable)


def script(name: str, file: str, *args: str) -> str:
    """A command spec running ``tests/fixtures/<file>`` with this interpreter, quoted for a CSV cell."""
    return f'"{name}=cmd:{PY} {shlex.quote(str(FIXTURES / file))} {" ".join(args)}"'


@pytest.fixture(scope="module")
def device_name():
    from sharewise.runtime.slots import cpu_layout

    return cpu_layout(1).device_name


# ---- why a job ended: one function, a test per branch -------------------------------------------------
def test_a_job_that_exits_0_is_done_whatever_its_step_count():
    assert exit_reason(0, Evidence(output="epoch 1 loss 0.3")).status == "done"


def test_a_real_sigkill_from_outside_is_killed_by_signal_9_not_out_of_memory(tmp_path):
    log = tmp_path / "job.log"
    before = cgroup_oom_kills()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "print('training', flush=True); import time; time.sleep(60)"],
                                stdout=out, stderr=subprocess.STDOUT)
    while "training" not in log.read_text():
        if proc.poll() is not None:
            pytest.fail("the child ended before it was killed")
    os.kill(proc.pid, signal.SIGKILL)
    code = proc.wait(timeout=30)
    ended = exit_reason(code, evidence(log, code, proc.pid, before))
    assert code == -signal.SIGKILL
    assert ended.status == "failed" and ended.message.startswith("killed by signal 9 (SIGKILL)")
    assert "memory" not in ended.message


def test_out_of_memory_needs_evidence_cuda_error_cgroup_count_or_kernel_log():
    cuda = ("Traceback (most recent call last):\n  File \"train.py\", line 9\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    by_output = exit_reason(1, Evidence(output=cuda))
    assert by_output.status == "oom" and "CUDA out of memory" in by_output.message
    by_cgroup = exit_reason(-9, Evidence(output="", oom_kills=1))
    assert by_cgroup.status == "oom" and "cgroup counted 1 OOM kill" in by_cgroup.message
    by_kernel = exit_reason(-9, Evidence(kernel_oom=True))
    assert by_kernel.status == "oom" and "kernel" in by_kernel.message
    # No evidence: a signal is a signal, and unknown cgroup counts (None) are no evidence either.
    assert exit_reason(-9, Evidence(oom_kills=None)).status == "failed"
    assert exit_reason(-9, Evidence(oom_kills=0)).status == "failed"


def test_a_built_in_jobs_marked_line_and_an_exit_code_keep_their_own_words():
    marked = exit_reason(1, Evidence(output="Traceback ...\nsharewise-job: failed: RuntimeError: crashed on purpose\n"))
    assert (marked.status, marked.message) == ("failed", "RuntimeError: crashed on purpose")
    plain = exit_reason(3, Evidence(output="loading\nbad flag --lr\n"))
    assert plain.status == "failed" and plain.message == "exit code 3: loading | bad flag --lr"


def test_the_kernel_log_and_the_cgroup_are_read_where_this_machine_has_them():
    lines = ["6,812,93,-;Out of memory: Killed process 4242 (python) total-vm:9000kB",
             "6,813,94,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python,pid=77,uid=0",
             "6,814,95,-;eth0: link up (killed process list: 12/3)"]
    assert kernel_oom_pids(lines) == {4242, 77}
    count = cgroup_oom_kills()
    assert count is None or count >= 0


# ---- lengths -----------------------------------------------------------------------------------------
def test_a_commands_own_total_comes_from_its_arguments_or_its_progress_lines(tmp_path):
    assert argv_total(("python", "t.py", "--total-steps", "500")) == 500
    assert argv_total(("python", "t.py", "--max_steps=1200")) == 1200
    assert argv_total(("python", "t.py", "--max_steps", "-1", "--epochs", "3")) is None
    log = tmp_path / "job.log"
    reader = OutputTotal(str(log))
    log.write_bytes(b"epoch 1/3 loss 2.1\n")
    assert reader.scan(0, 1) is None  # a first epoch's 1/3 says nothing
    with open(log, "ab") as fh:
        fh.write(b"epoch 2/3 date 2026/12/04 lr 1.5/2\n step 30/500 [00:01<00:10]\r step 31/5")
    assert reader.scan(28, 31) == 500  # the epoch (2 is not near 28..31), the date and the ratio fail the check
    with open(log, "ab") as fh:
        fh.write(b"00\n")  # the line cut mid-write ends: 31/500
    assert reader.scan(31, 32) == 500


def test_an_estimate_is_replaced_by_the_real_length_and_the_note_says_how_far_off():
    n = Length(6000.0, False, "the default of 300 s of solo run time", estimated=True)
    assert n.from_output(500, 3.0) and n.steps == 500 and n.known
    assert not n.from_output(500, 4.0)
    assert n.ended(480, 9.5) and n.known_from == "its end"
    assert "estimate of 6000 steps" in n.note("a", "cnn") and "12.50x" in n.note("a", "cnn")
    grown = Length(100.0, False, "x", estimated=True)
    assert grown.outrun(100) and grown.steps == 200 and not grown.known
    capped = Length(180.0, True, "the trace")
    assert not capped.from_output(50, 1.0)
    assert capped.ended(50, 2.0) and "the trace gave 180 steps; it ended by itself after 50" in capped.note("c", "w")
    assert Length.from_json(json.loads(json.dumps(n.to_json()))) == n


def test_a_trace_may_leave_a_commands_length_out_and_nothing_elses(tmp_path):
    command = script("mlp", "finite_train.py", "--steps", "5")
    path = tmp_path / "t.csv"
    path.write_text(f"job_id,arrival_s,workload,gpus,steps\na,0,{command},1,\nb,1,ncf,1,40\n")
    trace = read_generic_csv(path)
    assert math.isnan(trace.steps[0]) and trace.steps[1] == 40 and math.isnan(trace.duration[0])
    none = tmp_path / "n.csv"
    none.write_text(f"job_id,arrival_s,workload,gpus\na,0,{command},1\n")
    assert math.isnan(read_generic_csv(none).steps[0])
    bad = tmp_path / "b.csv"
    bad.write_text(f"job_id,arrival_s,workload,gpus,steps\na,0,{command},1,\nb,1,ncf,1,\n")
    with pytest.raises(TraceError, match=r"b.csv:3: column 'steps' is empty"):
        read_generic_csv(bad)


def test_averages_are_over_finished_jobs_and_the_failed_ones_are_counted():
    result = RunResult("p", np.array([0.0, 0.0, 0.0]), np.array([10.0, 10.0, 10.0]), np.array([0.0, 10.0, 20.0]),
                       np.array([10.0, 20.0, 22.0]), np.array([1.0, 1.0, 3.0]), 22.0, 1, 2.0,
                       status=np.array([DONE, DONE, FAILED]))
    m = result.compute_metrics()
    assert result.done().tolist() == [True, True, False]
    assert m["avg_jct"] == 15.0 and m["makespan"] == 22.0  # the failed job's 22 s JCT left out of the average
    assert m["avg_queue"] == 5.0 and m["utilization"] == 1.0  # the whole run's GPU time counts
    assert m["slo_violations"] == 0  # the failed job's slowdown of 3 is no violation of a job that finished
    none = RunResult("p", np.zeros(1), np.ones(1), np.zeros(1), np.ones(1), np.ones(1), 1.0, 1, 2.0,
                     status=np.array([FAILED]))
    assert math.isnan(none.compute_metrics()["avg_jct"]) and none.compute_metrics()["slo_violations"] == 0


def test_one_name_for_two_different_commands_is_one_line_naming_both_and_exit_2(tmp_path, device_name, capsys):
    from sharewise.cli import main

    data = _dataset(tmp_path, device_name)
    a, b = script("train", "finite_train.py", "--steps", "5"), script("train", "finite_train.py", "--steps", "9")
    trace = tmp_path / "dup.csv"
    trace.write_text(f"job_id,arrival_s,workload,gpus,steps\nj1,0,{a},1,5\nj2,1,{SLEEP},1,5\nj3,2,{b},1,9\n")
    out = tmp_path / "r"
    with pytest.raises(SystemExit) as stop:
        main(["run", str(trace), "--data", str(data), "--out", str(out), "--calibrate", "0"])
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{trace}:2 and line 4" in err and "both named 'train'" in err and "--steps 9" in err
    assert not out.exists()


# ---- real queues (slow) ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_scripts_that_end_on_their_own_and_built_in_workloads_run_with_no_false_failure(tmp_path):
    """The issue's queue: a CNN script whose trace says 180 steps and which ends by itself after 20 (two epochs of
    10 batches), an MLP script with no length in the trace (its output says ``step k/150``), and two built-in
    workloads, under two policies. Every job is done; the CNN's length becomes the 20 steps it ran; the MLP ran
    on the default estimate until its output told its total; the table shows 4/4 finished and no failure."""
    trace = tmp_path / "queue.csv"
    trace.write_text(
        "job_id,arrival_s,workload,gpus,steps\n"
        f"cnn,0,{script('cnn', 'cnn_train.py', '--epochs', '2', '--samples', '160', '--batch-size', '16')},1,180\n"
        f"mlp,0.5,{script('mlp', 'finite_train.py', '--steps', '150')},1,\n"
        "ncf,1,ncf,1,120\n"
        "a3c,1.5,a3c,1,120\n"
    )
    out = tmp_path / "run"
    proc, _ = _measured("run", trace, "--data", "reference", "--oracle", "--size", "tiny", "--calibrate", "1",
                        "--policy", "exclusive-sjf", "--policy", "sharewise", "--out", out, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "FAILED" not in proc.stdout and "4/4" in proc.stdout
    for policy in ("exclusive-sjf", "sharewise"):
        data = json.loads((out / policy / "run.json").read_text())
        jobs = {j["job_id"]: j for j in data["jobs"]}
        assert all(j["status"] == "done" for j in jobs.values()), {k: j["exit"] for k, j in jobs.items()}
        assert data["metrics"]["finished"] == 4 and data["metrics"]["failed"] == 0 and not data["failures"]
        cnn, mlp = jobs["cnn"], jobs["mlp"]
        assert cnn["steps_done"] == 20 and cnn["steps"] == 20 and cnn["length"]["known_from"] == "its end"
        # The policies' work for the job is its real length now, so its realized slowdown is of the 20 steps.
        assert cnn["work_s"] == pytest.approx(cnn["startup_est_s"] + 20 * cnn["step_s"], rel=1e-3)
        assert math.isfinite(cnn["realized_slowdown"])
        assert mlp["steps_done"] == 150 and mlp["length"]["estimated"] and mlp["length"]["given"] != 150
        assert mlp["length"]["known_from"].startswith("its output") and mlp["length"]["known_at"] < mlp["finish"]
        assert any("'cnn'" in n and "ended by itself after 20" in n for n in data["notes"])
        assert any("'mlp'" in n and "estimate of" in n and "x the real length" in n for n in data["notes"])
    sitting = json.loads((out / "sitting.json").read_text())
    assert 150 in sitting["lengths"].values()  # the next call's estimate for the MLP


@pytest.mark.slow
def test_a_job_killed_by_a_signal_is_named_with_its_reason_and_the_run_exits_1(tmp_path, device_name):
    """A script that SIGKILLs itself at its 10th update (as a kill from outside does) next to a sleep job: the run
    goes on, records it failed with "killed by signal 9" (not out of memory), names it in the table, the verdict
    and run.json, averages over the one that finished, and exits 1."""
    data = _dataset(tmp_path, device_name)
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,arrival_s,workload,gpus,steps\n"
                     f"die,0,{script('die', 'finite_train.py', '--steps', '100', '--die-at', '10')},1,100\n"
                     f"ok,0.2,{SLEEP},1,30\n")
    proc, _ = _measured("run", trace, "--data", data, "--oracle", "--policy", "exclusive-sjf", "--calibrate", "1",
                        "--out", tmp_path / "run")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = _jobs(tmp_path / "run" / "exclusive-sjf" / "run.json")
    assert jobs["ok"]["status"] == "done"
    assert jobs["die"]["status"] == "failed" and jobs["die"]["exit"]["code"] == -9
    assert jobs["die"]["exit"]["message"].startswith("killed by signal 9 (SIGKILL)")
    out = " ".join(proc.stdout.split())
    assert "1 of 2 job(s) FAILED" in out and "die (die) failed: killed by signal 9" in out
    assert "over the jobs that finished only" in out
    data = json.loads((tmp_path / "run" / "exclusive-sjf" / "run.json").read_text())
    assert data["metrics"]["finished"] == 1 and data["metrics"]["failed"] == 1
    assert data["metrics"]["avg_jct"] == pytest.approx(jobs["ok"]["jct"], abs=1e-3)
