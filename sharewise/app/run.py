"""``sharewise run``: a trace's jobs run for real on the local devices, under each policy in turn.

The same scheduling loop and policy objects as ``simulate`` (``sharewise.engine.loop``), over a real world
(``sharewise.runtime.world``). One call:

1. **Prepare** (nothing starts before every input is checked): the trace (generic CSV with ``steps`` or
   ``duration_s``; a duration becomes steps at the dataset's solo throughput), the slots, the dataset's pairs
   for the run's device (the policies' knowledge: predictions by default, as ``simulate`` shows them), the
   memory rule of ``recommend`` (two jobs share a slot only where their memory limits fit it together).
2. **Calibrate** (``calibrate_s`` > 0): each workload of the trace runs alone for a few seconds, so its solo
   step time and start-up time are those of this sitting (this machine's speed moves by a third from day to
   day); the policies' unit of work is that step time. Kept in ``RUNDIR/sitting.json``.
3. **Run** each policy: ``RUNDIR/<policy>/run.json`` with every job's arrival, starts, pauses, finish, JCT,
   realized slowdown, length and status, and the metrics of ``simulate`` (averages over the jobs that
   finished; a failed job is counted and named with its reason). A training command may leave its length
   out: the policies see an estimate until the real length is known (``sharewise.runtime.lengths``); every
   policy of one call starts from the same estimates. With ``metrics_port`` the run serves live Prometheus
   metrics (``sharewise.runtime.metrics``). Pairs that share a slot are measured as they
   run; those that pass ``collect``'s confidence rule (``profiler.confidence``) are learned by the policies and
   written as observed pair rows to ``RUNDIR/observed/`` (a dataset folder ``sharewise train`` reads), the others
   named in a note. A job's realized slowdown counts from its first step (``stepping_slowdown``).
   After every event the loop's state is saved (``RUNDIR/<policy>/state.json``); a stopped run resumes from it.
4. **Compare** (``compare_sim``): the same trace simulated on the same slots under the same policy, with the
   simulator's truth measured in this sitting (each workload's solo step time and start-up time, each
   pair's slowdowns as observed by the runs; a pair the runs never formed takes the dataset's value, said in
   the notes), and per policy the physical and simulated JCTs side by side.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.app.run_compare import compare
from sharewise.app.run_inputs import (
    CALIBRATE_S,  # noqa: F401 - the CLI's default
    DEFAULT_POLICIES,  # noqa: F401 - the CLI's default
    PhysicalConfig,
    RunInputs,
    calibrate,
    job_lengths,
    prepare,
    step_times,
)
from sharewise.command_spec import is_command_spec
from sharewise.datasets.store import Dataset, utc_now, write_json_atomic
from sharewise.engine.cluster import Cluster
from sharewise.engine.loop import DONE, FAILED, SchedulingLoop
from sharewise.engine.result import RunResult
from sharewise.policy import get_policy, warm_up
from sharewise.runtime.exits import error_line
from sharewise.runtime.jobs import JobSpec
from sharewise.runtime.lengths import Length
from sharewise.runtime.sitting import Sitting
from sharewise.runtime.slots import Layout
from sharewise.runtime.world import RealWorld

_JSON_DECIMALS = 4
OBSERVED = "observed"


@dataclass
class PolicyRun:
    """One policy's physical run: the loop's result and what ``run.json`` records per job."""

    name: str
    result: RunResult
    jobs: list[dict]
    complete: bool
    wall_s: float
    observed_pairs: int = 0
    notes: list[str] = field(default_factory=list)

    def failures(self) -> list[dict]:
        """The jobs that ended failed: ``[{"job_id": "z", "workload": "crash", "status": "failed",
        "message": "exit code 1: ..."}]``."""
        return [{"job_id": j["job_id"], "workload": j["workload"], "status": j["status"],
                 "message": (j.get("exit") or {}).get("message", "")}
                for j in self.jobs if j["status"] not in ("done", "unfinished")]


@dataclass
class RunReport:
    """The runs of every policy, the comparison with the simulator where asked, and the notes."""

    config: PhysicalConfig
    runs: dict[str, PolicyRun]
    layout: Layout
    view: str
    notes: list[str] = field(default_factory=list)
    comparison: dict | None = None
    sitting_source: str = ""

    def metrics_json(self) -> dict:
        """The ``simulate --json`` shape of the physical runs (``verdict`` reads it)."""
        n = len(next(iter(self.runs.values())).result.arrival) if self.runs else 0
        return {
            "jobs": n,
            "gpus": self.layout.n_slots,
            "view": self.view,
            "observe": self.config.observe,
            "policies": {name: _rounded(r.result.metrics) for name, r in self.runs.items()},
        }

    def failed_jobs(self) -> int:
        """How many jobs failed over every policy's run (``sharewise run`` then exits 1)."""
        return sum(len(r.failures()) for r in self.runs.values())

    def to_json(self) -> dict:
        """Return the ``--json`` object: the metrics of every run, the verdict (failed jobs named first, with
        their reasons), the failures, the comparison, the notes."""
        from sharewise.app.simulate import verdict

        out = self.metrics_json()
        out["device"] = {"kind": self.layout.device, "mode": self.layout.mode, "slots": self.layout.n_slots,
                         "device_name": self.layout.device_name}
        out["failures"] = {name: r.failures() for name, r in self.runs.items()}
        shared = {name: m.get("shared_jobs") for name, m in out["policies"].items()}
        out["verdict"] = _failure_lines(out) + verdict(out, unit=("s", 1.0), shared=shared, noise=True)
        out["runs"] = {name: {"complete": r.complete, "wall_s": round(r.wall_s, 1), "jobs": r.jobs}
                       for name, r in self.runs.items()}
        if self.comparison is not None:
            out["comparison"] = self.comparison
        out["notes"] = self.notes
        return out


