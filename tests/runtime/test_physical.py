"""Physical mode: the scheduling loop's cluster transition and restore, the real world's measurements, and
``sharewise run`` driving real job processes (slow tests), each checked against expectations worked out by
hand.

The job processes run ``tests/fixtures/physical_workloads.py``: a step sleeps 10 ms, so a job's length is
known by hand and a busy machine stretches it little. What a busy machine can still stretch (a process start,
a policy's timing) is measured in the window (``tests/loadguard.py``): a test whose timing expectation fails
while foreign load was high skips with that reason instead of failing.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from loadguard import LoadWindow

from sharewise.app.run_compare import divergence, why
from sharewise.datasets.store import Dataset, utc_now
from sharewise.datasets.traces import TraceContext
from sharewise.datasets.traces.generic import read_generic_csv, write_generic_csv
from sharewise.engine import transition
from sharewise.engine.cluster import Cluster
from sharewise.engine.loop import SchedulingLoop
from sharewise.engine.result import RunResult
from sharewise.engine.simulator import SimWorld, simulate
from sharewise.engine.table import SlowdownTable
from sharewise.engine.world import DONE, FAILED, QUEUED
from sharewise.errors import TraceError
from sharewise.policy import get_policy
from sharewise.runtime.sitting import Sitting
from sharewise.runtime.world import Segment

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "physical_workloads.py"
#: Foreign load above which a failed timing expectation is the machine's, not the code's: the jobs step by
#: sleeping, so only start-ups and the polling stretch under load, and only a heavy load reorders them.
BUSY = 0.25
SLEEP = f"{FIXTURE}:SleepStep"
CRASH = f"{FIXTURE}:CrashAfter"


# ---- the loop's pieces (fast) ------------------------------------------------------------------------
def test_transition_moves_a_partner_to_slot_zero_and_counts_slots():
    slots = transition.Slots(2)
    assert slots.place(4, 0) == -1 and slots.place(7, 0) == 4 and slots.place(4, 1) == -1
    assert (slots.free_slots, slots.busy) == (1, 2)
    assert slots.vacate(4, [0, 1]) == [7]  # GPU 0 keeps 7 (now in slot 0), GPU 1 is free
    assert slots.resident.tolist() == [[7, -1], [-1, -1]] and slots.occupancy.tolist() == [1, 0]
    assert (slots.free_slots, slots.busy) == (3, 1)


def _two_job_table():
    return SlowdownTable(["w"], [[1.5]], [[1.5]], [[1.5]], [[True]], device_name="d", source="measured")


def test_a_restored_loop_goes_on_from_its_snapshot():
    """Job 0 (10 s) finished; job 1 (20 s of work, 5 s left) was running when the run stopped at t=15. Restored,
    job 1 waits in the queue, restarts at once (exclusive FIFO) and ends 5 s later: at 20, its start kept at 10."""
    table = _two_job_table()
    loop = SchedulingLoop(arrival=np.array([0.0, 10.0]), work=np.array([10.0, 20.0]), gpus=np.array([1, 1]),
                          workload=np.array([0, 0]), line=np.array([2, 3]), policy=get_policy("exclusive-fifo-strict"),
                          table=table, world=SimWorld(table, 0.0, True), cluster=Cluster(n_gpus=1, gpus_per_node=1))
    snap = {"now": 15.0, "status": [DONE, 2], "start": [0.0, 10.0], "finish": [10.0, None], "remaining": [0.0, 5.0],
            "attained": [10.0, 5.0], "restarts": [0, 0], "next_arrival": 2, "queue": [], "wake": None, "calls": 2,
            "events": 3, "preemptions": 0, "busy_seconds": 15.0, "learned": []}
    loop.restore(snap)
    assert loop.status.tolist() == [DONE, QUEUED] and loop.queue.tolist() == [1]
    result = loop.run()
    assert result.start.tolist() == [0.0, 10.0] and result.finish.tolist() == [10.0, 20.0]
    assert loop.restarts.tolist() == [0, 1]
    again = loop.snapshot()
    assert again["status"] == [DONE, DONE] and again["finish"] == [10.0, 20.0]


def test_job_speed_makes_the_simulated_job_run_faster_than_the_policy_thinks():
    """The policies know 10 s of work; the job truly runs twice as fast: alone on a GPU it ends at 5 s."""
    from sharewise.datasets.traces import Trace

    table = _two_job_table()
    trace = Trace(job_id=np.array(["a"], dtype=object), arrival=np.array([0.0]), duration=np.array([10.0]),
                  gpus=np.array([1]), workload=np.array(["w"], dtype=object), line=np.array([2]))
    r = simulate(trace, get_policy("exclusive-sjf"), table, cluster=Cluster(n_gpus=1, gpus_per_node=1),
                 job_speed=np.array([2.0]))
    assert r.finish.tolist() == [5.0] and r.realized_slowdown.tolist() == [0.5]


def test_the_simulator_charges_a_move_but_not_a_resume_in_place_when_asked_to():
    """Job 0 (10 s) runs on GPU 0 from 0; at 2 s job 1 (3 s) arrives and takes GPU 0, job 0 paused with 8 s left.
    Moved to GPU 1 at once it pays its 4 s start-up again: 2 + 8 + 4 = 14. Waiting to resume on GPU 0 when job 1
    ends at 5 it pays nothing: 5 + 8 = 13. (A policy scripted here, in the signature every policy has.)"""
    from sharewise.datasets.traces import Trace
    from sharewise.engine.policy_types import Decision, Placement

    def scripted(move: bool):
        def policy(queue, cluster, table, now):
            if now == 0:
                return Decision(start=[Placement(0, (0,))])
            if now == 2:
                return Decision(start=[Placement(1, (0,))] + ([Placement(0, (1,))] if move else []), preempt=(0,))
            if 0 in queue.job.tolist() and cluster.occupancy()[0] == 0:
                return Decision(start=[Placement(0, (0,))])
            return Decision(start=[])

        policy.preemptive = True
        return policy

    table = _two_job_table()
    trace = Trace(job_id=np.array(["a", "b"], dtype=object), arrival=np.array([0.0, 2.0]),
                  duration=np.array([10.0, 3.0]), gpus=np.array([1, 1]), workload=np.array(["w", "w"], dtype=object),
                  line=np.array([2, 3]))
    for move, end in ((True, 14.0), (False, 13.0)):
        r = simulate(trace, scripted(move), table, cluster=Cluster(n_gpus=2, gpus_per_node=2),
                     move_cost=np.array([4.0, 4.0]))
        assert r.finish.tolist() == [end, 5.0]


def test_a_segment_rate_counts_steps_between_its_first_and_last_report():
    seg = Segment(0.0, frozenset(), [(10, 1.0), (11, 1.5), (12, 2.0), (14, 3.0)])
    assert seg.rate() == (2.0, 4, 2.0)  # 4 steps from t=1 to t=3
    assert seg.rate(since=1.5) == (2.0, 3, 1.5)
    assert math.isnan(Segment(0.0, frozenset(), [(1, 1.0)]).rate()[0])


def test_the_sitting_pools_pairings_in_either_order_weighted_by_time():
    s = Sitting()
    s.pairs[("a", "b")].append((1.2, 1.5, 10.0))
    s.pairs[("b", "a")].append((1.8, 1.4, 30.0))  # b next to a 1.8, a next to b 1.4, over 30 s
    s_a, s_b, secs, n = s.pair("a", "b")
    assert (round(s_a, 6), round(s_b, 6), secs, n) == (round((1.2 * 10 + 1.4 * 30) / 40, 6),
                                                       round((1.5 * 10 + 1.8 * 30) / 40, 6), 40.0, 2)
    s.pairs[("c", "c")].append((1.1, 1.3, 5.0))
    assert s.pair("c", "c")[:2] == pytest.approx((1.2, 1.2))  # a self-pair's two sides are one workload: their mean
    assert Sitting.from_json(json.loads(json.dumps(s.to_json()))).pair("a", "b") == s.pair("a", "b")


def _result(start, finish) -> RunResult:
    start, finish = np.array(start, dtype=float), np.array(finish, dtype=float)
    return RunResult("p", np.zeros(len(start)), finish - start, start, finish, np.ones(len(start)), 0.0, 1, 2.0)


def test_the_comparison_says_where_a_run_and_its_simulation_part():
    ids = np.array(["j0", "j1", "j2", "j3"], dtype=object)
    # By hand: j0 runs 0-10 in both; physically j2 starts at 10 and j1 at 20, simulated the other way round
    # (a decision flip at 10 s); j3 starts last in both. Run times: j0 10/10, j2 10/10, j1 10/10 and
    # j3 13/10 (a slow run): 3 of 4 within 10%, median 1.0.
    phys = _result([0, 20, 10, 30], [10, 30, 20, 43])
    sim = _result([0, 10, 20, 30], [10, 20, 30, 40])
    d = divergence(phys, sim, ids, None)
    assert d["run_ratio_median"] == 1.0 and d["run_within_10"] == 0.75
    assert d["order_changed"] == 2 and d["diverged_at"] == {"t": 10.0, "physical": "j2", "simulated": "j1"}
    assert "round_crossings" not in d
    # With 20 s rounds: j1 ends at 30 physically (round 1) and 20 simulated (round 0, ending on a boundary
    # counts in the round before it), j2 the other way round, j3 at 43 (round 2) against 40 (round 1).
    d = divergence(phys, sim, ids, 20.0)
    assert d["round_crossings"] == 3 and d["first_crossing"] == {"job": "j1", "physical": 30.0, "simulated": 20.0}
    same = divergence(sim, sim, ids, 20.0)
    assert (same["order_changed"], same["diverged_at"], same["round_crossings"]) == (0, None, 0)
    row = {"jobs_compared": 4, **d}
    line = why("sharewise", row)
    assert "2 of 4 jobs started in another order, from 10.0 s on (j2 started there physically, j1 in" in line
    assert "3 job(s) ended in another round than simulated, the first j1" in line


def test_compare_sim_simulates_a_command_of_unknown_length_at_the_rate_its_run_used(tmp_path, device_name):
    """Issue 52: two unmodified scripts, no length in the trace; each ended within its calibration, so the sitting
    holds 50 steps over 1.25 s alone, too few seconds for a solo rate (``MIN_S``), and no dataset knows the
    command. The simulated job took the speed NaN and the loop spun forever; now it runs at the calibrated rate
    the real run's policies used (40 steps/s, start-up 2.5 s less its first step) over the 60 steps the runs
    learned, then holds its slot for its median teardown (last step to exit: 0.5 s). By hand: each job's
    exclusive time is 2.475 + 60 / 40 + 0.5 = 4.475 s; exclusive-sjf runs m0 from 0 to 4.475 and m1 (arrived at
    0.5) from 4.475 to 8.95: simulated JCTs 4.475 and 8.45."""
    from test_simulator import within_seconds

    from sharewise.app.run_compare import compare, sitting_truth
    from sharewise.app.run_inputs import PhysicalConfig, prepare, step_times

    script = f"mlp=cmd:{sys.executable} {FIXTURE.parent / 'finite_train.py'} --steps 60"
    trace = tmp_path / "jobs.csv"
    trace.write_text(f'job_id,arrival_s,workload,gpus,steps\nm0,0,"{script}",1,\nm1,0.5,"{script}",1,\n')
    config = PhysicalConfig(trace=str(trace), out=str(tmp_path / "run"), data=str(_dataset(tmp_path, device_name)),
                            policies=("exclusive-sjf",), oracle=True, compare_sim=True)
    inputs = prepare(config)
    sitting = Sitting()
    sitting.calibrated["mlp"] = {"steps_per_s": 40.0, "startup_s": 2.5}
    sitting.startup["mlp"].append(2.5)
    sitting.add_solo("mlp", 50, 1.25)
    sitting.teardown["mlp"] += [0.4, 0.6, 0.5]
    assert math.isnan(sitting.solo_rate("mlp"))
    steps = np.array([60.0, 60.0])
    times = step_times(inputs, sitting)
    _, exclusive, startup, _ = sitting_truth(inputs, sitting, steps, times[0])
    assert exclusive == pytest.approx([4.475, 4.475]) and startup == pytest.approx([2.475, 2.475])
    phys = RunResult("exclusive-sjf", np.array([0.0, 0.5]), np.array([4.475, 4.475]), np.array([0.0, 4.6]),
                     np.array([4.6, 9.2]), np.ones(2), 0.0, 1, 2.0)
    comparison, _ = within_seconds(60, lambda: compare(inputs, config, {"exclusive-sjf": phys}, sitting, steps,
                                                       times))
    row = comparison["exclusive-sjf"]
    assert row["sim_jct"] == pytest.approx([4.475, 8.45])
    assert row["avg_jct_simulated"] == pytest.approx(6.4625) and row["avg_jct_physical"] == pytest.approx(6.65)


def test_a_jobs_start_up_is_not_counted_as_slowdown():
    """Started at 10.0, first step reported 2.8 s later (one 0.1 s step in it), its 10th and last step at 13.9
    (its process exited later): (13.9 - 10.0 - 2.7) / (10 x 0.1) = 1.2, where counting the start-up gave 3.9. A
    job that did not end: NaN."""
    from sharewise.runtime.physical import stepping_slowdown

    got = stepping_slowdown(np.array([10.0, 0.0]), np.array([13.9, np.nan]), np.array([2.8, 1.0]),
                            np.array([0.1, 0.1]), np.array([10.0, 10.0]))
    assert got[0] == pytest.approx(1.2) and math.isnan(got[1])


def test_the_verdict_names_a_failure_by_its_exception_and_credits_no_policy_that_shared_nothing(tmp_path):
    """A real script's traceback ends in a caret line and the error; the verdict shows the error (it once cut
    the reason at "... | ^^^^ | Runti"). Neither policy shared a slot, so sharewise's lower average JCT is
    said to be job order and noise, not sharing."""
    from sharewise.app.run import PolicyRun, RunReport
    from sharewise.app.run_inputs import PhysicalConfig
    from sharewise.runtime.exits import Evidence, exit_reason
    from sharewise.runtime.slots import cpu_layout

    script = tmp_path / "train.py"
    script.write_text("def main(word='seven'):\n    steps = {'done': 3}\n    return steps['done'] + int(word)\n\n\n"
                      "main()\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    ended = exit_reason(proc.returncode, Evidence(output=proc.stderr))
    assert "^^^" in ended.message  # the tail the verdict once cut
    runs = {}
    for name, finish in (("exclusive-sjf", 3.0), ("sharewise", 2.7)):
        result = RunResult(name, np.zeros(2), np.ones(2), np.array([0.0, 1.0]), np.array([1.0, finish]),
                           np.ones(2), 2.0, 1, 2.0, status=np.array([FAILED, DONE]))
        result.metrics = {**result.compute_metrics(), "finished": 1, "failed": 1, "shared_jobs": 0}
        jobs = [{"job_id": "bad", "workload": "train", "status": "failed", "exit": {"message": ended.message}},
                {"job_id": "ok", "workload": "w", "status": "done", "exit": None}]
        runs[name] = PolicyRun(name, result, jobs, True, 1.0)
    report = RunReport(PhysicalConfig(trace="jobs.csv", out=str(tmp_path)), runs, cpu_layout(1), "oracle")
    lines = report.to_json()["verdict"]
    assert ("sharewise: 1 of 2 job(s) FAILED, averages are over the 1 that finished: bad (train) failed: exit code 1: "
            "ValueError: invalid literal for int() with base 10: 'seven'") in lines
    assert not any("^^" in line or "lowest average JCT" in line for line in lines)
    assert ("No job shared a GPU under sharewise (each ran alone): its average JCT, 10% below exclusive-sjf's, comes "
            "from its job order, its pauses and run-to-run noise, not from sharing.") in lines


def test_a_trace_in_steps_reads_back_and_turns_into_seconds_at_the_solo_throughput(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,arrival_s,workload,gpus,steps\na,0,w,1,50\nb,3,v,1,20\n")
    trace = read_generic_csv(path, TraceContext(throughputs={"w": 10.0, "v": 4.0}))
    assert trace.steps.tolist() == [50, 20] and trace.duration.tolist() == [5.0, 5.0]
    assert read_generic_csv(write_generic_csv(trace, tmp_path / "u.csv")).steps.tolist() == [50, 20]
    both = tmp_path / "both.csv"
    both.write_text("job_id,arrival_s,workload,gpus,steps,duration_s\na,0,w,1,50,5\n")
    with pytest.raises(TraceError, match="exactly one of the columns"):
        read_generic_csv(both)


# ---- sharewise run (slow: real processes) ------------------------------------------------------------
def _dataset(tmp_path, device_name: str, slowdown: float = 1.05) -> Path:
    """A dataset that knows the sleep workload: its solo profile and its self-pair on this machine's slot."""
    path = tmp_path / "known"
    ds = Dataset(path)
    ds.write_profiles(pd.DataFrame([{
        "workload": "sleep_step", "family": "sleep", "batch_size": 1, "device_kind": "cpu", "device_name": device_name,
        "mode": "cpu", "host": "test", "torch_version": "x", "created_at": utc_now(), "iter_time_ms": 10.0,
        "throughput": 100.0,
    }]))
    ds.write_pairs(pd.DataFrame([{
        "workload_a": "sleep_step", "workload_b": "sleep_step", "device_kind": "cpu", "device_name": device_name,
        "mode": "cpu", "solo_a": 100.0, "solo_b": 100.0, "coloc_a": 100 / slowdown, "coloc_b": 100 / slowdown,
        "slowdown_a": slowdown, "slowdown_b": slowdown, "trials": 3, "cv_a": 0.01, "cv_b": 0.01, "status": "ok",
        "error": "", "created_at": utc_now(),
    }]))
    return path


