"""Live Prometheus metrics of a physical run (``sharewise run --metrics-port PORT``).

The run serves, while its jobs run, what its scheduling loop and its real world know (``prometheus_client``,
a registry of its own, never the global one): per job its step rate over the last ``WINDOW_S`` seconds, its
solo rate, the slowdown that makes (observed), the slowdown the policy's table predicts next to its current
partner (p50, p90), its steps and length, its slot and state, its bound under the slowdown contract and its share
of its slot while it runs at a split; per slot its jobs; per policy run its decisions (policy calls), preemptions
and failures. ``METRICS`` names every family and says what it holds; the docs
(``docs/guides/live-metrics.md``) and the Grafana dashboard (``docs/assets/grafana/sharewise-run.json``) read
the same names.

The run feeds the exporter a ``PolicyView`` after every event of its loop and every few seconds between
(``policy_view``); a scrape reads the latest views, so it never waits on the run and never sees half an
update. Every per-job series is labelled ``job_id``, ``workload``, ``slot`` and ``policy`` (``slot`` is ``0``,
``0+1`` for a job on two slots, ``none`` for one that holds none), the predicted slowdowns also ``partner``
(``none`` for a job that runs alone); samples whose value is not known yet (a
job's rate before it stepped) are left out rather than served as NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sharewise.engine.world import DONE, FAILED, QUEUED, RUNNING, WAITING
from sharewise.errors import ConfigError

#: Seconds of a job's latest step reports its current rate is measured over (within its current segment).
WINDOW_S = 10.0
PREFIX = "sharewise_run_"
#: Every metric family served: name (without ``_total`` for counters) -> (type, help).
METRICS: dict[str, tuple[str, str]] = {
    "sharewise_run_job_steps_per_second": ("gauge", "The job's steps per second over its last window"),
    "sharewise_run_job_solo_steps_per_second": ("gauge", "The job's steps per second alone on its slot"),
    "sharewise_run_job_observed_slowdown": ("gauge", "Solo rate over the rate of the job's last window"),
    "sharewise_run_job_predicted_slowdown_p50": (
        "gauge", "Median slowdown the policies' table predicts next to the current partner (1: alone)"),
    "sharewise_run_job_predicted_slowdown_p90": (
        "gauge", "90th-percentile slowdown the policies' table predicts next to the current partner (1: alone)"),
    "sharewise_run_job_bound": (
        "gauge", "The slowdown the job was promised under the contract (its bound; protected: 1.25)"),
    "sharewise_run_job_share_percent": (
        "gauge", "The job's share of its slot under the sharing knob while it runs at its pair's split (percent)"),
    "sharewise_run_job_steps": ("gauge", "Steps the job has done"),
    "sharewise_run_job_length_steps": ("gauge", "The job's length in steps as the policies see it"),
    "sharewise_run_job_length_known": ("gauge", "1 where the job's length is its real one, 0 for an estimate"),
    "sharewise_run_job_state": ("gauge", "1 for the job's current state (label state)"),
    "sharewise_run_slot_jobs": ("gauge", "Jobs on the slot"),
    "sharewise_run_jobs": ("gauge", "Jobs of the run in each state (label state)"),
    "sharewise_run_clock_seconds": ("gauge", "Seconds since the policy's run began"),
    "sharewise_run_decisions": ("counter", "Calls of the policy (scheduling decisions)"),
    "sharewise_run_preemptions": ("counter", "Running jobs the policy paused"),
    "sharewise_run_failures": ("counter", "Jobs that ended failed (any reason)"),
}
#: A job's states, as the ``state`` label says them.
STATES = ("not_arrived", "queued", "running", "paused", "done", "failed")
#: ``job_id``, not ``job``: Prometheus sets ``job`` on every series to the scrape job's name (the exporter's own would
#: become ``exported_job``), which would fold every job of a run into one series.
JOB_LABELS = ("job_id", "workload", "slot", "policy")


class MetricsPortError(ConfigError):
    """The metrics endpoint cannot listen where it was asked to (the port is taken, or the host is not local)."""


@dataclass(frozen=True)
class JobView:
    """One job as a scrape shows it (NaN: not known now, left out). Example: ``JobView(job="a", workload=
    "cnn", slot="0", state="running", partner="b", steps_per_s=41.2, solo_steps_per_s=60.3,
    observed_slowdown=1.46, predicted_p50=1.38, predicted_p90=1.61, steps=120, length_steps=500.0,
    length_known=True, bound=1.25, share=70.0)``."""

    job: str
    workload: str
    slot: str
    state: str
    partner: str = ""
    steps_per_s: float = math.nan
    solo_steps_per_s: float = math.nan
    observed_slowdown: float = math.nan
    predicted_p50: float = math.nan
    predicted_p90: float = math.nan
    steps: int = 0
    length_steps: float = math.nan
    length_known: bool = True
    bound: float = math.nan  # its bound (NaN: none)
    share: float = math.nan  # its share of its slot in percent while it runs at a split (NaN: unlimited)


@dataclass(frozen=True)
class PolicyView:
    """One policy's run at one moment: its jobs, the jobs on each slot, and its counters."""

    policy: str
    clock_s: float
    jobs: tuple[JobView, ...]
    slot_jobs: tuple[int, ...]
    decisions: int
    preemptions: int
    failures: int