# ---- running -----------------------------------------------------------------------------------------
def run_policy(name: str, inputs: RunInputs, config: PhysicalConfig, out: Path, sitting: Sitting,
               progress=None, launcher=None, env: dict[str, str] | None = None,
               lengths: list[Length] | None = None, metrics=None) -> PolicyRun:
    """Run the trace for real under policy ``name`` (resuming ``out/<name>/state.json`` if a stop left one).

    ``lengths``: each job's length as the policies first see it (default: ``job_lengths`` now); ``metrics``: a
    ``runtime.metrics.RunExporter`` to feed after every event."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    step_s, startup_s = step_times(inputs, sitting)
    lengths = [replace(n) for n in lengths] if lengths is not None else job_lengths(inputs, sitting, config, step_s)
    steps = np.array([n.steps for n in lengths], dtype=float)
    observed = Dataset(out / OBSERVED)
    refused: dict[tuple[str, str], str] = {}  # pairs whose latest measurement failed the confidence rule

    def on_pair(spec_a: JobSpec, spec_b: JobSpec, values: dict) -> None:
        key = (min(spec_a.name, spec_b.name), max(spec_a.name, spec_b.name))
        if values["refused"]:
            refused[key] = f"{values['refused']} (in {values['pairings']} pairing(s))"
            return
        refused.pop(key, None)
        observed.write_pairs(pd.DataFrame([_observed_row(spec_a, spec_b, values, inputs, name)]))

    state_path = folder / "state.json"

    def save() -> None:
        write_json_atomic(state_path, {"loop": loop.snapshot(), "world": world.snapshot(), "saved_at": utc_now()})
        write_json_atomic(out / "sitting.json", sitting.to_json())
        if metrics is not None:
            from sharewise.runtime.metrics import policy_view

            metrics.update(policy_view(name, loop, world, world.clock()))
        if progress is not None:
            progress("event", policy=name, done=int(np.isin(loop.status, (DONE, FAILED)).sum()), total=loop.n,
                     running=len(world.live), now=loop.last)

    world = RealWorld(inputs.specs, step_s, startup_s, inputs.layout, folder, sitting, on_pair=on_pair,
                      launcher=launcher, extra_env=env, poll_s=config.poll_s, on_event=save, lengths=lengths)
    loop = SchedulingLoop(
        arrival=np.asarray(inputs.trace.arrival, dtype=float), work=startup_s + steps * step_s,
        gpus=np.asarray(inputs.trace.gpus, dtype=np.int64), workload=inputs.table.ids([s.name for s in inputs.specs]),
        line=inputs.trace.line, policy=get_policy(name), table=inputs.table, world=world,
        cluster=Cluster(n_gpus=inputs.layout.n_slots, gpus_per_node=inputs.layout.n_slots), slo=config.max_slowdown,
        name=name, observe=config.observe, round_s=config.round_s, job_id=inputs.trace.job_id,
    )
    if state_path.is_file():
        saved = json.loads(state_path.read_text())
        loop.restore(saved["loop"])
        world.restore(saved["world"])
    # Compiled kernels load (or compile, on a first install) here, before the clock starts.
    warm_up(get_policy(name), inputs.layout.n_slots, inputs.table)
    began = time.perf_counter()
    world.begin(loop.last)
    try:
        result = loop.run()
    finally:
        world.shutdown()
        save()
    done = loop.status == DONE
    for j, rec in enumerate(world.jobs):  # a command that ran to its own end: the next call's estimate
        if done[j] and is_command_spec(rec.spec.workload) and (rec.spec.steps is None or rec.steps < rec.spec.steps):
            sitting.lengths[rec.spec.workload] = rec.steps
    write_json_atomic(out / "sitting.json", sitting.to_json())
    last_step = np.array([rec.last_step_t for rec in world.jobs], dtype=float)
    result.realized_slowdown = stepping_slowdown(
        loop.start, np.where(np.isfinite(loop.finish), last_step, np.nan),
        np.array([rec.startups[0] if rec.startups else 0.0 for rec in world.jobs]),
        np.array([rec.step_s for rec in world.jobs]), np.array([rec.length.steps for rec in world.jobs]))
    result.metrics = result.compute_metrics()  # the SLO counted on the slowdowns from the first step
    result.metrics = finished_metrics(result, done)
    result.metrics["shared_jobs"] = int(loop.shared.sum())
    jobs = _jobs_json(loop, world, inputs, result.realized_slowdown)
    notes = [n for rec in world.jobs if (n := rec.length.note(rec.spec.job_id, rec.spec.name)) is not None]
    notes += [f"pair {a}+{b} not written to {OBSERVED}/ nor learned by the policies: {why}"
              for (a, b), why in refused.items()]
    run = PolicyRun(name, result, jobs, True, time.perf_counter() - began, len(loop.learned), notes)
    write_json_atomic(folder / "run.json", _run_json(run, inputs, config))
    return run


def stepping_slowdown(start: np.ndarray, last_step: np.ndarray, startup: np.ndarray, step_s: np.ndarray,
                      steps: np.ndarray) -> np.ndarray:
    """Each job's realized slowdown while it stepped: the time from its first start to its ``last_step`` report,
    less its first start-up (``startup``: from its process start to its first step report, which holds one
    step), over its ``steps`` at its solo ``step_s``; NaN for a job that did not end (``last_step`` NaN). A
    start-up and the teardown after the last step (the interpreter's exit) are no slowdown: a job of 1 s of work
    would otherwise count 3 s of imports and 1 s of exit as a slowdown of 5 and violate any SLO while alone.
    Start-ups that later moves cost, and pauses, still count.

    Example: started at 10.0, first step reported 2.8 s later (step time 0.1 s), its 10th and last at 13.9:
    ``(13.9 - 10.0 - (2.8 - 0.1)) / (10 * 0.1)`` = 1.2.
    """
    work = steps * step_s
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (last_step - start - np.maximum(0.0, startup - step_s)) / work
    return np.where(np.isfinite(last_step) & (work > 0), out, np.nan)


def finished_metrics(result: RunResult, done: np.ndarray) -> dict:
    """``result``'s metrics with the per-job averages (JCT, p95 JCT, queueing, SLO violations) over the jobs
    that finished (``done``) only, and how many ``finished`` and ``failed``; the makespan, utilization and
    counts of the run stay those of every job. Example: ``{"avg_jct": 41.2, ..., "finished": 3, "failed": 1}``.
    """
    metrics = dict(result.metrics)
    over = ("avg_jct", "p95_jct", "avg_queue", "slo_violations")
    if done.all():
        part = metrics
    elif done.any():
        part = RunResult(result.policy, result.arrival[done], result.duration[done], result.start[done],
                         result.finish[done], result.realized_slowdown[done], result.busy_gpu_seconds, result.n_gpus,
                         result.slo).compute_metrics()
    else:
        part = {k: (0 if k == "slo_violations" else math.nan) for k in over}
    metrics.update({k: part[k] for k in over})
    metrics["finished"] = int(done.sum())
    metrics["failed"] = int(np.isfinite(result.finish).sum() - done.sum())
    return metrics


def _failure_lines(summary: dict) -> list[str]:
    """The verdict's first lines where jobs failed: per policy, how many, that averages leave them out, and
    each one with its reason."""
    lines = []
    for name, failed in summary["failures"].items():
        if not failed:
            continue
        m = summary["policies"][name]
        jobs = "; ".join(f"{f['job_id']} ({f['workload']}) {f['status']}: {error_line(f['message'])[:200]}"
                         for f in failed)
        lines.append(f"{name}: {len(failed)} of {summary['jobs']} job(s) FAILED, averages are over the "
                     f"{m.get('finished', summary['jobs'] - len(failed))} that finished: {jobs}")
    return lines


def _jobs_json(loop: SchedulingLoop, world: RealWorld, inputs: RunInputs, realized: np.ndarray) -> list[dict]:
    out = []
    status_name = {DONE: "done", FAILED: "failed"}
    for j, spec in enumerate(inputs.specs):
        rec = world.job_json(j)
        status = status_name.get(int(loop.status[j]), "unfinished")
        if status == "failed" and rec["exit"]:
            status = rec["exit"]["status"]
        out.append({
            "job_id": spec.job_id, "workload": spec.name, "spec": spec.workload, "gpus": int(loop.ngpus[j]),
            "arrival": float(loop.arrival[j]), "start": _num(loop.start[j]), "finish": _num(loop.finish[j]),
            "jct": _num(loop.finish[j] - loop.arrival[j]), "realized_slowdown": _num(realized[j]),
            "work_s": round(float(loop.duration[j]), 3), "status": status, "restarts": int(loop.restarts[j]),
            "shared": bool(loop.shared[j]),
            **{k: v for k, v in rec.items() if k != "workload"},
        })
    return out


def _run_json(run: PolicyRun, inputs: RunInputs, config: PhysicalConfig) -> dict:
    lay = inputs.layout
    return {
        "policy": run.name, "trace": config.trace, "complete": run.complete, "created_at": utc_now(),
        "device": {"kind": lay.device, "mode": lay.mode, "slots": lay.n_slots, "device_name": lay.device_name,
                   "knowledge": inputs.device},
        "view": inputs.view_name, "metrics": _rounded(run.result.metrics), "wall_s": round(run.wall_s, 1),
        "policy_calls": run.result.policy_calls, "observed_pairs": run.observed_pairs, "jobs": run.jobs,
        "failures": run.failures(), "notes": inputs.notes + run.notes,
    }


def _observed_row(spec_a: JobSpec, spec_b: JobSpec, values: dict, inputs: RunInputs, policy: str) -> dict:
    """A pairs-table row of a pair observed in a run that passed the confidence rule (``source`` = ``observed``;
    slowdowns pooled over its pairings, ``trials``, ``cv_*`` and ``ci_*`` over their windows)."""
    import socket

    lay = inputs.layout
    return {
        "workload_a": spec_a.name, "workload_b": spec_b.name, "device_kind": lay.device,
        "device_name": lay.device_name, "mode": lay.mode, "solo_a": values["solo_a"], "solo_b": values["solo_b"],
        "coloc_a": values["coloc_a"], "coloc_b": values["coloc_b"], "slowdown_a": values["slowdown_a"],
        "slowdown_b": values["slowdown_b"], "trials": int(values["trials"]), "cv_a": values["cv_a"],
        "cv_b": values["cv_b"], "ci_a": values["ci_a"], "ci_b": values["ci_b"],
        "status": "ok", "error": "", "created_at": utc_now(), "source": OBSERVED, "host": socket.gethostname(),
        "window_s": values["window_s"], "steps_a": int(values["steps_a"]), "steps_b": int(values["steps_b"]),
        "size": spec_a.size, "isolation": f"run:{policy}",
    }


# ---- the whole command -------------------------------------------------------------------------------
def run_physical(config: PhysicalConfig, progress: Callable | None = None, launcher=None) -> RunReport:
    """Prepare, calibrate, run every policy (skipping those a previous call finished), compare if asked.

    Returns
    -------
    RunReport
        ``runs`` maps each policy to its ``PolicyRun``; ``to_json()`` is the ``--json`` object, e.g.
        ``{"jobs": 16, "gpus": 1, "policies": {"sharewise": {"avg_jct": 81.2, ...}}, "verdict": [...],
        "comparison": {"sharewise": {"avg_jct_physical": 81.2, "avg_jct_simulated": 78.9, ...}}}``.
    """
    inputs = prepare(config)
    with _metrics(config) as exporter:  # a port in use fails here, before anything starts
        if exporter is not None and progress is not None:
            progress("metrics", url=exporter.url)
        return _run_all(config, inputs, progress, launcher, exporter)


def _run_all(config: PhysicalConfig, inputs: RunInputs, progress, launcher, exporter) -> RunReport:
    """``run_physical`` once its inputs are checked and its metrics served."""
    from sharewise.profiler.interrupts import StopSignals

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    sitting_path = out / "sitting.json"
    sitting = Sitting.from_json(json.loads(sitting_path.read_text())) if sitting_path.is_file() else Sitting()
    runs: dict[str, PolicyRun] = {}
    with StopSignals(), _devices(config, inputs) as (launch, env):
        if config.calibrate_s > 0:
            calibrate(inputs, config, out, sitting, progress, env)
        # Every policy of this call starts from the same lengths (what the sitting knew before the runs).
        lengths = job_lengths(inputs, sitting, config, step_times(inputs, sitting)[0])
        for name in config.policies:
            done = out / name / "run.json"
            if done.is_file() and json.loads(done.read_text()).get("complete"):
                runs[name] = _load_run(done, inputs)
                if progress is not None:
                    progress("kept", policy=name)
                continue
            if progress is not None:
                progress("policy", policy=name, total=len(inputs.specs))
            runs[name] = run_policy(name, inputs, config, out, sitting, progress, launcher or launch, env,
                                    lengths, exporter)
    notes = list(inputs.notes)
    estimated = [n for n in lengths if n.estimated]
    if estimated:
        notes.append(f"{len(estimated)} job(s) left their length out: the policies saw an estimate until the "
                     "real length was known (how far off each was: the notes below; default --default-length "
                     f"{config.default_length_s:g} s)")
    for name, run in runs.items():
        notes.extend(f"{name}: {n}" if len(runs) > 1 else n for n in run.notes)
    notes.append("realized slowdowns (and SLO violations) count from each job's first step to its last: its start-up "
                 "(process start, imports, build) and its teardown (interpreter exit) are not slowdown"
                 + _startup_note(runs))
    if config.calibrate_s > 0:
        notes.append(f"calibration: each workload ran alone for {config.calibrate_s:g} s before the runs; the "
                     "policies' unit of work is its step time then")
    else:
        notes.append("no calibration: the policies' unit of work is the dataset's solo throughput")
    for name, cal in sitting.calibrated.items():
        if "failed" in cal:
            notes.append(f"workload {name!r} failed in its calibration run ({cal['failed']}); its step time is "
                         "from the steps it reported before, or the dataset's")
    report = RunReport(config, runs, inputs.layout, inputs.view_name, notes)
    if config.compare_sim:
        report.comparison, extra = compare(inputs, config, {n: r.result for n, r in runs.items()}, sitting,
                                           _learned_steps(runs, lengths))
        report.notes.extend(extra)
    summary = report.to_json()
    for name in runs:
        path = out / name / "run.json"
        data = json.loads(path.read_text())
        data["verdict"] = summary["verdict"]
        if report.comparison is not None:
            data["comparison"] = report.comparison.get(name)
        write_json_atomic(path, data)
    return report


def _learned_steps(runs: dict[str, PolicyRun], lengths: list[Length]) -> np.ndarray:
    """Each job's length as the runs left it (where a run has it done), else as the policies first saw it."""
    steps = np.array([n.steps for n in lengths], dtype=float)
    for run in runs.values():
        for j, job in enumerate(run.jobs):
            if job["status"] == "done" and job.get("steps") is not None:
                steps[j] = job["steps"]
    return steps


@contextlib.contextmanager
def _metrics(config: PhysicalConfig):
    """The run's metrics exporter while it runs (None without ``metrics_port``); it stops serving after."""
    if config.metrics_port is None:
        yield None
        return
    from sharewise.runtime.metrics import RunExporter

    exporter = RunExporter(config.metrics_host, config.metrics_port)
    try:
        yield exporter
    finally:
        exporter.close()


@contextlib.contextmanager
def _devices(config: PhysicalConfig, inputs: RunInputs) -> Iterator[tuple[object | None, dict[str, str]]]:
    """The runs' job launcher and the environment of every job: the sharing mode's (MPS: a running daemon's,
    or one started for the runs and stopped after) and, with ``--executor ray``, actors on a Ray cluster
    (started locally if no address is given, and torn down after)."""
    from sharewise.profiler.config import RunConfig as ProfilerConfig
    from sharewise.profiler.modes import SHARING_MODES

    lay = inputs.layout
    mode = SHARING_MODES.get(lay.mode)
    with mode.environment(ProfilerConfig(device=lay.device, mode=lay.mode)) as env:
        if config.executor == "local":
            yield None, dict(env)
            return
        from sharewise.runtime.ray_jobs import RayLauncher, cluster_layout

        launcher = RayLauncher(lay, config.address, dict(env))
        try:
            inputs.layout = cluster_layout(lay, config.address)
            yield launcher, dict(env)
        finally:
            launcher.close()


def _load_run(path: Path, inputs: RunInputs) -> PolicyRun:
    """A run a previous call finished, read back from its ``run.json``."""
    data = json.loads(path.read_text())
    jobs = data["jobs"]

    def col(key):
        return np.array([math.nan if j[key] is None else j[key] for j in jobs], dtype=float)

    result = RunResult(
        policy=data["policy"], arrival=col("arrival"), duration=col("work_s"), start=col("start"),
        finish=col("finish"), realized_slowdown=col("realized_slowdown"), busy_gpu_seconds=0.0,
        n_gpus=inputs.layout.n_slots, slo=math.nan, policy_calls=data.get("policy_calls", 0),
    )
    result.metrics = data["metrics"]
    notes = [n for n in data.get("notes", []) if n not in inputs.notes]
    return PolicyRun(data["policy"], result, jobs, True, data.get("wall_s", 0.0), data.get("observed_pairs", 0),
                     notes)


# ---- small helpers -----------------------------------------------------------------------------------
def _startup_note(runs: dict[str, PolicyRun]) -> str:
    """``" (here a median 2.7 s of start-up and 0.4 s of teardown)"``: the jobs' first start-ups and the time from
    their last step to their exit over every run; nothing where none was timed."""
    firsts = [j["startup_s"][0] for r in runs.values() for j in r.jobs if j.get("startup_s")]
    ends = [j["finish"] - j["exit"]["last_step_t"] for r in runs.values() for j in r.jobs
            if j["status"] == "done" and (j.get("exit") or {}).get("last_step_t") is not None]
    parts = ([f"{float(np.median(firsts)):.1f} s of start-up"] if firsts else []) + (
        [f"{float(np.median(ends)):.1f} s of teardown"] if ends else [])
    return f" (here a median {' and '.join(parts)})" if parts else ""


def _rounded(metrics: dict) -> dict:
    return {k: (round(v, _JSON_DECIMALS) if isinstance(v, float) and math.isfinite(v) else v)
            for k, v in metrics.items()}


def _num(x: float) -> float | None:
    return round(float(x), 3) if math.isfinite(x) else None
