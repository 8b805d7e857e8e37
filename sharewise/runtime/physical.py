"""One policy's physical run over a trace, the runtime's one entry, as ``engine.simulator.simulate`` is the simulator's.

``run_trace`` builds the real world (``world.RealWorld``) and the scheduling loop over it, resumes the run a stop
left in its folder (``state.json``: the loop's and the world's state, saved after every event), runs it, and
returns a ``PhysicalRun``: the loop's ``RunResult`` (each job's times, status, restarts and GPUs, and the
metrics over the jobs that finished, each job's realized slowdown counted from its first step:
``stepping_slowdown``) and what the world recorded of each job. The application layer (``sharewise.app.run``)
hands in what it read and measured (the trace, the jobs, the policies' table, the step times, the lengths) and
turns the ``PhysicalRun`` into ``run.json`` and the command's output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sharewise.command_spec import is_command_spec
from sharewise.datasets.store import utc_now, write_json_atomic
from sharewise.engine.cluster import Cluster
from sharewise.engine.loop import SchedulingLoop
from sharewise.engine.policy_types import Policy
from sharewise.engine.result import RunResult
from sharewise.engine.table import SlowdownTable
from sharewise.engine.world import DONE, FAILED
from sharewise.policy import warm_up
from sharewise.runtime.jobs import JobSpec
from sharewise.runtime.lengths import Length
from sharewise.runtime.sitting import Sitting
from sharewise.runtime.slots import Layout
from sharewise.runtime.world import POLL_S, RealWorld

if TYPE_CHECKING:
    from sharewise.datasets.traces import Trace
    from sharewise.runtime.metrics import RunExporter

#: The run's state in its folder, saved after every event; a stopped run resumes from it.
STATE = "state.json"


@dataclass
class PhysicalRun:
    """What one policy's physical run gives: the loop's result and the world's record of each job.

    ``jobs`` holds per job what ``RealWorld.job_json`` records (workload, steps, events, start-ups, exit,
    length); ``observed_pairs`` how many pairs the policies learned from the run's measurements; ``notes`` one
    line per job that ran on an estimated length or ended before the length the trace gave; ``wall_s`` the
    seconds the run took (its policy's compiled kernels loaded before).
    """

    result: RunResult
    jobs: list[dict]
    observed_pairs: int
    notes: list[str]
    wall_s: float


def run_trace(
    trace: Trace,
    specs: list[JobSpec],
    policy: Policy,
    table: SlowdownTable,
    *,
    layout: Layout,
    step_s: np.ndarray,
    startup_s: np.ndarray,
    lengths: list[Length],
    folder: Path,
    sitting: Sitting,
    sitting_path: Path | None = None,
    name: str = "policy",
    slo: float = 2.0,
    observe: bool = True,
    round_s: float | None = None,
    poll_s: float = POLL_S,
    launcher=None,
    env: dict[str, str] | None = None,
    on_pair=None,
    progress: Callable | None = None,
    metrics: RunExporter | None = None,
    kinds: list[str] | None = None,
    bounds: list[float] | None = None,
    split: np.ndarray | None = None,
    knob=None,
) -> PhysicalRun:
    """Run ``trace``'s jobs for real on ``layout``'s slots under ``policy``; resume ``folder/state.json`` if a stop
    left one.

    Parameters
    ----------
    trace, specs
        The jobs (arrivals, GPUs, trace lines) and what each one runs (``JobSpec``, in trace order).
    policy, table
        The policy and its table (its knowledge of interference; the run's measurements are learned into it).
    layout
        The slots.
    step_s, startup_s
        Per job, its solo seconds per step and its start-up seconds (the policies' unit of work).
    lengths
        Per job, its length as the policies first see it (copied: every policy of a call starts from the same).
    folder
        The run's folder: its state and its jobs' progress files and logs.
    sitting, sitting_path
        Pooled measurements of the sitting (read and added to), saved to ``sitting_path`` with the state.
    name, slo, observe, round_s
        As ``simulate`` takes them.
    poll_s, launcher, env
        How often the jobs are polled, how they are started (default: local processes), and what their
        environment adds (a sharing mode's).
    on_pair
        ``RealWorld``'s: called with each pair measured when its pairing ends.
    progress
        Called ``progress("event", policy=..., done=..., total=..., running=..., now=...)`` after every event.
    metrics
        A ``runtime.metrics.RunExporter`` fed after every event.
    kinds, bounds, split, knob
        The slowdown contract (``RealWorld``'s): each job's type in ``table`` (default: its workload) and bound,
        each pair of types' split, and the knob that enforces it (None: no split).

    Returns
    -------
    PhysicalRun
        ``result.metrics`` holds ``simulate``'s metrics over the jobs that finished, and ``finished``,
        ``failed`` and ``shared_jobs``, e.g. ``{"avg_jct": 41.2, ..., "finished": 3, "failed": 1, "shared_jobs": 2}``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    state_path = folder / STATE

    def save(now: float) -> None:
        loop.catch_up(now)
        write_json_atomic(state_path, {"loop": loop.snapshot(), "world": world.snapshot(), "saved_at": utc_now()})
        if sitting_path is not None:
            write_json_atomic(sitting_path, sitting.to_json())
        if metrics is not None:
            from sharewise.runtime.metrics import policy_view

            metrics.update(policy_view(name, loop, world, world.clock()))
        if progress is not None:
            progress("event", policy=name, done=int(np.isin(loop.jobs.status, (DONE, FAILED)).sum()),
                     total=len(specs), running=len(world.live), now=loop.last)

    kinds = kinds or [s.name for s in specs]
    world = RealWorld(specs, step_s, startup_s, layout, folder, sitting, on_pair=on_pair, launcher=launcher,
                      extra_env=env, poll_s=poll_s, on_event=save, lengths=[replace(n) for n in lengths], kinds=kinds,
                      bounds=bounds, split=split, knob=knob)
    loop = SchedulingLoop(
        arrival=np.asarray(trace.arrival, dtype=float), work=np.array([world.work(j) for j in range(len(specs))]),
        gpus=np.asarray(trace.gpus, dtype=np.int64), workload=table.ids(kinds), line=trace.line,
        policy=policy, table=table, world=world, cluster=Cluster(n_gpus=layout.n_slots, gpus_per_node=layout.n_slots),
        slo=slo, name=name, observe=observe, round_s=round_s, job_id=trace.job_id,
    )
    if state_path.is_file():
        saved = json.loads(state_path.read_text())
        loop.restore(saved["loop"])
        world.restore(saved["world"])
    # Compiled kernels load (or compile, on a first install) here, before the clock starts.
    warm_up(policy, layout.n_slots, table)
    began = time.perf_counter()
    world.begin(loop.last)
    try:
        result = loop.run()
    finally:
        world.shutdown()
        save(world.clock())
    wall_s = time.perf_counter() - began
    done = result.done()
    for j, rec in enumerate(world.jobs):  # a command that ran to its own end: the next call's estimate
        if done[j] and is_command_spec(rec.spec.workload) and (rec.spec.steps is None or rec.steps < rec.spec.steps):
            sitting.lengths[rec.spec.workload] = rec.steps
    if sitting_path is not None:
        write_json_atomic(sitting_path, sitting.to_json())
    last_step = np.array([rec.last_step_t for rec in world.jobs], dtype=float)
    result.realized_slowdown = stepping_slowdown(
        result.start, np.where(np.isfinite(result.finish), last_step, np.nan),
        np.array([rec.startups[0] if rec.startups else 0.0 for rec in world.jobs]),
        np.array([rec.step_s for rec in world.jobs]), np.array([rec.length.steps for rec in world.jobs]))
    result.metrics = {**result.compute_metrics(), "finished": int(done.sum()),
                      "failed": int((result.status == FAILED).sum()), "shared_jobs": int(result.shared.sum())}
    notes = [n for rec in world.jobs if (n := rec.length.note(rec.spec.job_id, rec.spec.name)) is not None]
    return PhysicalRun(result, [world.job_json(j) for j in range(len(specs))], len(loop.learned), notes, wall_s)


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