def _trace(tmp_path, rows: list[tuple[str, float, str, int]], name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    lines = ["job_id,arrival_s,workload,gpus,steps"] + [f"{j},{a},{w},1,{s}" for j, a, w, s in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _measured(*args, timeout: float = 240) -> tuple[subprocess.CompletedProcess, LoadWindow]:
    """Run the CLI with ``args`` and the foreign CPU load of its window (its own jobs are its children)."""
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "sharewise", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    with LoadWindow([proc.pid]) as window:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM: the run stops its jobs (and a local Ray) before it exits
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"sharewise {args[0]} did not end within {timeout:.0f} s:\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), window


def _skip_if_busy(window: LoadWindow, what: str) -> None:
    """An expectation about timing failed: skip, saying why, when other processes loaded the machine."""
    problem = window.problem(limit=BUSY)
    if problem is not None:
        pytest.skip(f"{what}; {problem}")


def _jobs(run_json: Path) -> dict[str, dict]:
    return {j["job_id"]: j for j in json.loads(run_json.read_text())["jobs"]}


@pytest.fixture(scope="module")
def device_name():
    from sharewise.runtime.slots import cpu_layout

    return cpu_layout(1).device_name


@pytest.mark.slow
def test_exclusive_sjf_runs_jobs_one_at_a_time_shortest_first(tmp_path, device_name):
    """Three sleep jobs on one slot: a (40 steps) arrives alone and starts; b (10) and c (20) arrive while it runs.
    By hand: a, then b (shorter), then c; never two at once; every step reported."""
    data = _dataset(tmp_path, device_name)
    trace = _trace(tmp_path, [("a", 0, SLEEP, 40), ("c", 0.3, SLEEP, 20), ("b", 0.6, SLEEP, 10)])
    proc, load = _measured("run", trace, "--data", data, "--oracle", "--policy", "exclusive-sjf", "--calibrate", "1",
                           "--out", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path / "run" / "exclusive-sjf" / "run.json")
    order = sorted(jobs, key=lambda j: jobs[j]["finish"])
    if order != ["a", "b", "c"]:
        _skip_if_busy(load, f"completion order {order}")
    assert order == ["a", "b", "c"]
    spans = sorted((j["start"], j["finish"]) for j in jobs.values())
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:], strict=False))  # one job at a time
    assert all(j["status"] == "done" and j["steps_done"] == j["steps"] for j in jobs.values())
    assert all(j["jct"] == pytest.approx(j["finish"] - j["arrival"], abs=1e-3) for j in jobs.values())
    progress = tmp_path / "run" / "exclusive-sjf" / "jobs" / "b.progress"
    assert [int(line.split()[0]) for line in progress.read_text().split()[::2]] == list(range(1, 11))


