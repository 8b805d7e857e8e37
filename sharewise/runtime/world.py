"""The real world behind the scheduling loop: jobs run as processes on device slots, time is the wall clock,
progress is what the jobs report, and pairs that share a slot are measured while they run.

Semantics where reality forces a choice (the loop's own are in ``sharewise.engine.loop``):

- **Time.** Seconds since the run began (wall clock). The loop's next event (an arrival, a wake-up a policy
  asked for, a round) is waited for; meanwhile the jobs are polled every ``poll_s`` and a job's end, or a new
  measurement, is an event at the moment it is noticed.
- **Work.** A job's work for the policies is its start-up, then its steps at its solo step time on this device
  (``step_s``, measured in the same sitting where a calibration ran). What is left of it is its remaining steps
  at that step time, plus what is left of its start-up while it has not stepped since its process started; the
  world reports the work done as what is left shrinks (``progress``), and a move's or a restart's start-up as
  the cost of that start (``started``). The loop keeps the account (remaining work, attained service) from these
  reports, as it does in a simulation.
- **Start, pause, resume, move.** A first start spawns the job on its slots. A preempted job is paused
  (SIGSTOP): its process and memory stay where they are. Placed again on the same slots, it resumes
  (SIGCONT) where it was; placed elsewhere, its paused process is killed and it starts again there from its
  step count: that restart (process start, build, first step) is the move's real cost, timed and reported.
- **Length.** A job's length is its ``lengths`` entry (``runtime.lengths``): the trace's, a command's own
  total, or an estimate, which is replaced by the real length as soon as it is known (the command's total
  in its output, or its end) and reported to the loop (``lengths``).
- **End.** A job is done when its process exits 0 (a script ends its own training: the steps it ran are its
  length); a process that dies, runs out of memory or exits non-zero ends the job as failed, with the reason
  its evidence gives (``runtime.exits``); the run goes on. The job's end is the time it was noticed (at most
  ``poll_s`` after the last step).
- **Measurement.** A job's *segment* is a stretch of time in which nothing changes for it (same slots, same
  partners, not paused); its rate in a segment is ``(k - 1) / (t_k - t_1)`` over the step reports ``1..k``
  inside it, so a step cut by the segment's start (a build, a partial step before a pause) is not counted.
  Two jobs alone together on a slot form a *pairing*, measured from the moment both are stepping: once each
  has ``min_steps`` reports over at least ``min_s`` seconds, each one's slowdown (its solo rate over its rate
  in the pairing) is measured; when the pairing ends, the whole pairing is measured and pooled with earlier
  pairings of the same two workloads (weighted by time). What the policies learn and the run's dataset
  keeps passes ``collect``'s confidence rule first (``profiler.confidence``): each job's steps in the pairing
  are cut into windows of at least ``WINDOW_STEPS`` steps and ``WINDOW_S`` seconds, and the pair's windows
  over all its pairings must number ``REPEATS`` and pin each slowdown (its solo rate over its rate in a
  window) down to a 95% half-width within ``CI_TARGET``. A pairing that passes while it runs gives the
  policies its slowdowns then (``Observation``); one that ends with its pair passing is written as an
  observed pair row and given to the policies again; one that does not is reported with the reason
  (``on_pair``'s ``refused``) and never learned. A job's solo rate is that of its
  own solo segments in this run where they span ``min_s``, else that of its workload in this sitting
  (calibration and other jobs' solo segments). A job sharing with jobs of several workloads at once (a
  multi-slot job) is not measured in that segment.
- **Split.** Under the slowdown contract (``planner.contract``) a pair of job types shares a slot at the split
  chosen for it (``split``, over the table's types). Whenever a job's situation changes (``rate_changed``), a job
  that holds one slot alone with exactly one partner, also on one slot, runs under its share of the pair's split:
  a live knob (a CPU quota, ``profiler.knob.CpuQuota``) is set on its process then, and lifted the moment it no
  longer has that one partner (its partner left, it was paused, moved or ended); a knob read at start (MPS's
  thread percentage) is set in the environment of a job that starts next to its partner, and a running process
  keeps what it started with. Each change is an event of the job (``split`` with its share and partner,
  ``release``). A job's *kind* is its type in the tables (its workload, with its bound where it has one): pairs
  are pooled, measured and learned by kind, since a kind pair runs at one split.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sharewise.engine.world import DONE, FAILED, RUNNING, Jobs, Observation
from sharewise.profiler.confidence import WINDOW_S, WINDOW_STEPS, judge
from sharewise.profiler.pair import ci_halfwidth, cv
from sharewise.runtime.jobs import DONE_STATUS, JobSpec, LocalJob
from sharewise.runtime.lengths import Length
from sharewise.runtime.sitting import MIN_S, MIN_STEPS, Sitting
from sharewise.runtime.slots import Layout

#: Seconds between two polls of the jobs' progress.
POLL_S = 0.05
#: Seconds between two saves of the run's state while no event happens.
SAVE_EVERY_S = 2.0
#: Seconds between two checks of an open pairing against the confidence rule (its windows are cut afresh).
CHECK_EVERY_S = 1.0


@dataclass
class Segment:
    """A stretch in which nothing changes for one job: since ``begin`` (run clock), next to ``partners``."""

    begin: float
    partners: frozenset[int]
    records: list[tuple[int, float]] = field(default_factory=list)  # (step, run clock)
    pairing: Pairing | None = None

    def rate(self, since: float = -math.inf) -> tuple[float, int, float]:
        """``(steps per second, steps, seconds)`` over the reports at or after ``since``; NaN when too few."""
        recs = [r for r in self.records if r[1] >= since] if since > -math.inf else self.records
        if len(recs) < 2:
            return math.nan, 0, 0.0
        steps = recs[-1][0] - recs[0][0]
        span = recs[-1][1] - recs[0][1]
        return (steps / span if span > 0 else math.nan), steps, span


@dataclass
class Pairing:
    """Two jobs alone together on a slot, from ``begin`` until one of them leaves."""

    a: int
    b: int
    begin: float
    segments: dict[int, Segment] = field(default_factory=dict)  # each job's segment in the pairing
    closed: set[int] = field(default_factory=set)  # jobs whose segment ended
    early: bool = False  # its first measurement went to the policies
    checked: float = -math.inf  # when the confidence rule last judged it while open
    shares: dict[int, float] = field(default_factory=dict)  # each job's share under the knob in it (NaN: none)

    def split_a(self) -> float:
        """Job ``a``'s percent of the split the pairing ran at (NaN where it ran without one)."""
        share_a, share_b = self.shares.get(self.a, math.nan), self.shares.get(self.b, math.nan)
        if math.isfinite(share_a) and math.isfinite(share_b) and abs(share_a + share_b - 1.0) < 1e-6:
            return float(round(share_a * 100))
        return math.nan

    def stepping_since(self) -> float:
        """When both jobs had reported a step in the pairing (inf before)."""
        firsts = [s.records[0][1] if s.records else math.inf for s in self.segments.values()]
        return max(firsts) if len(firsts) == 2 else math.inf


