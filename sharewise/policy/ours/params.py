"""Every knob of ``sharewise`` in one frozen object, with where each default came from."""

from __future__ import annotations

import dataclasses
import functools

#: ``Params.share_fresh``'s values, in the order of their code in ``arrays.Knobs.share_fresh``.
SHARE_FRESH = ("next-call", "idle", "always")


@dataclasses.dataclass(frozen=True)
class Params:
    """The knobs of ``sharewise``; a run overrides any of them by keyword (``functools.partial(sharewise,
    preempt=False)`` is the suite's "no preemption" ablation).

    Example: ``Params(preempt=False).preempt_ratio == 4.0``.
    """

    #: SLO on each job's realized slowdown (run time from its first start over its exclusive run time).
    #: ``None``: the cluster's (``ClusterState.slo``, the operator's ``--max-slowdown``, 2.0 by default).
    max_slowdown: float | None = None
    #: Slowdown quantile the benefit of sharing is judged at: the calibrated p90, the pessimistic end of the
    #: predicted interval, so a pair shares only where the gain holds there.
    quantile: str = "p90"
    #: Slowdown quantile the SLO is checked at (p90, as the benefit).
    slo_quantile: str = "p90"
    #: Waiting jobs at the head of the SJF queue that compete for shared GPUs per call: 24 was as good as 32
    #: or 64 on the Gavel trace, within noise, and kept the full Philly replay near a minute (ee66775).
    sharing_head: int = 24
    #: Urgent restarts and SLO-guarded SRPT preemption (``urgent``, ``srpt``); off: the policy never stops a
    #: running job and returns plain placements (the suite's "no preemption" ablation).
    preempt: bool = True
    #: With ``preempt``, pause one side of a shared pair whose measured slowdowns break the SLO (``rescue``);
    #: off for the suite's "no SLO rescue" ablation. On Gavel's V100 pairs it took the heavy cell's SLO
    #: violations from 7 to 3 and Philly's from 14 to 1 (policy suite, 2026-12-03).
    rescue: bool = True
    #: Re-place jobs that run alone on the GPUs fastest for them (``replacement``, PAL's per-round step).
    #: ``None``: only where migrating costs nothing (``preempt_delay_s == 0``) and GPUs have per-class speeds.
    replace: bool | None = None
    #: A waiting job may preempt jobs with more than this many times its remaining run time (plus the restart
    #: cost). Swept on the policy suite (2026-12-02, restarts free and at 60 s): 2 and 8 won fewer cells.
    preempt_ratio: float = 4.0
    #: A victim must keep its urgency slack after waiting its preemptor's run time (plus the restart cost) over
    #: this share of its slack. Same sweep: 0.25 won fewer cells.
    slack_share: float = 0.5
    #: A preempted job restarts first once its slack is down to this fraction of its SLO allowance. Same
    #: sweep: 0.3 won fewer cells.
    urgency: float = 0.5
    #: Victims per call at most: the longest jobs are the ones preempted; a few per call keep the churn low
    #: (set with the preemption rules, 1c8b860; not swept).
    max_preemptions: int = 8
    #: Waiting jobs considered for SRPT preemption per call, shortest remaining first (1c8b860; not swept: a
    #: job further back waits for shorter ones anyway).
    srpt_head: int = 32
    #: How the waiting jobs that may join are matched to shared GPUs: ``"sjf"``, shortest waiting job first, each
    #: on the GPU where it saves most, as SJF-BSBF orders its jobs; ``"sum"``, one assignment maximizing the
    #: summed saving (the rule before 2026-12-04, which let a longer job take the GPU a shorter one could join:
    #: 1.03x SJF-BSBF on the physical benchmark's trace, simulated; issue 41's table in benchmarks/results).
    share_order: str = "sjf"
    #: When a job started alone on a free GPU in this call is offered to the waiting jobs: ``"next-call"``, from
    #: the next call on (the cluster has moved by then: a job ended or arrived); ``"idle"``, at once where the
    #: cluster held no job at the call, since then no other job's end brings a call before this one's end, and
    #: ``"next-call"`` would have the queue take turns where SJF-BSBF pairs (issue 41's six-job trace: 1.139x
    #: SJF-BSBF, now 1.000x); ``"always"``, at once. Policy suite, 2026-12-05: ``"idle"`` moved 3 of 364
    #: schedules (Gavel's heavy cell on V100, where whole-cluster jobs' ends leave the cluster idle: 0.995x);
    #: ``"always"`` cost up to 1.14x with the truth there (whole-cluster jobs waited longer), and waking right
    #: after such a call to offer the job then cost 1.25x with predictions.
    share_fresh: str = "idle"
    #: A waiting job that asks for at least this share of the cluster's GPUs (and at least two) is reserved once
    #: it is the first in SJF order that cannot start: no start, join or SRPT preemption may delay its predicted
    #: start (``reservation``: EASY backfilling's reservation). ``math.inf``: nothing is reserved. Half the
    #: cluster: a job that needs as many GPUs free at once as all the others hold. Swept over 40 Gavel cells with
    #: jobs of 8-32 GPUs on 16-64 GPUs (policy suite, 2026-12-07): the geometric mean of average JCT moved
    #: 1.004x at 0.5, 1.001x at 1.0 and 1.022x at 0.25 (a quarter-cluster job's reservation idles GPUs more often),
    #: each cell by up to 20% either way; on e13805/16 with the truth 0.5 gave 0.88-0.93x, 1.0 0.95-1.03x.
    reserve_share: float = 0.5
    #: Seconds of tolerance on urgency, so a wake-up never lands at the instant of the call that asked for it;
    #: also the wake-up after a job joins a partner it never ran with (the rescue's check comes then).
    tolerance_s: float = 1.0
    #: The rescue checks the shared GPUs whose pair formed this long ago at most: twice the wake-up after a
    #: join, which absorbs float error at large times.
    recheck_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("quantile", "slo_quantile"):
            if getattr(self, name) not in ("p10", "p50", "p90"):
                raise ValueError(f"{name} must be 'p10', 'p50' or 'p90', got {getattr(self, name)!r}")
        if self.share_order not in ("sjf", "sum"):
            raise ValueError(f"share_order must be 'sjf' or 'sum', got {self.share_order!r}")
        if not self.reserve_share > 0:
            raise ValueError(f"reserve_share must be > 0 (math.inf reserves nothing), got {self.reserve_share!r}")
        if self.share_fresh not in SHARE_FRESH:
            known = ", ".join(map(repr, SHARE_FRESH))
            raise ValueError(f"share_fresh must be one of {known}, got {self.share_fresh!r}")

    @functools.cached_property
    def numbers(self) -> tuple:
        """The numeric knobs in the order of ``arrays.Knobs`` (between the call's time, SLO and restart cost and
        the assignment's forbidden cost), computed once: a policy call builds its ``Knobs`` from them."""
        return (int(self.sharing_head), float(self.preempt_ratio), float(self.slack_share), float(self.urgency),
                int(self.max_preemptions), int(self.srpt_head), float(self.tolerance_s), float(self.recheck_s),
                SHARE_FRESH.index(self.share_fresh), float(self.reserve_share))


#: The defaults.
PARAMS = Params()


@functools.lru_cache(maxsize=64)
def with_knobs(params: Params, knobs: tuple[tuple[str, object], ...]) -> Params:
    """``params`` with the keyword overrides ``knobs`` (sorted ``(name, value)`` pairs); an unknown name lists
    the known ones. Cached: an ablation bound with ``functools.partial`` pays this once, not per call."""
    names = {f.name for f in dataclasses.fields(Params)}
    unknown = sorted(k for k, _ in knobs if k not in names)
    if unknown:
        raise TypeError(f"sharewise has no knob {', '.join(unknown)}; its knobs are {', '.join(sorted(names))}")
    return dataclasses.replace(params, **dict(knobs))