@pytest.mark.slow
def test_sharewise_pauses_a_long_job_for_a_short_one_and_resumes_it_where_it_was(tmp_path, device_name):
    """One slot; the sleep workload may not share (the dataset holds no pair of it here). long (1500 steps,
    about 15 s) runs alone when short (20 steps) arrives: 15 s > 4 x short's work (its start-up plus 0.2 s),
    and long keeps half its SLO allowance after waiting twice short's work, so sharewise pauses long, runs
    short, then resumes long (SIGCONT, the same process) with the step count it had."""
    data = _dataset(tmp_path, device_name)
    pairs = Dataset(data).pairs_dir
    for f in pairs.iterdir():
        f.unlink()  # no pair: the sleep workload never shares
    Dataset(data).write_pairs(pd.DataFrame([{
        "workload_a": "other", "workload_b": "other", "device_kind": "cpu", "device_name": device_name, "mode": "cpu",
        "solo_a": 1.0, "solo_b": 1.0, "coloc_a": 0.5, "coloc_b": 0.5, "slowdown_a": 2.0, "slowdown_b": 2.0,
        "trials": 1, "cv_a": 0.0, "cv_b": 0.0, "status": "ok", "error": "", "created_at": utc_now(),
    }]))
    trace = _trace(tmp_path, [("long", 0, SLEEP, 1500), ("short", 4.0, SLEEP, 20)])
    proc, load = _measured("run", trace, "--data", data, "--oracle", "--policy", "sharewise", "--calibrate", "1",
                           "--out", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path / "run" / "sharewise" / "run.json")
    events = [(e["event"], e.get("step")) for e in jobs["long"]["events"]]
    if [e for e, _ in events] != ["start", "pause", "resume", "finish"]:
        _skip_if_busy(load, f"long's events {events}")
    assert [e for e, _ in events] == ["start", "pause", "resume", "finish"]
    paused_at, resumed_at = events[1][1], events[2][1]
    long_events = {e["event"]: e["t"] for e in jobs["long"]["events"]}
    if not paused_at > 0 or long_events["pause"] > jobs["short"]["start"] + 0.5:
        # On a loaded machine long may not have stepped in its first 4 s, or the pause may lag the start.
        _skip_if_busy(load, f"long paused at step {paused_at}, {long_events['pause'] - jobs['short']['start']:.2f} s "
                            "after short started")
    assert 0 < paused_at == resumed_at < 1500  # resumed where it was: no step lost or repeated
    assert jobs["short"]["finish"] < jobs["long"]["finish"]
    assert long_events["pause"] <= jobs["short"]["start"] + 0.5 and long_events["resume"] >= jobs["short"]["finish"]
    steps = [int(line.split()[0]) for line in
             (tmp_path / "run" / "sharewise" / "jobs" / "long.progress").read_text().splitlines()]
    assert steps == list(range(1, 1501))  # one process, every step once
    assert jobs["long"]["restarts"] == 1 and jobs["long"]["status"] == "done"