@dataclass
class JobRecord:
    """A job's life in this run: its process, progress, segments, and the events written to ``run.json``."""

    spec: JobSpec
    step_s: float  # solo seconds per step: the policies' unit of work
    startup_s: float = 0.0  # expected seconds from a start to the first step's beginning
    length: Length | None = None  # its length in steps as the policies see it (``runtime.lengths``)
    steps: int = 0
    proc: LocalJob | None = None
    slots: list[int] = field(default_factory=list)
    segment: Segment | None = None
    last_step_t: float = math.nan
    solo_steps: int = 0
    solo_s: float = 0.0
    events: list[dict] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)
    told: float = math.nan  # the work left the loop was last told of (its remaining, from the reports)
    work_told: float = math.nan  # the work the loop was last told the job has (its length learned)
    spawned_at: float = math.nan  # while the job has not reported a step since its process started
    spawn_alone: bool = True  # its process started on slots no other job held
    exit: dict | None = None
    kind: str = ""  # its type in the tables (``planner.contract.type_label``): its workload, and its bound if any
    bound: float = math.inf  # the slowdown it was promised (inf: none)
    share: float = math.nan  # its share of its slot under the knob while it runs at a split (NaN: unlimited)


class RealWorld:
    """Runs the loop's jobs for real on ``layout``'s slots (see the module docstring).

    Parameters
    ----------
    specs
        One ``JobSpec`` per job of the trace, in trace order.
    step_s
        Per job, its solo seconds per step on this device (the policies' unit of work).
    startup_s
        Per job, the seconds its start takes before its first step (process, import, build): part of its work.
    layout
        The slots.
    workdir
        Where the jobs' progress files and logs go (``<workdir>/jobs``).
    sitting
        Pooled measurements of this sitting (read for solo rates, added to as this run measures).
    on_pair
        Called with ``(spec_a, spec_b, values)`` when a pairing ends measured: ``values`` holds the pooled
        slowdowns, the windows' spread (``trials``, ``cv_*``, ``ci_*``) and ``refused``: empty where the pair
        passes the confidence rule (a row for the run's dataset), else why not (``too noisy: ...``).
    launcher
        ``(spec, slots, start_step, progress_path, log_path) -> job`` (default: a ``LocalJob`` on this
        machine; ``ray_jobs`` gives one that runs in a Ray actor).
    lengths
        Per job, its ``Length`` (default: ``spec.steps``, as the trace gave it).
    kinds, bounds
        Per job, its type in the tables (default: its workload) and its bound (default: none).
    split, knob
        The contract's split of each pair of types (``planner.contract.TypedTables.split``: the row type's percent,
        NaN for none; indexed by the loop's workload ids) and the sharing mode's knob that enforces it
        (``profiler.knob.ShareKnob``); None: no job runs under a split.
    """

    def __init__(
        self,
        specs: list[JobSpec],
        step_s: np.ndarray,
        startup_s: np.ndarray,
        layout: Layout,
        workdir: Path,
        sitting: Sitting,
        on_pair=None,
        launcher=None,
        extra_env: dict[str, str] | None = None,
        poll_s: float = POLL_S,
        min_steps: int = MIN_STEPS,
        min_s: float = MIN_S,
        on_event=None,
        lengths: list[Length] | None = None,
        kinds: list[str] | None = None,
        bounds: list[float] | None = None,
        split: np.ndarray | None = None,
        knob=None,
    ) -> None:
        lengths = lengths or [Length(float(spec.steps), True, "the trace") for spec in specs]
        kinds = kinds or [spec.name for spec in specs]
        bounds = bounds or [math.inf] * len(specs)
        self.jobs = [JobRecord(spec, float(s), float(u), n, kind=k, bound=float(b))
                     for spec, s, u, n, k, b in zip(specs, step_s, startup_s, lengths, kinds, bounds, strict=True)]
        self.split = split if split is not None and knob is not None and np.isfinite(split).any() else None
        self.knob = knob
        for j, rec in enumerate(self.jobs):
            rec.told = rec.work_told = self.work(j)
        self.layout = layout
        self.dir = Path(workdir) / "jobs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sitting = sitting
        self.on_pair = on_pair
        self.extra_env = extra_env or {}
        self.launcher = launcher or self._local
        self.poll_s = poll_s
        self.min_steps = min_steps
        self.min_s = min_s
        self.t0 = time.time()
        self._last = 0.0  # the time advance() returned last: the run's clock never goes back
        self._news: list[Observation] = []
        self._ended: list[tuple[int, int]] = []
        self._lengths: dict[int, float] = {}  # new lengths (work seconds) not yet reported to the loop
        self.live: set[int] = set()  # jobs with a process
        self.pairings: dict[frozenset[int], Pairing] = {}  # open pairings by their two jobs
        # Called with the run clock after every event the loop processed, and every few seconds (saves state).
        self.on_event = on_event
        self._saved = time.monotonic()

    def begin(self, at: float = 0.0) -> None:
        """Start the run's clock at ``at`` seconds (a resumed run goes on from where its loop stopped)."""
        self.t0 = time.time() - at
        self._last = at

    # ---- saving and resuming ---------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """What this world keeps of its jobs between two events, as JSON values (``restore`` takes it back).

        Example: ``{"jobs": [{"steps": 120, "events": [...], "startups": [2.1], "solo_steps": 40, "solo_s": 1.3,
        "exit": None, "last_step_t": 88.2}, ...]}``.
        """
        return {"jobs": [
            {"steps": r.steps, "events": r.events, "startups": r.startups, "solo_steps": r.solo_steps,
             "solo_s": r.solo_s, "exit": r.exit, "last_step_t": None if math.isnan(r.last_step_t) else r.last_step_t,
             "length": r.length.to_json()}
            for r in self.jobs
        ]}

    def restore(self, state: dict) -> None:
        """Take back ``snapshot()``'s records after the loop restored its own state: the steps each job made are
        kept; its process is gone, and what it has left is what the loop's snapshot holds."""
        jobs = self.loop_jobs
        for j, (rec, saved) in enumerate(zip(self.jobs, state["jobs"], strict=True)):
            rec.steps = int(saved["steps"])
            rec.events = saved["events"]
            rec.startups = saved["startups"]
            rec.solo_steps, rec.solo_s = saved["solo_steps"], saved["solo_s"]
            rec.exit = saved["exit"]
            rec.last_step_t = math.nan if saved["last_step_t"] is None else saved["last_step_t"]
            if saved.get("length"):
                rec.length = Length.from_json(saved["length"])
            rec.told, rec.work_told = float(jobs.remaining[j]), self.work(j)

    # ---- the World protocol ---------------------------------------------------------------------------
    def bind(self, jobs: Jobs) -> None:
        """The loop's jobs; their work must be ``work``'s (what ``progress`` reports against)."""
        self.loop_jobs = jobs

    def tolerance(self, now: float) -> float:
        return 2 * self.poll_s

    def clock(self) -> float:
        return time.time() - self.t0

    def advance(self, until: float) -> float:
        self._save(self._last)
        while True:
            now = self.clock()
            self._poll(now)
            if time.monotonic() - self._saved >= SAVE_EVERY_S:
                self._save(now)  # a long stretch without events: a stop then loses little
            if self._ended or self._news or self._lengths:
                self._last = max(now, self._last)
                return self._last
            if now >= until:
                self._last = now
                return now
            if until == math.inf and not any(not self.jobs[j].proc.paused for j in self.live):
                return math.inf
            time.sleep(max(0.0, min(self.poll_s, until - now)))

    def _save(self, now: float) -> None:
        self._saved = time.monotonic()
        if self.on_event is not None:
            self.on_event(now)

    def finished(self, now: float) -> list[tuple[int, int]]:
        ended, self._ended = self._ended, []
        return ended

    def left(self, j: int, now: float) -> float:
        """Job ``j``'s work left as measured: its remaining steps at its step time, plus what is left of its
        start-up while it has not stepped since its process started."""
        rec = self.jobs[j]
        left = max(rec.length.steps - rec.steps, 0) * rec.step_s
        if not math.isnan(rec.spawned_at):
            left += max(0.0, rec.startup_s - (now - rec.spawned_at))
        return left

    def progress(self, now: float, jobs=None) -> tuple[np.ndarray, np.ndarray]:
        """The work each job did since the last report: how much its work left shrank (as of the last poll)."""
        if jobs is None:
            status = self.loop_jobs.status
            jobs = sorted(j for j in self.live if status[j] == RUNNING)
        work = np.empty(len(jobs))
        for k, j in enumerate(jobs):
            rec = self.jobs[j]
            left = self.left(j, now)
            work[k] = rec.told - left
            rec.told = left
        return np.asarray(jobs, dtype=np.int64), work

    def started(self, j: int, gpus: list[int], now: float, restart: bool) -> float:
        rec = self.jobs[j]
        if rec.proc is not None and rec.proc.paused and rec.slots == list(gpus):
            rec.proc.resume()
            rec.events.append({"t": round(now, 3), "event": "resume", "slots": list(gpus), "step": rec.steps})
            return 0.0
        kind = "start"
        if rec.proc is not None:  # paused elsewhere: it moves, restarting from its step count
            self._release(j, now)
            rec.proc.kill()
            self.live.discard(j)
            kind = "move"
        elif restart:
            kind = "restart"  # a resumed run: the process was lost with the interruption
        rec.slots = list(gpus)
        rec.share = math.nan
        env = self._start_environment(j, now)  # a knob read at start: its share in the new process's environment
        rec.proc = self.launcher(rec.spec, rec.slots, rec.steps, self.dir / f"{_safe(rec.spec.job_id)}.progress",
                                 self.dir / f"{_safe(rec.spec.job_id)}.log", **({"env": env} if env else {}))
        rec.spawned_at = now
        rec.spawn_alone = all(self.loop_jobs.occupancy[g] == 1 for g in gpus)
        self.live.add(j)
        rec.events.append({"t": round(now, 3), "event": kind, "slots": list(gpus), "step": rec.steps})
        # A first start's start-up is part of the job's work already; a move or a restart pays it again.
        left = self.left(j, now)
        cost, rec.told = left - rec.told, left
        return cost

    def stopped(self, j: int, now: float) -> None:
        rec = self.jobs[j]
        self._poll_job(j, now)
        rec.proc.pause()
        self._close(j, now)
        self._release(j, now)
        rec.events.append({"t": round(now, 3), "event": "pause", "step": rec.steps})

    def rate_changed(self, j: int, now: float) -> None:
        """Job ``j``'s situation changed: its segment ends and a new one begins (a pairing if one partner)."""
        self._close(j, now)
        jobs = self.loop_jobs
        partners = frozenset(int(o) for g in jobs.gpus[j] for o in jobs.resident[g] if o >= 0 and o != j)
        seg = self.jobs[j].segment = Segment(now, partners)
        self._set_share(j, now)
        if len(partners) != 1:
            return
        key = partners | {j}
        pairing = self.pairings.get(key)
        if pairing is None or j in pairing.segments:  # none open, or j's side of it already ended
            pairing = self.pairings[key] = Pairing(min(key), max(key), now)
        pairing.segments[j] = seg
        pairing.shares[j] = self.jobs[j].share
        seg.pairing = pairing

    def observations(self) -> list[Observation]:
        news, self._news = self._news, []
        return news

    def lengths(self) -> list[tuple[int, float]]:
        """Jobs whose length changed since the last call (an estimate replaced or outrun), with their work:
        start-up plus steps at their step time."""
        out, self._lengths = sorted(self._lengths.items()), {}
        return out

    def _learned(self, j: int) -> None:
        """Job ``j``'s length changed: the loop hears of its new work (``lengths``), and what it has left moves
        with it, apart from the work it did (``progress``)."""
        rec = self.jobs[j]
        work = self.work(j)
        rec.told += work - rec.work_told
        rec.work_told = self._lengths[j] = work

    def work(self, j: int) -> float:
        """Job ``j``'s work as the policies know it: its start-up, then its length at its solo step time."""
        rec = self.jobs[j]
        return rec.startup_s + rec.length.steps * rec.step_s

    def pending(self) -> bool:
        return any(self.loop_jobs.status[j] == RUNNING for j in self.live)

    # ---- polling -------------------------------------------------------------------------------------
    def _poll(self, now: float) -> None:
        for j in list(self.live):
            self._poll_job(j, now)
            rec = self.jobs[j]
            if rec.proc.paused:
                continue
            ended = rec.proc.exit()
            if ended is not None:
                self.live.discard(j)
                rec.proc.kill()  # nothing left to kill; a Ray actor gives its slot back
                self._close(j, now)
                self._release(j, now)
                rec.exit = {"status": ended.status, "code": ended.code, "message": ended.message,
                            "last_step_t": _round(rec.last_step_t)}
                if ended.status == DONE_STATUS and rec.length.ended(rec.steps, now):
                    self._learned(j)
                if ended.status == DONE_STATUS and math.isfinite(rec.last_step_t):
                    self.sitting.teardown[rec.spec.name].append(now - rec.last_step_t)
                rec.events.append({"t": round(now, 3), "event": "finish" if ended.status == DONE_STATUS else
                                   ended.status, "step": rec.steps})
                self._ended.append((j, DONE if ended.status == DONE_STATUS else FAILED))
        self._measure_pairings(now)

    def _poll_job(self, j: int, now: float) -> None:
        rec = self.jobs[j]
        records = rec.proc.poll()
        if not records:
            return
        rec.steps = records[-1][0]
        rec.last_step_t = records[-1][1] - self.t0
        total = getattr(rec.proc, "own_total", None)  # a command's own total, from its output
        if (total is not None and rec.length.from_output(total, now)) or rec.length.outrun(rec.steps):
            self._learned(j)
        if not math.isnan(rec.spawned_at):
            # From the spawn to the end of the first step: process start, import, build, one step.
            took = records[0][1] - self.t0 - rec.spawned_at
            rec.startups.append(took)
            if rec.events and rec.events[-1]["event"] in ("move", "restart"):
                rec.events[-1]["took_s"] = round(took, 3)  # the real cost of the restart, to its first step
            if rec.spawn_alone:
                self.sitting.startup[rec.spec.name].append(took)
            rec.spawned_at = math.nan
        seg = rec.segment
        if seg is not None:
            seg.records.extend((s, t - self.t0) for s, t in records if t - self.t0 >= seg.begin)

    def _close(self, j: int, now: float) -> None:
        """End job ``j``'s segment: a solo one adds to its solo rate, a pairing's to the pair's measurement."""
        rec = self.jobs[j]
        seg, rec.segment = rec.segment, None
        if seg is None:
            return
        if not seg.partners:
            rate, steps, span = seg.rate()
            if steps >= self.min_steps and span >= self.min_s:
                rec.solo_steps += steps
                rec.solo_s += span
                self.sitting.add_solo(rec.spec.name, steps, span)
        pairing = seg.pairing
        if pairing is not None:
            pairing.closed.add(j)
            if pairing.closed >= set(pairing.segments):
                key = frozenset((pairing.a, pairing.b))
                if self.pairings.get(key) is pairing:
                    del self.pairings[key]
                self._finish_pairing(pairing)

    def solo_rate(self, j: int) -> float:
        """Job ``j``'s solo steps/s: its own solo segments in this run, else its workload's in this sitting."""
        rec = self.jobs[j]
        if rec.solo_s >= self.min_s and rec.solo_steps >= self.min_steps:
            return rec.solo_steps / rec.solo_s
        rate = self.sitting.solo_rate(rec.spec.name)
        return rate if math.isfinite(rate) else 1.0 / rec.step_s

    def _pairing_rates(self, pairing: Pairing) -> tuple[list[tuple[float, int, float]], float] | None:
        since = pairing.stepping_since()
        if len(pairing.segments) != 2 or not math.isfinite(since):
            return None
        rates = [pairing.segments[x].rate(since) for x in (pairing.a, pairing.b)]
        if any(steps < self.min_steps or span < self.min_s or not math.isfinite(r) for r, steps, span in rates):
            return None
        return rates, since

    def _measure_pairings(self, now: float) -> None:
        """Give the policies each new pairing's first measurement, once it holds enough steps and its pair's
        windows, with those of its earlier pairings, pass the confidence rule."""
        for pairing in list(self.pairings.values()):
            if pairing.early or now - pairing.checked < CHECK_EVERY_S:
                continue
            got = self._pairing_rates(pairing)
            if got is None:
                continue
            pairing.checked = now
            (r_a, _, _), (r_b, _, _) = got[0]
            new_a, new_b = self._window_slowdowns(pairing, got[1])
            old_a, old_b = self.sitting.windows(self.jobs[pairing.a].kind, self.jobs[pairing.b].kind)
            if judge(old_a + new_a, old_b + new_b):
                continue
            pairing.early = True
            s_a, s_b = self.solo_rate(pairing.a) / r_a, self.solo_rate(pairing.b) / r_b
            if self.jobs[pairing.a].kind == self.jobs[pairing.b].kind:
                s_a = s_b = (s_a + s_b) / 2
            self._news.append(Observation(pairing.a, pairing.b, s_a, s_b))

    def _finish_pairing(self, pairing: Pairing) -> None:
        """The whole pairing measured: pooled with the earlier pairings of its workloads, written, learned."""
        got = self._pairing_rates(pairing)
        if got is None:
            return
        (r_a, steps_a, span), (r_b, steps_b, _) = got[0]
        ja, jb = self.jobs[pairing.a], self.jobs[pairing.b]
        solo_a, solo_b = self.solo_rate(pairing.a), self.solo_rate(pairing.b)
        # Pooled by kind: a pair of kinds runs at one split, so its pairings measure one thing.
        self.sitting.pairs[(ja.kind, jb.kind)].append((solo_a / r_a, solo_b / r_b, span))
        self.sitting.add_windows(ja.kind, jb.kind, *self._window_slowdowns(pairing, got[1]))
        s_a, s_b, seconds, n = self.sitting.pair(ja.kind, jb.kind)
        win_a, win_b = self.sitting.windows(ja.kind, jb.kind)
        refused = judge(win_a, win_b)
        if not refused:
            self._news.append(Observation(pairing.a, pairing.b, s_a, s_b))
        if self.on_pair is not None:
            self.on_pair(ja.spec, jb.spec, {
                "solo_a": solo_a, "solo_b": solo_b, "coloc_a": r_a, "coloc_b": r_b, "slowdown_a": s_a,
                "slowdown_b": s_b, "steps_a": steps_a, "steps_b": steps_b, "window_s": seconds, "pairings": n,
                "trials": min(len(win_a), len(win_b)), "cv_a": cv(win_a), "cv_b": cv(win_b),
                "ci_a": _finite(ci_halfwidth(win_a)), "ci_b": _finite(ci_halfwidth(win_b)), "refused": refused,
                "split_a": pairing.split_a(),
            })

    def _window_slowdowns(self, pairing: Pairing, since: float) -> tuple[list[float], list[float]]:
        """Each job's slowdown (its solo rate over its rate) in each window of its steps in ``pairing`` since
        ``since`` (windows of at least ``WINDOW_STEPS`` steps and ``WINDOW_S`` seconds)."""
        out = []
        for j in (pairing.a, pairing.b):
            solo = self.solo_rate(j)
            recs = [r for r in pairing.segments[j].records if r[1] >= since]
            out.append([solo / rate for rate in window_rates(recs, WINDOW_STEPS, WINDOW_S)])
        return out[0], out[1]

    # ---- jobs ----------------------------------------------------------------------------------------
    def _local(self, spec: JobSpec, slots: list[int], start_step: int, progress: Path, log: Path,
               env: dict[str, str] | None = None) -> LocalJob:
        return LocalJob(spec, self.layout, slots, start_step, progress, log, {**self.extra_env, **(env or {})})

    # ---- the knob ------------------------------------------------------------------------------------
    def _pair_share(self, j: int) -> tuple[float, int]:
        """Job ``j``'s share of its slot under its pair's split (a fraction) and its partner; NaN and -1 where it
        runs without one (alone, on several slots, next to several jobs, or in a pair without a split)."""
        if self.split is None:
            return math.nan, -1
        jobs = self.loop_jobs
        gpus = jobs.gpus[j]
        if len(gpus) != 1:
            return math.nan, -1
        partners = [int(o) for o in jobs.resident[gpus[0]] if o >= 0 and o != j]
        if len(partners) != 1 or len(jobs.gpus[partners[0]]) != 1:
            return math.nan, -1
        percent = float(self.split[jobs.workload[j], jobs.workload[partners[0]]])
        return (percent / 100.0, partners[0]) if math.isfinite(percent) else (math.nan, -1)

    def _start_environment(self, j: int, now: float) -> dict[str, str]:
        """The environment a knob read at start (MPS) needs for job ``j`` starting now next to its partner."""
        if self.split is None or self.knob.live:
            return {}
        share, partner = self._pair_share(j)
        if not math.isfinite(share):
            return {}
        rec = self.jobs[j]
        rec.share = share
        rec.events.append({"t": round(now, 3), "event": "split", "share": round(share * 100),
                           "partner": self.jobs[partner].spec.job_id})
        return self.knob.environment(share)

    def _set_share(self, j: int, now: float) -> None:
        """Run job ``j`` under its share of its pair's split, or lift its limit where it has no such pair (a live
        knob; a process started under MPS keeps its percentage)."""
        if self.split is None or not self.knob.live:
            return
        rec = self.jobs[j]
        share, partner = self._pair_share(j)
        if not math.isfinite(share):
            self._release(j, now)
            return
        if share == rec.share:
            return
        try:
            self.knob.apply(rec.proc.pid, share)
        except OSError:
            return  # its process has just exited: nothing to limit, and its end is noticed at the next poll
        rec.share = share
        rec.events.append({"t": round(now, 3), "event": "split", "share": round(share * 100),
                           "partner": self.jobs[partner].spec.job_id})

    def _release(self, j: int, now: float) -> None:
        """Lift job ``j``'s limit under a live knob (paused, moved, ended, or no longer in its pair)."""
        rec = self.jobs[j]
        if self.split is None or not self.knob.live or not math.isfinite(rec.share):
            return
        rec.share = math.nan
        if rec.proc is not None:
            self.knob.release(rec.proc.pid)
        rec.events.append({"t": round(now, 3), "event": "release"})

    def shutdown(self) -> None:
        """Kill every job's process (a stop or the end of the run); what they reported is kept."""
        now = self.clock()
        for j in list(self.live):
            self._poll_job(j, now)
            self._release(j, now)
            self.jobs[j].proc.kill()
        self.live.clear()

    def job_json(self, j: int) -> dict:
        """What ``run.json`` records of job ``j`` beyond the loop's times."""
        rec = self.jobs[j]
        return {
            "workload": rec.spec.name,
            "steps": round(rec.length.steps),
            "steps_done": rec.steps,
            "step_s": rec.step_s,
            "startup_est_s": rec.startup_s,
            "events": rec.events,
            "startup_s": [round(s, 3) for s in rec.startups],
            "solo_rate": (rec.solo_steps / rec.solo_s) if rec.solo_s else None,
            "exit": rec.exit,
            "length": rec.length.to_json(),
        }


def window_rates(records: list[tuple[int, float]], min_steps: int, min_s: float) -> list[float]:
    """The rates (steps/s) of consecutive windows of step reports ``(step, time)``, each from one report to the
    first later one at least ``min_steps`` steps and ``min_s`` seconds on; the remainder is left out.

    >>> window_rates([(1, 0.0), (2, 0.2), (4, 0.5), (5, 0.7), (8, 1.0), (9, 1.1)], 3, 0.5)
    [6.0, 8.0]
    """
    out, first = [], 0
    for k in range(1, len(records)):
        steps = records[k][0] - records[first][0]
        span = records[k][1] - records[first][1]
        if steps >= min_steps and span >= min_s:
            out.append(steps / span)
            first = k
    return out


def _finite(x: float) -> float:
    return x if math.isfinite(x) else math.nan


def _safe(job_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id)


def _round(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 3)
