"""The inputs of ``sharewise run``, checked before any job starts, and the calibration that measures each
workload's step and start-up time in the sitting (the layers below ``run_compare`` and ``run``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.app import splits
from sharewise.app.simulate import (
    SimulationConfig,
    check_run_options,
    model_grid,
    policies_tables,
    split_candidates,
)
from sharewise.datasets.store import open_dataset, write_json_atomic
from sharewise.datasets.traces import AUTO, Trace, TraceContext, load_trace
from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, DatasetError, TraceError
from sharewise.policy import get_policy
from sharewise.runtime.jobs import DONE_STATUS, JobSpec, LocalJob
from sharewise.runtime.lengths import DEFAULT_LENGTH_S, Length, argv_total, estimate
from sharewise.runtime.sitting import Sitting
from sharewise.runtime.slots import Layout
from sharewise.runtime.slots import layout as make_layout

DEFAULT_POLICIES = ("exclusive-sjf", "sharewise")
#: Seconds each workload runs alone in the calibration (start-up not counted).
CALIBRATE_S = 6.0


@dataclass(frozen=True)
class PhysicalConfig:
    """Everything one ``sharewise run`` needs, handed over whole (the options of the command).

    ``data`` holds the measured pairs (and solo profiles) the policies know; ``device``/``slots``/``mode``
    the devices (``slots``: equal CPU core sets, default one holding every core); ``oracle``, ``predictions``
    and ``model`` choose the policies' table as in ``simulate`` (default: out-of-fold predictions with
    calibrated intervals, plus what the run observes); ``calibrate_s`` the seconds of each workload's solo
    calibration (0: none, the dataset's throughputs are the unit of work); ``compare_sim`` simulates the
    same runs for the comparison; ``default_length_s`` the solo seconds assumed for a training command whose
    length nothing states (``runtime.lengths``); ``metrics_port`` (None: off) and ``metrics_host`` where the
    run serves its live Prometheus metrics (``runtime.metrics``); ``split`` and ``bounds`` the slowdown
    contract as ``simulate`` takes it (``app.splits``): each pair of job types runs at its chosen split, the
    sharing mode's knob (``profiler.knob``: a CPU quota, an MPS thread percentage) enforcing it.
    """

    trace: str
    out: str
    data: str = "reference"
    policies: tuple[str, ...] = DEFAULT_POLICIES
    device: str = "cpu"
    slots: int | None = None
    mode: str | None = None
    device_name: str | None = None
    trace_format: str = AUTO
    size: str = "small"
    max_slowdown: float = 2.0
    round_s: float | None = None
    oracle: bool = False
    predictions: str | None = None
    model: str | None = None
    group_by: str = "family"
    observe: bool = True
    calibrate_s: float = CALIBRATE_S
    compare_sim: bool = False
    executor: str = "local"
    address: str | None = None
    poll_s: float = 0.05
    default_length_s: float = DEFAULT_LENGTH_S
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    split: str = "auto"
    bounds: str = "enforce"

    def __post_init__(self) -> None:
        if not self.policies:
            raise ConfigError("give at least one policy (--policy NAME)")
        if len(set(self.policies)) != len(self.policies):
            raise ConfigError(f"a policy is listed twice: {list(self.policies)}")
        check_run_options(self)
        splits.check_options(self)
        if self.calibrate_s < 0 or not math.isfinite(self.calibrate_s):
            raise ConfigError(f"--calibrate must be a number of seconds >= 0, got {self.calibrate_s}")
        if self.executor not in ("local", "ray"):
            raise ConfigError(f"--executor must be 'local' or 'ray', got {self.executor!r}")
        if self.address and self.executor != "ray":
            raise ConfigError("--address is the Ray cluster to run on; add --executor ray")
        if not (self.default_length_s > 0 and math.isfinite(self.default_length_s)):
            raise ConfigError(f"--default-length must be a number of seconds > 0, got {self.default_length_s}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port must be a port 0-65535 (0: any free one), got {self.metrics_port}")


@dataclass
class RunInputs:
    """What every policy's run shares: the jobs, the slots, the policies' table and the dataset's truth.

    Under the slowdown contract (``contract`` not None) ``names`` are the job types, ``table`` and ``truth``
    are over them, ``kinds`` holds each job's type and ``knob`` (checked) enforces each pair's split."""

    trace: Trace
    specs: list[JobSpec]
    layout: Layout
    device: str  # the dataset's device the policies' knowledge comes from
    table: SlowdownTable  # what the policies know of interference, over ``names``
    truth: SlowdownTable  # the dataset's measured pairs over ``names``
    names: list[str]
    throughput: dict[str, float]  # the dataset's solo steps/s per workload on ``device``
    notes: list[str]
    view_name: str
    kinds: list[str] | None = None  # each job's type in the tables (None: its workload)
    bounds: list | None = None  # each job's ``planner.contract.Bound`` where the trace has a bound column
    contract: splits.Contract | None = None
    knob: object | None = None  # the ``profiler.knob.ShareKnob`` enforcing the splits (None: no split)

    def bound_values(self) -> list[float] | None:
        """Each job's bound as a number (inf: none); None where the trace gives none."""
        return None if self.bounds is None else [b.max_slowdown for b in self.bounds]

    def job_kinds(self) -> list[str]:
        """Each job's type in the tables: its workload without a contract."""
        return self.kinds if self.kinds is not None else [s.name for s in self.specs]


# ---- preparing ---------------------------------------------------------------------------------------
def prepare(config: PhysicalConfig) -> RunInputs:
    """Check every input and build what the runs share; raises before any job starts."""
    for name in config.policies:
        get_policy(name)
    lay = make_layout(config.device, config.slots, config.mode)
    ds = open_dataset(config.data, profiles=True, pairs=True)
    profiles, pairs = ds.read_profiles(), ds.read_pairs()
    device, notes = _knowledge_device(config, pairs, lay)
    profiles, pairs, mode_note = one_mode(profiles, pairs, device, lay.mode)
    notes += mode_note
    prof = profiles[profiles["device_name"].astype(str) == device]
    throughput = prof.groupby("workload")["throughput"].median().to_dict()
    trace = load_trace(config.trace, format=config.trace_format, context=TraceContext(throughputs=throughput))
    bounds = splits.job_bounds(trace)  # a bad cell fails here, naming its line
    specs, names = _job_specs(trace, throughput, config)
    if int(trace.gpus.max()) > lay.n_slots:
        i = int(np.argmax(trace.gpus > lay.n_slots))
        raise TraceError(
            f"{trace.source}:{int(trace.line[i])}: job asks for {int(trace.gpus[i])} slots, this run has "
            f"{lay.n_slots}; use more slots (--slots) or a smaller job"
        )
    # The policies only ever ask about pairs of the trace's own workloads: predicting the dataset's others would
    # hold each of them out in turn for nothing, and fail where every measured pair involves one of them (the
    # 2026-12-04 H200 window: 5 pairs, all of resnet18, a trace of lstm_lm and ncf).
    known = names
    # The truth without the knob; rows measured at a split are the truth at that split, under the contract.
    truth, knob_pairs = splits.base_truth(pairs, device_name=device, workloads=known)
    allowed, note = _memory_rule(prof, known, lay)
    notes.append(note)
    truth = truth.restricted(allowed)
    grid = model_grid(config)
    contract_on = splits.wants_contract(config, bounds, knob_pairs, lay.mode, model_grid=bool(grid))
    at = None
    if contract_on and config.split == "auto" and lay.mode in splits.KNOB_MODES:
        at = split_candidates(known, grid or splits.measured_splits(knob_pairs), device)
    table, table_note, view_at = _policies_table(config, profiles, pairs, truth, device, at)
    notes.append(table_note)
    unknown = sorted(set(names) - set(SlowdownTable.from_pairs(pairs, device_name=device).workloads))
    if unknown:
        notes.append(f"workload(s) {unknown} have no measured pairs on {device!r}: they never share until the run "
                     "observes them")
    inputs = RunInputs(trace, specs, lay, device, table, truth, known, throughput, notes,
                       "oracle" if config.oracle else table.source,
                       bounds=bounds if trace.bound is not None else None)
    if contract_on:
        _type_jobs(inputs, config, pairs, knob_pairs, view_at, allowed)
    elif any(b.bounded for b in bounds):
        notes.append(f"--bounds {config.bounds}: {sum(b.bounded for b in bounds)} job(s) carry a bound; the policies "
                     "schedule as without them, and each policy's bounded jobs that exceed their bound are counted")
    return inputs


def _type_jobs(inputs: RunInputs, config: PhysicalConfig, pairs: pd.DataFrame, knob_pairs: pd.DataFrame,
               view_at, allowed: np.ndarray) -> None:
    """Put ``inputs`` under the slowdown contract (``splits.type_jobs``): the tables over the job types, each
    job's type, and the knob that enforces the splits, checked here (a machine where it cannot be written
    fails before anything runs)."""
    from sharewise.profiler.knob import knob_for

    lay, names = inputs.layout, inputs.names
    on_device = pairs[pairs["device_name"].astype(str) == inputs.device]
    fits = splits.not_oom(on_device, names) & allowed
    contract = splits.type_jobs([s.name for s in inputs.specs], inputs.bounds or [splits.Bound()] * len(inputs.specs),
                                None if config.oracle else inputs.table, inputs.truth, view_at,
                                splits.measured_at(knob_pairs, names), config.max_slowdown, fits, lay.mode,
                                config.split)
    typed = contract.typed
    inputs.contract, inputs.kinds = contract, contract.labels
    inputs.truth = typed.truth
    inputs.table = typed.truth if config.oracle else typed.view.aligned(typed.truth.workloads).restricted(
        typed.truth.allowed)
    inputs.names = list(typed.types)
    inputs.notes.extend(contract.notes)
    if contract.split_matrix() is not None:
        knob = knob_for(lay.mode, cores=len(lay.slots[0].cores) if lay.device == "cpu" else None)
        knob.check()
        inputs.knob = knob
        inputs.notes.append(f"each pair of job types that shares at a split runs under it: {knob.what} set per job "
                            f"({lay.mode}), its events in run.json ('split' with its share, 'release')")


def _knowledge_device(config: PhysicalConfig, pairs: pd.DataFrame, lay: Layout) -> tuple[str, list[str]]:
    """The dataset device whose pairs the policies know: ``--device-name``, the run's own, or the only one."""
    devices = sorted(set(pairs["device_name"].astype(str)))
    if config.device_name is not None:
        if config.device_name not in devices:
            raise DatasetError(
                f"dataset {config.data!r} holds no pairs on device {config.device_name!r}; it holds {devices}"
            )
        return config.device_name, []
    if lay.device_name in devices:
        return lay.device_name, []
    if len(devices) == 1:
        return devices[0], [
            f"this run's device is {lay.device_name!r}; the policies know the pairs measured on {devices[0]!r} "
            f"(the only device of {config.data!r}); measure this device's own with 'sharewise pairs"
            + (f" --slots {lay.n_slots}'" if lay.device == "cpu" and lay.n_slots > 1 else "'")
        ]
    if not devices:
        raise DatasetError(f"dataset {config.data!r} holds no measured pairs; measure some with 'sharewise pairs'")
    raise ConfigError(
        f"dataset {config.data!r} holds pairs of several devices {devices} and none is this run's "
        f"({lay.device_name!r}); choose one with --device-name"
    )


def one_mode(profiles: pd.DataFrame, pairs: pd.DataFrame, device: str, mode: str):
    """The rows a run in sharing ``mode`` knows of ``device``: that mode's alone where the device was measured in
    several (a GPU's ``timeslice`` and ``mps`` pairs are two truths, never one); rows of other devices stay.
    Returns ``(profiles, pairs, notes)``; a ``ConfigError`` where the device's pairs hold several modes and none
    is ``mode``.

    Example: pairs on ``NVIDIA H200`` in ``timeslice`` and ``mps``, a run in ``mps``: the ``mps`` rows, no note.
    """
    on_device = pairs["device_name"].astype(str) == device
    modes = sorted(set(pairs.loc[on_device, "mode"].astype(str)))
    if not modes or modes == [mode]:
        return profiles, pairs, []
    if mode not in modes:
        if len(modes) > 1:
            raise ConfigError(
                f"the pairs on {device!r} were measured in modes {modes} and this run shares in {mode!r}; run "
                f"with --mode {modes[0]} (or another of them), or measure the pairs in {mode!r}"
            )
        return profiles, pairs, [f"the pairs on {device!r} were measured in mode {modes}, this run shares in {mode!r}"]
    pairs = pairs[~on_device | (pairs["mode"].astype(str) == mode)]
    prof_here = profiles["device_name"].astype(str) == device
    if (profiles.loc[prof_here, "mode"].astype(str) == mode).any():
        profiles = profiles[~prof_here | (profiles["mode"].astype(str) == mode)]
    note = f"the pairs on {device!r} were measured in modes {modes}: this run knows its own, {mode!r}"
    return profiles, pairs, [note]


def _job_specs(trace: Trace, throughput: dict[str, float], config: PhysicalConfig) -> tuple[list[JobSpec], list[str]]:
    """One ``JobSpec`` per job; workload specs are resolved (an unknown one fails here, before anything runs), and
    one name must name one workload (two commands given the same ``NAME`` fail here, naming both lines)."""
    from sharewise.profiler.workloads import workload_name

    given = trace.workload if trace.spec is None else trace.spec  # a command's spec; its name is the workload
    recorded: dict[str, str] = {}
    first: dict[str, tuple[int, object]] = {}  # name -> (job index, the workload it names) of its first job
    for i, spec in enumerate(given.tolist()):
        if spec not in recorded:
            recorded[spec] = workload_name(spec)
        name, what = recorded[spec], _what(spec)
        seen = first.setdefault(name, (i, what))
        if seen[1] != what:
            k = seen[0]
            raise TraceError(
                f"{trace.source}:{int(trace.line[k])} and line {int(trace.line[i])}: two different workloads are both "
                f"named {name!r} ({str(given[k])!r} and {spec!r}); a name is one workload (one calibration, one "
                "set of pairs): give each command its own NAME=cmd:..."
            )
    specs = []
    for i in range(len(trace)):
        spec = str(given[i])
        name = recorded[spec]
        if trace.steps is not None:
            steps = int(trace.steps[i]) if np.isfinite(trace.steps[i]) else None
        elif not np.isfinite(trace.duration[i]):
            steps = None  # a command that leaves its length out (the trace reader allows no other job to)
        else:
            rate = throughput.get(name, math.nan)
            if not (rate > 0):
                raise TraceError(
                    f"{trace.source}:{int(trace.line[i])}: job {trace.job_id[i]!r} is given in seconds, and "
                    f"dataset {config.data!r} holds no solo profile of {name!r} on this device to turn them into "
                    "steps; give the job's 'steps' instead, or profile the workload"
                )
            steps = max(1, round(float(trace.duration[i]) * rate))
        specs.append(JobSpec(str(trace.job_id[i]), spec, name, steps, config.size))
    return specs, sorted(set(recorded.values()))


def _what(spec: str) -> object:
    """What a spec runs, for telling two workloads apart: a command's parse (its text's spacing aside), else
    the spec itself."""
    from sharewise.command_spec import is_command_spec, parse_command

    if is_command_spec(spec):
        c = parse_command(spec)
        return (c.argv, c.cwd, c.env, c.batch_size, c.progress_regex)
    return spec.strip()


def job_lengths(inputs: RunInputs, sitting: Sitting, config: PhysicalConfig, step_s: np.ndarray) -> list[Length]:
    """Each job's length as the policies first see it (``runtime.lengths``): the trace's; a command's own
    ``--total-steps``; else an estimate: the steps the same command ran to its end in an earlier run in this
    run folder (``sitting.lengths``), else ``config.default_length_s`` at the job's solo step time."""
    from sharewise.command_spec import is_command_spec, parse_command

    out = []
    for spec, s in zip(inputs.specs, step_s, strict=True):
        total = argv_total(parse_command(spec.workload).argv) if is_command_spec(spec.workload) else None
        if spec.steps is not None:
            out.append(Length(float(spec.steps), True, "the trace"))
        elif total is not None:
            out.append(Length(float(total), True, "its --total-steps argument"))
        else:
            steps, source = estimate(sitting.lengths.get(spec.workload), float(s), config.default_length_s)
            out.append(Length(steps, False, source, estimated=True))
    return out


def _memory_rule(prof: pd.DataFrame, names: list[str], lay: Layout) -> tuple[np.ndarray, str]:
    """``recommend``'s rule (``deploy.plan.sharing_allowed``): two jobs share a slot only where their memory limits
    fit its memory together; a workload without a known peak, or a slot of unknown memory, holds no pair back
    (its measured status still does)."""
    from sharewise.deploy.plan import sharing_allowed, workload_resources

    allowed, _ = sharing_allowed(workload_resources(prof, names), names, lay.memory_bytes, strict=False)
    blocked = int(np.triu(~allowed).sum())
    memory = f"{lay.memory_bytes / 2**30:.1f} GiB" if math.isfinite(lay.memory_bytes) else "unknown"
    return allowed, (f"memory rule (recommend's limits) against {memory} per slot: {blocked} workload pair(s) "
                     "may not share")


def _policies_table(config: PhysicalConfig, profiles, pairs, truth: SlowdownTable, device: str,
                    at_splits: pd.DataFrame | None = None):
    """The policies' table, as ``simulate`` makes it (the same options and default), and their slowdowns at the
    splits of ``at_splits`` (``simulate.policies_tables``). Returns ``(table, note, view_at)``."""
    sim = SimulationConfig(trace=config.trace, data=config.data, oracle=config.oracle,
                           predictions=config.predictions, model=config.model, group_by=config.group_by,
                           max_slowdown=config.max_slowdown)
    table, note, view_at = policies_tables(sim, profiles, pairs, truth, device, at_splits=at_splits)
    if table is None:
        return truth, note, None
    return table.aligned(truth.workloads).restricted(truth.allowed), note, view_at


# ---- calibrating -------------------------------------------------------------------------------------
def calibrate(inputs: RunInputs, config: PhysicalConfig, out: Path, sitting: Sitting, progress=None,
              env: dict[str, str] | None = None) -> None:
    """Run each workload of the trace alone on slot 0 for ``calibrate_s`` seconds after its first step: its
    solo steps/s and start-up time in this sitting go to ``sitting``. Workloads calibrated before (a resumed
    run) are skipped."""
    work = out / "calibration"
    work.mkdir(parents=True, exist_ok=True)
    seen: dict[str, JobSpec] = {}
    for spec in inputs.specs:
        seen.setdefault(spec.name, spec)
    for name, spec in seen.items():
        if name in sitting.calibrated:
            continue
        if progress is not None:
            progress("calibrate", name=name)
        job = LocalJob(JobSpec(f"calibrate-{name}", spec.workload, name, 10**9, spec.size), inputs.layout, [0], 0,
                       work / f"{safe_name(name)}.progress", work / f"{safe_name(name)}.log", env)
        limit = max(120.0, 20 * config.calibrate_s)
        records: list[tuple[int, float]] = []
        ended, noticed = None, math.nan
        try:
            deadline = time.time() + limit
            while time.time() < deadline:
                records += job.poll()
                if records and records[-1][1] - records[0][1] >= config.calibrate_s:
                    break
                ended = job.exit()
                if ended is not None:
                    noticed = time.time()
                    records += job.poll()
                    break
                time.sleep(0.05)
        finally:
            job.kill()
        done = ended is not None and ended.status == DONE_STATUS
        if done:  # a command that ended by itself: the steps it ran are its length
            sitting.lengths[spec.workload] = job.steps
        failed = ended if ended is not None and not done else None
        cal = {"startup_s": records[0][1] - job.spawned_at} if records else {}
        if len(records) >= 2 and records[-1][1] > records[0][1]:
            cal["steps_per_s"] = (records[-1][0] - records[0][0]) / (records[-1][1] - records[0][1])
        elif inputs.throughput.get(name, 0) > 0:
            cal["steps_per_s"] = inputs.throughput[name]
        else:
            why = (f"it failed: {failed.message}" if failed is not None else
                   f"it ended by itself after {job.steps} step(s), too few to time" if done else
                   f"it reported no steps within {limit:.0f} s")
            raise ConfigError(f"workload {spec.workload!r}: its calibration run cannot tell its step time ({why}), "
                              "and the dataset holds no solo profile of it")
        if failed is not None:
            cal["failed"] = failed.message
        sitting.calibrated[name] = cal
        if "startup_s" in cal:
            sitting.startup[name].append(cal["startup_s"])
        if failed is None and len(records) >= 2:
            sitting.add_solo(name, records[-1][0] - records[0][0], records[-1][1] - records[0][1])
        if done and records:  # from its last step to its exit noticed, as a run notices a job's end
            sitting.teardown[name].append(max(0.0, noticed - records[-1][1]))
        write_json_atomic(out / "sitting.json", sitting.to_json())


# ---- the policies' unit of work ----------------------------------------------------------------------
def step_times(inputs: RunInputs, sitting: Sitting) -> tuple[np.ndarray, np.ndarray]:
    """Each job's solo seconds per step and start-up seconds (before its first step), as the policies know
    them: the sitting's calibration, else the dataset's solo throughput and no start-up."""
    steps, startups = [], []
    for spec in inputs.specs:
        cal = sitting.calibrated.get(spec.name)
        rate = cal["steps_per_s"] if cal else inputs.throughput.get(spec.name, math.nan)
        if not (rate > 0):
            raise DatasetError(
                f"no solo step time for workload {spec.name!r}: dataset holds no profile of it on "
                f"{inputs.device!r} and no calibration ran; run with --calibrate SECONDS"
            )
        steps.append(1.0 / rate)
        startups.append(max(0.0, cal["startup_s"] - 1.0 / rate) if cal and "startup_s" in cal else 0.0)
    return np.array(steps), np.array(startups)



def safe_name(name: str) -> str:
    """``name`` as a file name (job ids and workload specs may hold slashes and spaces)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
