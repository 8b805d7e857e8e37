"""Solo profiles: a workload alone on one device, its throughput over repeats and its features."""

from __future__ import annotations

import math
import socket
import time
from dataclasses import dataclass

import numpy as np

from sharewise.datasets.store import utc_now
from sharewise.errors import ProfileFailed
from sharewise.profiler.config import RunConfig, device_kind
from sharewise.profiler.hostload import wait_until_idle
from sharewise.profiler.modes import placements
from sharewise.profiler.pair import cv
from sharewise.profiler.session import Worker, WorkerFailed, common_window, measure_together
from sharewise.profiler.workloads import workload_name

#: Spread over repeats (CV) of a profile's throughput or probe sensitivity above which it counts as noisy.
NOISY_CV = 0.10


@dataclass
class SoloResult:
    """A profiles-table row, and the features computed for it when none were cached (to cache them)."""

    row: dict
    new_features: dict | None


def profile_workload(
    spec: str,
    config: RunConfig,
    feature_lookup=None,
    extra_env: dict[str, str] | None = None,
) -> SoloResult:
    """Profile ``spec`` alone on ``config.device``; return its profiles-table row (in a ``SoloResult``).

    Each of ``config.repeats`` repeats runs in a fresh process: warm-up until step time settles, then one
    window. Features come from the first repeat's process, unless ``feature_lookup(info)`` returns cached
    ones (``info`` is the worker's ready message: device name, batch size...). Raises ``ProfileFailed``.

    Example row (abridged): ``{"workload": "resnet18", "batch_size": 32, "throughput": 9.8,
    "iter_time_ms": 102.0, "cv": 0.012, "f_flops_per_step": 3.4e10, ...}``
    """
    (place,) = placements(config, 1)
    windows, features, info = [], None, {}
    probe = _ProbeRun(config, extra_env) if config.features and config.probe else None
    began = time.monotonic()
    try:
        for _ in range(config.repeats):
            win, info, features = _solo_repeat(spec, config, place, extra_env, feature_lookup, features, probe)
            windows.append(win)
    finally:
        if probe is not None:
            probe.close()
    throughputs = [w.throughput for w in windows]
    tp = float(np.mean(throughputs))
    batch = int(info["batch_size"])
    row = {
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
        "samples_per_s": tp * batch,
        "iter_p50_ms": float(np.mean([w.step_p50_ms for w in windows])),
        "iter_p95_ms": float(np.mean([w.step_p95_ms for w in windows])),
        "iter_p99_ms": float(np.mean([w.step_p99_ms for w in windows])),
        "cv": cv(throughputs),
        "repeats": len(windows),
        "profile_s": time.monotonic() - began,
        "pm_score": math.nan,
        "source": "sharewise",
    }
    feats = dict(features or {})
    feats.pop("_computed", None)
    row.update({k: float(v) for k, v in feats.items() if k.startswith("f_")})
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
        row["f_achieved_flop_rate"] = row["f_flops_per_step"] * tp
    if probe is not None:
        row.update(probe.features())
    computed = (
        {k: float(v) for k, v in feats.items() if k.startswith("f_")}
        if features and features.get("_computed")
        else None
    )
    return SoloResult(row, computed)


def _solo_repeat(spec, config, place, extra_env, feature_lookup, features, probe):
    """One repeat in a fresh process: warm-up, the solo window, the probe window, and the features unless
    ``features`` already holds them. Returns ``(window, ready info, features)``."""
    wait_until_idle(config.idle_threshold, max_wait_s=config.idle_wait_s)
    worker = Worker(spec, config, place, extra_env, deadline=time.monotonic() + config.timeout_s)
    try:
        info = worker.recv("ready", config.timeout_s)
        window = common_window(config, [info["step_ms"]], 1)
        (win,), _ = measure_together([worker], window, config.min_window_steps)
        if probe is not None:
            probe.measure(worker, info["step_ms"], win.throughput)
        if features is None and feature_lookup is not None:
            features = feature_lookup(info)
        if features is None and config.features:
            worker.send(cmd="features", trace_steps=config.trace_steps)
            features = worker.recv("features", config.timeout_s)["features"]
            features["_computed"] = True
        return win, info, features
    except WorkerFailed as exc:
        raise ProfileFailed(exc.status, exc.error) from None
    finally:
        worker.close()


class _ProbeRun:
    """The probe co-runner of one solo profile (see ``sharewise.profiler.probe``).

    One probe process serves every repeat: it warms up and is measured alone once (while the job's process
    sits idle), then runs one shared window next to each repeat's fresh job process. The job's slowdown
    there is ``f_probe_slowdown`` (its sensitivity), the probe's is ``f_probe_pressure``. A probe that fails
    (it should not) leaves both features NaN; the profile itself stands.
    """

    def __init__(self, config: RunConfig, extra_env: dict[str, str] | None) -> None:
        self.config = config
        self.extra_env = extra_env
        self.worker: Worker | None = None
        self.step_ms = 0.0  # the probe's solo step time, known once its process is ready
        self.alone: float | None = None
        self.sensitivity: list[float] = []  # per repeat: the job's solo over its co-located throughput
        self.probe_together: list[float] = []
        self.error: str | None = None

    def measure(self, job: Worker, job_step_ms: float, job_solo: float) -> None:
        from sharewise.profiler.probe import PROBE_SPEC  # here, not at the top: probe.py imports torch

        if self.error is not None:
            return
        cfg = self.config
        try:
            if self.worker is None:
                place = placements(cfg, 2)[1]
                self.worker = Worker(PROBE_SPEC, cfg, place, self.extra_env, time.monotonic() + cfg.timeout_s)
                self.step_ms = self.worker.recv("ready", cfg.timeout_s)["step_ms"]
                alone_window = common_window(cfg, [self.step_ms], 1)
                (win,), _ = measure_together([self.worker], alone_window, cfg.min_window_steps)
                self.alone = win.throughput
            window = common_window(cfg, [job_step_ms, self.step_ms], 2)
            (job_win, probe_win), _ = measure_together([job, self.worker], window, cfg.min_window_steps, tail=True)
            self.sensitivity.append(job_solo / job_win.throughput)
            self.probe_together.append(probe_win.throughput)
        except WorkerFailed as exc:
            self.close()
            if job.proc.poll() is not None:
                raise  # the job itself died (say, out of memory next to the probe): the profile fails
            self.error = f"{exc.status}: {exc.error}"
            job.send(cmd="stop")  # end the job's tail loop, if the probe failed in the shared window

    def features(self) -> dict[str, float]:
        """The two features, plus ``probe_cv``: the spread of the sensitivity over repeats (not a feature;
        it tells how far to trust ``f_probe_slowdown``)."""
        if self.error is not None or not self.sensitivity or not self.alone:
            return {"f_probe_slowdown": math.nan, "f_probe_pressure": math.nan, "probe_cv": math.nan}
        return {
            # Medians: with three repeats, one disturbed window must not move the feature.
            "f_probe_slowdown": float(np.median(self.sensitivity)),
            "f_probe_pressure": float(self.alone / np.median(self.probe_together)),
            "probe_cv": cv(self.sensitivity),
        }

    def close(self) -> None:
        if self.worker is not None:
            self.worker.request_exit()
            self.worker.close()
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
