"""Solo profiles: a workload alone on one device, its throughput over repeats and its features.

**The solo rule.** A job's solo (its profile's throughput, and the denominator of each of its slowdowns) is
measured with the host share it has next to a partner. A user's scheduler gives a job a share of a node's cores
(Slurm's ``--cpus-per-gpu``, a Kubernetes pod's CPU request) and sharing its GPU with another job gives it none
of the other's, so its speed alone on that share is what sharing takes away from. On a GPU a job therefore runs
alone on the threads of one side of a pair (half the host's; ``solo_placement``), not on every host thread; on
a CPU the ``cpu`` mode gives each side every core and ``cpu-partition`` each side its part, alone as together.
So a profile's worker is one a pair can use (it is kept warm for the campaign's pairs), and a pair's solo
windows measure the same quantity as the profile.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import time
from dataclasses import dataclass

import numpy as np

from sharewise.command_spec import is_command_spec
from sharewise.datasets.store import utc_now
from sharewise.errors import ProfileFailed
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.features import FeatureCache
from sharewise.profiler.hostload import wait_until_idle
from sharewise.profiler.modes import SHARING_MODES, CoreAssignment, placements
from sharewise.profiler.pair import cv, settle_prestarted
from sharewise.profiler.pool import WorkerPool
from sharewise.profiler.probe import PROBE_SPEC
from sharewise.profiler.session import Window, WorkerFailed, WorkerProcess, common_window, measure_together
from sharewise.profiler.workloads import workload_name

#: Spread over repeats (CV) of a profile's throughput or probe sensitivity above which it counts as noisy.
NOISY_CV = 0.10
#: Seconds of windows a warm profile's repeats may take together: a slow workload (long windows, which
#: vary less) runs fewer of its ``repeats``, at least ``MIN_PROFILE_REPEATS``, so a cold profile of any zoo
#: workload stays within about 20 s on a 2-core CPU.
PROFILE_WINDOWS_S = 9.0
MIN_PROFILE_REPEATS = 2
#: Seconds of steps each of the features' two traced stretches aims at (``trace_steps``).
TRACE_S = 0.5


@dataclass(frozen=True)
class ProfileTask:
    """A workload to profile alone: its spec and the name it is recorded under (a value type).

    ``use_cache``: take its features from the feature cache when they are there (False recomputes them,
    ``--no-cache``); ``keep_worker``: leave the job's warm worker in the pool after its profile, for the
    pair runs of a campaign (False ends it: ``sharewise profile``, where no pair follows).
    """

    spec: str
    name: str
    use_cache: bool = True
    keep_worker: bool = True


def profile_workload(task: ProfileTask, config: RunConfig, jobs: WorkerPool, probes: WorkerPool) -> dict:
    """Profile ``task``'s workload alone on ``config.device``; return its profiles-table row.

    One process warms up until step time settles; then ``config.repeats`` repeats (fewer for a slow
    workload: ``profile_repeats``), each one solo window and one window next to the probe (``_ProbeRun``),
    every other repeat in mirrored order so that drift cancels. The job's processes come from ``jobs`` and
    the probe's from ``probes`` (the executor's pools, ``executors.local``): with warm isolation the repeats
    run in one process, left in the pool for the campaign's pairs, and the probe's process serves every
    profile; with fresh isolation each repeat runs in a new process. Features come from the first process,
    or from the feature cache (``_features``). Raises ``ProfileFailed``.

    Example row (abridged): ``{"workload": "resnet18", "batch_size": 32, "throughput": 9.8,
    "iter_time_ms": 102.0, "cv": 0.012, "f_flops_per_step": 3.4e10, ...}``
    """
    probe = _ProbeRun(config, probes) if config.features and config.probe else None
    began = time.monotonic()
    try:
        windows, info, features = _repeats(task, config, jobs, probe)
    except WorkerFailed as exc:
        raise ProfileFailed(exc.status, exc.error) from None
    finally:
        if probe is not None:
            probe.release()
    row = _row(task.spec, config, windows, info, began)
    row.update({k: float(v) for k, v in (features or {}).items() if k.startswith("f_")})
    _restate_rates(row, windows, info)
    if probe is not None:
        row.update(probe.features())
    if config.shares:
        try:
            row.update(scaling_curve(task.spec, config, jobs))
        except WorkerFailed as exc:
            raise ProfileFailed(exc.status, f"scaling curve: {exc.error}") from None
    return row


def scaling_curve(spec: str, config: RunConfig, jobs: WorkerPool) -> dict[str, float]:
    """The job's solo rate under the sharing knob at each of ``config.shares`` over its rate without it:
    ``{"f_share_25": 0.27, "f_share_50": 0.52, ...}`` (``profiler.knob``; ``predictor.structure.share_slowdown``
    reads it).

    Each share takes two windows under the knob between two without it (the rate without it averaged over the
    two, so a drift of the machine cancels). A live knob (a CPU quota) is set on the warm job's process for its
    windows; a knob read at start (MPS) needs a process of its own per share.
    """
    from sharewise.profiler.knob import knob_for

    place = solo_placement(config)
    knob = knob_for(config.mode, cores=len(place.cores))
    knob.check()
    out: dict[str, float] = {}
    free = jobs.acquire([spec], [place])[0]
    try:
        for percent in config.shares:
            share = percent / 100.0
            limited = free
            if not knob.live:
                env_place = dataclasses.replace(place, env=tuple(sorted(knob.environment(share).items())))
                limited = jobs.acquire([spec], [env_place])[0]
            try:
                window = common_window(config, [free.info["step_ms"] / share])
                rates, plain = [], []
                for kind in ("plain", "knob", "knob", "plain"):
                    worker = free if kind == "plain" else limited
                    if kind == "knob" and knob.live:
                        knob.apply(worker.pid, share)
                    try:
                        (w,), _ = measure_together([worker], window, config.min_window_steps,
                                                   timeout=config.timeout_s)
                    finally:
                        if kind == "knob" and knob.live:
                            knob.release(worker.pid)
                    (plain if kind == "plain" else rates).append(w.throughput)
                out[f"f_share_{percent}"] = float(np.mean(rates) / np.mean(plain))
            finally:
                if limited is not free:
                    jobs.release([limited])
    except BaseException:
        jobs.discard([free])
        raise
    finally:
        knob.close()
    jobs.release([free])
    return out


def _features(job: WorkerProcess, task: ProfileTask, config: RunConfig) -> dict | None:
    """The job's features: the cached ones when there are, else computed in the job (then cached); None when
    there are none and ``config.features`` is off. The one place the feature cache is read and written.

    Features depend on (workload, spec, size, batch size, device, torch version, mode), not on the run.
    A command's are never cached: its script may change while its spec stays the same.
    """
    cache = FeatureCache() if task.use_cache and not is_command_spec(task.spec) else None
    key = _feature_key(task.spec, config, job.info)
    cached = cache.get(key) if cache is not None else None
    if cached is not None or not config.features:
        return cached
    job.send(cmd="features", trace_steps=trace_steps(config, job.info["step_ms"]))
    features = job.recv("features", config.timeout_s)["features"]
    if cache is not None:
        cache.put(key, {k: float(v) for k, v in features.items() if k.startswith("f_")})
    return features


def _feature_key(spec: str, config: RunConfig, info: dict) -> dict:
    return {
        "workload": workload_name(spec),
        "spec": spec,
        "size": config.size,
        "batch_size": int(info["batch_size"]),
        "device_name": info["device_name"],
        "torch_version": info.get("torch_version", ""),
        # One key for modes whose solo runs are the same (mps reuses timeslice's features): its features are
        # measured once per device, not once per sharing mode.
        "mode": SHARING_MODES.get(config.mode).features_mode,
    }


def solo_placement(config: RunConfig) -> CoreAssignment:
    """Where a job runs alone (the solo rule of this module): on CUDA devices the first side of a pair's
    placements (every core, half the host's threads, or ``config.threads``); on CPUs the mode's placement of
    one worker, which is already a pair member's (``cpu``: every core; ``cpu-partition``: the first part).

    >>> solo_placement(RunConfig(device="cuda", mode="timeslice", threads=4)).threads
    4
    """
    if device_kind(config.device) == "cuda":
        return placements(config, 2)[0]
    return placements(config, 1)[0]


def _repeats(task: ProfileTask, config, jobs: WorkerPool, probe):
    """The solo and probe windows of a profile; returns ``(solo windows, ready info, features)``."""
    place = solo_placement(config)
    windows: list[Window] = []
    features, info = None, {}
    job: WorkerProcess | None = None
    n_repeats = config.repeats
    try:
        r = 0
        while r < n_repeats:
            if job is None:
                wait_until_idle(config.idle_threshold, max_wait_s=config.idle_wait_s)
                job = _start(task.spec, place, jobs, probe)
                if jobs.reuse:
                    settle_prestarted(jobs, [job], config)
                if probe is not None and probe.worker is not None:
                    settle_prestarted(probe.pool, [probe.worker], config)
                info = job.info
                if features is None:
                    features = _features(job, task, config)
                if probe is not None and r == 0:
                    probe.measure_alone()
                if r == 0:
                    n_repeats = profile_repeats(config, info["step_ms"], probe.step_ms() if probe else None)
            job.deadline = time.monotonic() + config.timeout_s
            window = common_window(config, [info["step_ms"]])
            order = ("solo", "probe") if r % 2 == 0 else ("probe", "solo")
            solo = shared = None
            for kind in order:
                if kind == "solo":
                    (solo,), _ = measure_together([job], window, config.min_window_steps, timeout=config.timeout_s)
                elif probe is not None:
                    shared = probe.measure_with(job, info["step_ms"])
            windows.append(solo)
            if probe is not None:
                probe.record(solo, shared)
            job.deadline = None
            if not jobs.reuse:
                jobs.release([job])
                job = None
            r += 1
        if probe is not None:
            probe.measure_alone()
    except BaseException:
        if job is not None:
            jobs.discard([job])
        raise
    if job is not None:
        jobs.release([job])
    return windows, info, features


def trace_steps(config: RunConfig, step_ms: float) -> int:
    """Steps the features are traced over: ``config.trace_steps``, fewer (at least 2) for slow steps.

    The features are per step or shares of a step; a slow step holds hundreds of ops, and two of them
    describe it as well as three, at a third less of a cold profile's time.

    >>> trace_steps(RunConfig(trace_steps=3), 40.0), trace_steps(RunConfig(trace_steps=3), 400.0)
    (3, 2)
    """
    return max(min(2, config.trace_steps), min(config.trace_steps, int(TRACE_S * 1e3 // max(step_ms, 1e-3))))


def profile_repeats(config: RunConfig, step_ms: float, probe_step_ms: float | None) -> int:
    """Repeats a profile runs: ``config.repeats``, fewer where they would take over ``PROFILE_WINDOWS_S``.

    >>> profile_repeats(RunConfig(repeats=6), step_ms=30.0, probe_step_ms=7.0)
    6
    >>> profile_repeats(RunConfig(repeats=6), step_ms=320.0, probe_step_ms=7.0)
    2
    """
    solo = common_window(config, [step_ms])
    # A shared window runs until the job's steps, up to twice as long next to the probe, fill it.
    shared = max(solo, 2 * config.min_window_steps * step_ms / 1e3) if probe_step_ms else 0.0
    fits = int(PROFILE_WINDOWS_S // (solo + shared + 0.1))
    return min(config.repeats, max(MIN_PROFILE_REPEATS, fits))


def _start(spec: str, place, jobs: WorkerPool, probe) -> WorkerProcess:
    """Start (or take a warm) job process, and the probe's beside it, so their start-ups overlap."""
    if probe is None or probe.worker is not None or probe.error is not None:
        return jobs.acquire([spec], [place])[0]
    try:
        job, probe.worker = jobs.acquire([spec, PROBE_SPEC], [place, probe.place])
        return job
    except WorkerFailed as exc:
        if exc.spec != PROBE_SPEC:
            raise
        probe.error = f"{exc.status}: {exc.error}"
        return jobs.acquire([spec], [place])[0]


def _row(spec: str, config: RunConfig, windows: list[Window], info: dict, began: float) -> dict:
    throughputs = [w.throughput for w in windows]
    tp = float(np.mean(throughputs))
    batch = int(info["batch_size"])
    return {
        "workload": workload_name(spec),
        "family": info.get("family", ""),
        "spec": spec,
        "size": config.size,
        "batch_size": batch,
        "device_kind": device_kind(config.device),
        "device_name": info["device_name"],
        "device_index": int(config.device.split(":")[1]) if ":" in config.device else 0,
        "mode": config.mode,
        "host": info.get("host", socket.gethostname()),
        "torch_version": info.get("torch_version", ""),
        "created_at": utc_now(),
        "iter_time_ms": 1e3 / tp,
        "throughput": tp,
        # A command that does not say its batch size has steps, not samples (``batch_known`` False).
        "samples_per_s": tp * batch if info.get("batch_known", True) else math.nan,
        "iter_p50_ms": float(np.mean([w.step_p50_ms for w in windows])),
        "iter_p95_ms": float(np.mean([w.step_p95_ms for w in windows])),
        "iter_p99_ms": float(np.mean([w.step_p99_ms for w in windows])),
        "cv": cv(throughputs),
        "repeats": len(windows),
        "isolation": config.isolation,
        "profile_s": time.monotonic() - began,
        "pm_score": math.nan,
        "source": "sharewise",
    }


def _restate_rates(row: dict, windows: list[Window], info: dict) -> None:
    # Cores busy during the solo windows: how much of the device's host side a job needs. On CPUs it is the
    # main driver of time-sharing interference (a job that keeps every core busy loses half its speed next to
    # any busy partner; one whose ops run on one thread barely notices).
    cores_used = float(np.mean([w.cpu_s / w.elapsed_s for w in windows]))
    row["f_cpu_cores_used"] = cores_used
    row["f_cpu_util"] = cores_used / max(1, int(info.get("threads", 1)))
    # The measured window beats the few traced steps the features came from (and cached features may come
    # from an earlier run), so the rate features are restated from this profile's windows.
    row["f_step_time_ms"] = row["iter_time_ms"]
    if "f_flops_per_step" in row:
        row["f_achieved_flop_rate"] = row["f_flops_per_step"] * row["throughput"]


class _ProbeRun:
    """The probe co-runner of one solo profile (see ``sharewise.profiler.probe``).

    One probe process serves every repeat (with warm isolation, every profile of a campaign): it is
    measured alone before the first repeat and after the last (while the job's process sits idle), and
    runs one shared window next to the job in each repeat. The job's slowdown there is
    ``f_probe_slowdown`` (its sensitivity), the probe's is ``f_probe_pressure``. A probe that fails (it
    should not) leaves both features NaN; the profile itself stands.
    """

    def __init__(self, config: RunConfig, pool: WorkerPool) -> None:
        self.config = config
        self.pool = pool
        self.place = placements(config, 2)[1]
        self.worker: WorkerProcess | None = None
        self.alone: list[float] = []
        self.sensitivity: list[float] = []  # per repeat: the job's solo over its co-located throughput
        self.probe_together: list[float] = []
        self.error: str | None = None
        self._shared: tuple[Window, Window] | None = None

    def step_ms(self) -> float | None:
        """The probe's step time (None while it has no worker)."""
        return self.worker.info["step_ms"] if self.worker is not None else None

    def _ensure(self) -> bool:
        if self.error is not None:
            return False
        if self.worker is None:
            try:
                self.worker = self.pool.acquire([PROBE_SPEC], [self.place])[0]
            except WorkerFailed as exc:
                self.error = f"{exc.status}: {exc.error}"
                return False
        return True

    def measure_alone(self) -> None:
        if not self._ensure():
            return
        cfg = self.config
        try:
            window = common_window(cfg, [self.worker.info["step_ms"]])
            (win,), _ = measure_together([self.worker], window, cfg.min_window_steps, timeout=cfg.timeout_s)
            self.alone.append(win.throughput)
        except WorkerFailed as exc:
            self._fail(exc)

    def measure_with(self, job: WorkerProcess, job_step_ms: float) -> Window | None:
        """One shared window of the job and the probe; returns the job's window (None if the probe failed)."""
        if not self._ensure():
            return None
        cfg = self.config
        try:
            window = common_window(cfg, [job_step_ms, self.worker.info["step_ms"]])
            (job_win, probe_win), _ = measure_together(
                [job, self.worker], window, cfg.min_window_steps, tail=True, timeout=cfg.timeout_s
            )
        except WorkerFailed as exc:
            if not job.alive or exc.spec != PROBE_SPEC:
                raise  # the job itself failed (say, out of memory next to the probe): the profile fails
            self._fail(exc)
            job.send(cmd="stop")  # end the job's tail loop, if the probe failed in the shared window
            return None
        self.probe_together.append(probe_win.throughput)
        return job_win

    def record(self, solo: Window, shared: Window | None) -> None:
        if shared is not None:
            self.sensitivity.append(solo.throughput / shared.throughput)

    def _fail(self, exc: WorkerFailed) -> None:
        self.error = f"{exc.status}: {exc.error}"
        if self.worker is not None:
            self.pool.discard([self.worker])
            self.worker = None

    def features(self) -> dict[str, float]:
        """The two features, plus ``probe_cv``: the spread of the sensitivity over repeats (not a feature;
        it tells how far to trust ``f_probe_slowdown``)."""
        if self.error is not None or not self.sensitivity or not self.alone:
            return {"f_probe_slowdown": math.nan, "f_probe_pressure": math.nan, "probe_cv": math.nan}
        return {
            # Medians: with three repeats, one disturbed window must not move the feature.
            "f_probe_slowdown": float(np.median(self.sensitivity)),
            "f_probe_pressure": float(np.mean(self.alone) / np.median(self.probe_together)),
            "probe_cv": cv(self.sensitivity),
        }

    def release(self) -> None:
        if self.worker is not None:
            self.pool.release([self.worker])
            self.worker = None


def add_pm_scores(rows: list[dict]) -> list[dict]:
    """Set each row's ``pm_score``: its throughput relative to the median over the devices profiled.

    The PM score of PAL (Jain et al., SC'24): 1.0 is a median device, below 1.0 a slower one.

    >>> [r["pm_score"] for r in add_pm_scores([{"throughput": 9.0}, {"throughput": 10.0}, {"throughput": 11.0}])]
    [0.9, 1.0, 1.1]
    """
    median = float(np.median([r["throughput"] for r in rows]))
    for r in rows:
        r["pm_score"] = r["throughput"] / median
    return rows


def noisy_profile_warning(row: dict, repeats: int) -> str | None:
    """Return a warning when a profile's repeats disagree by more than ``NOISY_CV``, else None.

    On a shared machine one profile can land in a disturbed stretch; its throughput and above all its probe
    sensitivity (the predictor's starting point) then mislead every prediction for that job. ``row`` is a
    profiles-table row (``cv``, ``probe_cv``; NaN or absent means not measured), ``repeats`` the repeats
    it was profiled with (the warning suggests two more).

    >>> noisy_profile_warning({"workload": "ncf", "cv": 0.24, "probe_cv": 0.03}, repeats=3).split(";")[0]
    'ncf: repeats disagree on throughput by 24% (more than 10%)'
    >>> noisy_profile_warning({"workload": "ncf", "cv": 0.02}, repeats=3) is None
    True
    """
    spreads = {"throughput": row.get("cv", math.nan), "probe sensitivity": row.get("probe_cv", math.nan)}
    noisy = [f"{name} by {value * 100:.0f}%" for name, value in spreads.items() if value > NOISY_CV]
    if not noisy:
        return None
    return (
        f"{row['workload']}: repeats disagree on {' and '.join(noisy)} (more than {NOISY_CV * 100:.0f}%); "
        "if the machine was busy, profile it again when it is idle, or with more repeats "
        f"(--repeats {repeats + 2})"
    )