@pytest.mark.slow
def test_jobs_that_share_a_slot_are_measured_and_written_as_observed_pairs(tmp_path, device_name):
    """sjf-ffs puts the second job next to the first; while both step (a few seconds), each one's slowdown is
    measured, learned by the policy and written to RUNDIR/observed as a pair row of this device; a job that
    crashes is recorded as failed and the run goes on; a training command (no pairs: it runs alone) ends at its
    step count."""
    data = _dataset(tmp_path, device_name)
    command = f'"infer=cmd:{sys.executable} {FIXTURE.parent / "infer_loop.py"} --batch-size 4"'
    trace = _trace(tmp_path, [("x", 0, SLEEP, 600), ("y", 0.2, SLEEP, 600), ("z", 0.4, CRASH, 50),
                              ("w", 0.6, command, 40)])
    proc, load = _measured("run", trace, "--data", data, "--oracle", "--policy", "sjf-ffs", "--calibrate", "1",
                           "--out", tmp_path / "run", "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]  # the run completed, and a job (z) failed
    summary = json.loads(proc.stdout)
    jobs = {j["job_id"]: j for j in summary["runs"]["sjf-ffs"]["jobs"]}
    assert jobs["x"]["status"] == "done" and jobs["y"]["status"] == "done"
    assert jobs["z"]["status"] == "failed" and "crashed on purpose" in jobs["z"]["exit"]["message"]
    # A training command is a job too: its steps come from the step hook in its interpreter.
    assert jobs["w"]["workload"] == "infer" and jobs["w"]["status"] == "done" and jobs["w"]["steps_done"] == 40
    observed = tmp_path / "run" / "observed"
    if not observed.is_dir():  # sleeping steps pin a slowdown down within 5% unless the machine jitters them
        _skip_if_busy(load, f"no observed row: {[n for n in summary['notes'] if 'not written' in n]}")
    rows = Dataset(observed).read_pairs(latest=False)
    assert len(rows) >= 1
    row = rows.iloc[-1]
    assert (row["workload_a"], row["workload_b"], row["device_name"], row["source"]) == (
        "sleep_step", "sleep_step", device_name, "observed")
    assert np.isfinite([row["slowdown_a"], row["slowdown_b"]]).all() and row["slowdown_a"] > 0
    # collect's confidence rule: at least 3 windows, each slowdown's 95% half-width within 5%.
    assert row["trials"] >= 3 and max(row["ci_a"], row["ci_b"]) <= 0.05
    assert summary["runs"]["sjf-ffs"]["jobs"] and json.loads(
        (tmp_path / "run" / "sjf-ffs" / "run.json").read_text())["observed_pairs"] >= 1
    from sharewise.datasets.store import read_datasets

    profiles, pairs = read_datasets([data, tmp_path / "run" / "observed"])  # as 'sharewise train' reads them
    assert "observed" in set(pairs["source"].fillna("")) and "sleep_step" in set(profiles["workload"])


@pytest.mark.slow
def test_a_stopped_run_resumes_keeping_finished_jobs(tmp_path, device_name):
    """SIGTERM after the first job finished: exit 143, the finished job's times kept; the same command again
    finishes the rest, the interrupted job from the step count it had."""
    data = _dataset(tmp_path, device_name)
    trace = _trace(tmp_path, [("first", 0, SLEEP, 30), ("second", 0.1, SLEEP, 1500)])
    out = tmp_path / "run"
    args = [sys.executable, "-m", "sharewise", "run", trace, "--data", data, "--oracle", "--policy", "exclusive-sjf",
            "--calibrate", "1", "--out", out]
    proc = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    state = out / "exclusive-sjf" / "state.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if state.is_file():
            snap = json.loads(state.read_text())
            if snap["loop"]["status"][0] == DONE and snap["world"]["jobs"][1]["steps"] > 50:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the run did not get past its first job within 180 s")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "rerun the same command to resume" in " ".join(err.split())
    before = json.loads(state.read_text())
    done_steps = before["world"]["jobs"][1]["steps"]
    assert 0 < done_steps < 1500
    again, _ = _measured("run", trace, "--data", data, "--oracle", "--policy", "exclusive-sjf", "--calibrate", "1",
                         "--out", out)
    assert again.returncode == 0, again.stderr[-3000:]
    jobs = _jobs(out / "exclusive-sjf" / "run.json")
    assert jobs["first"]["finish"] == pytest.approx(before["loop"]["finish"][0], abs=1e-3)
    assert jobs["second"]["status"] == "done" and jobs["second"]["steps_done"] == 1500
    restart = [e for e in jobs["second"]["events"] if e["event"] == "restart"]
    assert restart and restart[0]["step"] >= done_steps


@pytest.mark.slow
def test_a_ray_run_places_each_job_as_an_actor_on_its_slot(tmp_path, device_name):
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'sharewise[ray]')")
    data = _dataset(tmp_path, device_name)
    trace = _trace(tmp_path, [("a", 0, SLEEP, 40), ("c", 0.3, SLEEP, 20), ("b", 0.6, SLEEP, 10)])
    proc, load = _measured("run", trace, "--data", data, "--oracle", "--policy", "exclusive-sjf", "--calibrate", "1",
                           "--executor", "ray", "--out", tmp_path / "run", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path / "run" / "exclusive-sjf" / "run.json")
    order = sorted(jobs, key=lambda j: jobs[j]["finish"])
    if order != ["a", "b", "c"]:
        _skip_if_busy(load, f"completion order {order}")
    assert order == ["a", "b", "c"]
    assert all(j["status"] == "done" and j["steps_done"] == j["steps"] for j in jobs.values())


def test_bad_inputs_stop_in_one_line_before_anything_starts(tmp_path, device_name, capsys):
    from sharewise.cli import main

    data = _dataset(tmp_path, device_name)
    missing = tmp_path / "m.csv"
    missing.write_text("job_id,arrival_s,workload,gpus\na,0,sleep_step,1\n")
    cases = (
        (["--slots", "3"], _trace(tmp_path, [("a", 0, SLEEP, 5)]), "equal slot"),
        ([], _trace(tmp_path, [("a", 0, "no_such_workload", 5)], "u.csv"), "unknown workload"),
        ([], missing, "duration_s"),
        (["--policy", "no-such-policy"], _trace(tmp_path, [("a", 0, SLEEP, 5)]), "unknown policy"),
    )
    for n, (extra, trace, text) in enumerate(cases):
        out = tmp_path / f"r{n}"
        with pytest.raises(SystemExit) as stop:
            main(["run", str(trace), "--data", str(data), "--out", str(out), *extra])
        err = capsys.readouterr().err
        assert stop.value.code == 2, err
        assert err.startswith("error:") and text in err and "Traceback" not in err
        assert not out.exists()
