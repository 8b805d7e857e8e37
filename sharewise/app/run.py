"""``sharewise run``: a trace's jobs run for real on the local devices, under each policy in turn.

The same scheduling loop and policy objects as ``simulate`` (``sharewise.engine.loop``), over a real world
(``sharewise.runtime.world``); one policy's run is the runtime's one entry (``sharewise.runtime.physical``), as
``engine.simulator.simulate`` is the simulator's. This module reads and checks the inputs, calibrates, hands each
run what it read and measured, and turns the runs into ``run.json`` and the command's output. One call:

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
   named in a note. A job's realized slowdown counts from its first step (``runtime.physical.stepping_slowdown``).
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
from sharewise.app.simulate import JSON_DECIMALS, bound_metrics
from sharewise.datasets.pair_row import OBSERVED, pair_row
from sharewise.datasets.store import Dataset, utc_now, write_json_atomic
from sharewise.engine.result import RunResult
from sharewise.engine.world import DONE, FAILED
from sharewise.policy import get_policy
from sharewise.runtime.exits import error_line
from sharewise.runtime.jobs import JobSpec
from sharewise.runtime.lengths import Length
from sharewise.runtime.physical import run_trace
from sharewise.runtime.sitting import Sitting
from sharewise.runtime.slots import Layout


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
        bounded = {name: [j for j in r.jobs if j.get("bound_max") is not None] for name, r in self.runs.items()}
        out["verdict"] = _failure_lines(out) + verdict(out, unit=("s", 1.0), shared=shared, noise=True,
                                                       bounded=bounded)
        out["runs"] = {name: {"complete": r.complete, "wall_s": round(r.wall_s, 1), "jobs": r.jobs}
                       for name, r in self.runs.items()}
        if self.comparison is not None:
            out["comparison"] = self.comparison
        out["notes"] = self.notes
        return out


# ---- running -----------------------------------------------------------------------------------------
def run_policy(name: str, inputs: RunInputs, config: PhysicalConfig, out: Path, sitting: Sitting,
               times: tuple[np.ndarray, np.ndarray], lengths: list[Length], progress=None, launcher=None,
               env: dict[str, str] | None = None, metrics=None) -> PolicyRun:
    """Run the trace for real under policy ``name`` (``runtime.physical.run_trace``, which resumes
    ``out/<name>/state.json`` if a stop left one); write its ``run.json`` and the pairs it observed.

    ``times`` are each job's solo step time and start-up time (``step_times``), ``lengths`` each job's length as
    the policies first see it (``job_lengths``); ``metrics`` a ``runtime.metrics.RunExporter`` to feed after
    every event."""
    observed = Dataset(out / OBSERVED)
    refused: dict[tuple[str, str], str] = {}  # pairs whose latest measurement failed the confidence rule

    def on_pair(spec_a: JobSpec, spec_b: JobSpec, values: dict) -> None:
        key = (min(spec_a.name, spec_b.name), max(spec_a.name, spec_b.name))
        if values["refused"]:
            refused[key] = f"{values['refused']} (in {values['pairings']} pairing(s))"
            return
        refused.pop(key, None)
        observed.write_pairs(pd.DataFrame([_observed_row(spec_a, spec_b, values, inputs.layout, name)]))

    step_s, startup_s = times
    ran = run_trace(inputs.trace, inputs.specs, get_policy(name), inputs.table, layout=inputs.layout, step_s=step_s,
                    startup_s=startup_s, lengths=lengths, folder=out / name, sitting=sitting,
                    sitting_path=out / "sitting.json", name=name, slo=config.max_slowdown, observe=config.observe,
                    round_s=config.round_s, poll_s=config.poll_s, launcher=launcher, env=env, on_pair=on_pair,
                    progress=progress, metrics=metrics, kinds=inputs.kinds, bounds=inputs.bound_values(),
                    split=None if inputs.contract is None else inputs.contract.split_matrix(), knob=inputs.knob)
    if inputs.bounds is not None:
        ran.result.metrics.update(bound_metrics(ran.result, inputs.bound_values()))
    notes = ran.notes + [f"pair {a}+{b} not written to {OBSERVED}/ nor learned by the policies: {why}"
                         for (a, b), why in refused.items()]
    run = PolicyRun(name, ran.result, _jobs_json(ran.result, ran.jobs, inputs), True, ran.wall_s, ran.observed_pairs,
                    notes)
    write_json_atomic(out / name / "run.json", _run_json(run, inputs, config))
    return run


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


def _jobs_json(result: RunResult, records: list[dict], inputs: RunInputs) -> list[dict]:
    """``run.json``'s jobs: each job's times, status, restarts and GPUs from the run's result, with what the
    world recorded of it (``records``: steps, events, start-ups, exit, length)."""
    out = []
    status_name = {DONE: "done", FAILED: "failed"}
    jct = result.jct
    bounded = inputs.bounds is not None and any(b.bounded for b in inputs.bounds)
    for j, (spec, rec) in enumerate(zip(inputs.specs, records, strict=True)):
        status = status_name.get(int(result.status[j]), "unfinished")
        if status == "failed" and rec["exit"]:
            status = rec["exit"]["status"]
        out.append({
            "job_id": spec.job_id, "workload": spec.name, "spec": spec.workload, "gpus": int(result.gpus[j]),
            "arrival": float(result.arrival[j]), "start": _num(result.start[j]), "finish": _num(result.finish[j]),
            "jct": _num(jct[j]), "realized_slowdown": _num(result.realized_slowdown[j]),
            "work_s": round(float(result.duration[j]), 3), "status": status, "restarts": int(result.restarts[j]),
            "shared": bool(result.shared[j]),
            **{k: v for k, v in rec.items() if k != "workload"},
        })
        if bounded:  # the contract: its type in the tables and its bound (bound_max None: none)
            b = inputs.bounds[j]
            out[-1].update({"kind": inputs.job_kinds()[j], "bound": str(b),
                            "bound_max": b.max_slowdown if b.bounded else None})
    return out


def _run_json(run: PolicyRun, inputs: RunInputs, config: PhysicalConfig) -> dict:
    lay = inputs.layout
    return {
        "policy": run.name, "trace": config.trace, "complete": run.complete, "created_at": utc_now(),
        "device": {"kind": lay.device, "mode": lay.mode, "slots": lay.n_slots, "device_name": lay.device_name,
                   "knowledge": inputs.device},
        "view": inputs.view_name, "metrics": _rounded(run.result.metrics), "wall_s": round(run.wall_s, 1),
        "policy_calls": run.result.policy_calls, "observed_pairs": run.observed_pairs, "jobs": run.jobs,
        "failures": run.failures(), "notes": inputs.notes + run.notes, "result": run.result.to_json(),
    }


def _observed_row(spec_a: JobSpec, spec_b: JobSpec, values: dict, lay: Layout, policy: str) -> dict:
    """A pairs-table row of a pair observed in a run that passed the confidence rule (``source`` = ``observed``;
    slowdowns pooled over its pairings, ``trials``, ``cv_*`` and ``ci_*`` over their windows)."""
    measured = {k: values[k] for k in ("solo_a", "solo_b", "coloc_a", "coloc_b", "slowdown_a", "slowdown_b", "cv_a",
                                       "cv_b", "ci_a", "ci_b", "window_s")}
    if math.isfinite(values.get("split_a", math.nan)):  # measured under the knob: a row at that split
        measured["split_a"] = float(values["split_a"])
    return pair_row(spec_a.name, spec_b.name, device_kind=lay.device, device_name=lay.device_name, mode=lay.mode,
                    size=spec_a.size, isolation=f"run:{policy}", source=OBSERVED, trials=int(values["trials"]),
                    steps_a=int(values["steps_a"]), steps_b=int(values["steps_b"]), **measured)


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
        try:
            return _run_all(config, inputs, progress, launcher, exporter)
        finally:
            if inputs.knob is not None:
                inputs.knob.close()  # the cgroups the splits made


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
        # The policies' unit of work, measured once the calibration ran; every policy of this call starts from the
        # same lengths (what the sitting knew before the runs).
        times = step_times(inputs, sitting)
        lengths = job_lengths(inputs, sitting, config, times[0])
        for name in config.policies:
            kept = _load_run(out / name / "run.json", inputs)
            if kept is not None:
                runs[name] = kept
                if progress is not None:
                    progress("kept", policy=name)
                continue
            if progress is not None:
                progress("policy", policy=name, total=len(inputs.specs))
            runs[name] = run_policy(name, inputs, config, out, sitting, times, lengths, progress, launcher or launch,
                                    env, exporter)
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
                                           _learned_steps(runs, lengths), times)
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


def _load_run(path: Path, inputs: RunInputs) -> PolicyRun | None:
    """A run a previous call finished, read back from its ``run.json`` (its result as the run left it); None where
    none finished (or one of a version that kept no result, which runs again)."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    if not data.get("complete") or "result" not in data:
        return None
    notes = [n for n in data.get("notes", []) if n not in inputs.notes]
    return PolicyRun(data["policy"], RunResult.from_json(data["result"]), data["jobs"], True, data.get("wall_s", 0.0),
                     data.get("observed_pairs", 0), notes)


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
    return {k: (round(v, JSON_DECIMALS) if isinstance(v, float) and math.isfinite(v) else v)
            for k, v in metrics.items()}


def _num(x: float) -> float | None:
    return round(float(x), 3) if math.isfinite(x) else None