@dataclass(eq=False)  # hashable by identity: the registry keeps its collectors in a dict
class RunExporter:
    """Serves the latest ``PolicyView`` of every policy run so far at ``http://host:port/metrics``.

    ``port`` 0 takes any free port (``port`` then holds it). A port already taken, or a host this machine
    cannot listen on, is a ``MetricsPortError`` raised here, before any job starts.
    """

    host: str
    port: int
    views: dict[str, PolicyView] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry()
        self.registry.register(self)
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise MetricsPortError(
                f"--metrics-port {self.port}: cannot serve metrics on {self.host}:{self.port} ({exc.strerror or exc}); "
                "choose a free port (0: any free one) or another --metrics-host"
            ) from None
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def update(self, view: PolicyView) -> None:
        """Serve ``view`` as its policy's run from now on (a scrape reads whole views, never half of one)."""
        self.views = {**self.views, view.policy: view}

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        self._server.shutdown()
        self._server.server_close()

    def collect(self):
        """The metric families of every view (``prometheus_client``'s collector interface)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families = {}
        for name, (kind, text) in METRICS.items():
            labels = list(_labels(name))
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            families[name] = cls(name, text, labels=labels)
        for view in list(self.views.values()):
            _add_view(families, view)
        yield from families.values()


def _labels(name: str) -> tuple[str, ...]:
    if name.startswith("sharewise_run_job_"):
        extra = ("state",) if name.endswith("_state") else ("partner",) if "predicted" in name else ()
        return (*JOB_LABELS, *extra)
    if name == "sharewise_run_slot_jobs":
        return ("slot", "policy")
    if name == "sharewise_run_jobs":
        return ("policy", "state")
    return ("policy",)


def _add_view(families: dict, view: PolicyView) -> None:
    p = view.policy
    for job in view.jobs:
        base = [job.job, job.workload, job.slot, p]
        for name, value in (
            ("sharewise_run_job_steps_per_second", job.steps_per_s),
            ("sharewise_run_job_solo_steps_per_second", job.solo_steps_per_s),
            ("sharewise_run_job_observed_slowdown", job.observed_slowdown),
            ("sharewise_run_job_bound", job.bound),
            ("sharewise_run_job_share_percent", job.share),
            ("sharewise_run_job_steps", float(job.steps)),
            ("sharewise_run_job_length_steps", job.length_steps),
            ("sharewise_run_job_length_known", float(job.length_known)),
        ):
            if math.isfinite(value):
                families[name].add_metric(base, value)
        for name, value in (("sharewise_run_job_predicted_slowdown_p50", job.predicted_p50),
                            ("sharewise_run_job_predicted_slowdown_p90", job.predicted_p90)):
            if math.isfinite(value):
                # ``none`` where it runs alone, as ``slot`` says it: Prometheus drops an empty label, and a legend
                # of ``{{partner}}`` would show nothing
                families[name].add_metric([*base, job.partner or "none"], value)
        families["sharewise_run_job_state"].add_metric([*base, job.state], 1.0)
    for slot, n in enumerate(view.slot_jobs):
        families["sharewise_run_slot_jobs"].add_metric([str(slot), p], float(n))
    for state in STATES:
        families["sharewise_run_jobs"].add_metric([p, state], float(sum(j.state == state for j in view.jobs)))
    families["sharewise_run_clock_seconds"].add_metric([p], view.clock_s)
    families["sharewise_run_decisions"].add_metric([p], float(view.decisions))
    families["sharewise_run_preemptions"].add_metric([p], float(view.preemptions))
    families["sharewise_run_failures"].add_metric([p], float(view.failures))


# ---- what the run shows ------------------------------------------------------------------------------
def policy_view(policy: str, loop, world, now: float) -> PolicyView:
    """The ``PolicyView`` of ``loop`` (a ``SchedulingLoop``) over ``world`` (a ``RealWorld``) at run clock
    ``now``: each job's state, slot and partner from the loop's read-only view of its jobs (``loop.jobs``, what
    its world reads); its rates, steps and length from the world; its predicted slowdown next to its partner from
    the loop's table (what the policy sees, learned pairs included)."""
    table, view = loop.table, loop.jobs
    jobs = []
    for j, rec in enumerate(world.jobs):
        status = int(view.status[j])
        gpus = list(view.gpus[j])
        partners = sorted({int(o) for g in gpus for o in view.resident[g] if o >= 0 and o != j})
        state = _state(status, rec)
        rate = solo = observed = p50 = p90 = share = math.nan
        if status == RUNNING:
            share = rec.share * 100
            seg = rec.segment
            if seg is not None:
                rate, _, _ = seg.rate(since=max(seg.begin, now - WINDOW_S))
            solo = world.solo_rate(j)
            observed = solo / rate if rate > 0 else math.nan
            p50, p90 = 1.0, 1.0
            if len(partners) == 1:
                a, b = view.workload[j], view.workload[partners[0]]
                p50, p90 = float(table.p50[a, b]), float(table.p90[a, b])
            elif partners:  # next to jobs of several workloads (a multi-slot job): no one prediction
                p50 = p90 = math.nan
        jobs.append(JobView(
            job=rec.spec.job_id, workload=rec.spec.name, slot="+".join(map(str, gpus)) if gpus else "none",
            state=state, partner=",".join(world.jobs[o].spec.job_id for o in partners), steps_per_s=rate,
            solo_steps_per_s=solo, observed_slowdown=observed, predicted_p50=p50, predicted_p90=p90,
            steps=int(rec.steps), length_steps=float(rec.length.steps), length_known=bool(rec.length.known),
            bound=rec.bound if math.isfinite(rec.bound) else math.nan, share=share,
        ))
    return PolicyView(policy=policy, clock_s=float(now), jobs=tuple(jobs),
                      slot_jobs=tuple(int(x) for x in view.occupancy), decisions=int(loop.calls),
                      preemptions=int(loop.preemptions), failures=int((view.status == FAILED).sum()))


def _state(status: int, rec) -> str:
    if status == QUEUED and rec.proc is not None and rec.proc.paused:
        return "paused"
    return {WAITING: "not_arrived", QUEUED: "queued", RUNNING: "running", DONE: "done", FAILED: "failed"}[status]
