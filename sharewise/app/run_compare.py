"""``sharewise run --compare-sim``: the same trace simulated with the truth measured in the sitting, next to
each physical run."""

from __future__ import annotations

import math

import numpy as np

from sharewise.app.run_inputs import PhysicalConfig, RunInputs
from sharewise.app.simulate import JSON_DECIMALS, bound_metrics
from sharewise.datasets.traces import Trace
from sharewise.engine.cluster import Cluster
from sharewise.engine.result import RunResult
from sharewise.engine.table import SlowdownTable
from sharewise.policy import get_policy
from sharewise.runtime.sitting import Sitting


def sitting_truth(inputs: RunInputs, sitting: Sitting, steps: np.ndarray,
                  step_s: np.ndarray) -> tuple[SlowdownTable, np.ndarray, np.ndarray, list[str]]:
    """The simulator's truth from this sitting: the trace's pair slowdowns as the runs observed them (else the
    dataset's), and each job's exclusive run time (its start-up, then its ``steps`` at its workload's solo
    rate in the sitting: its solo stretches where they span enough steps and seconds, else the step time the
    runs' policies used (``step_s``), from the calibration or the dataset; then its teardown, from its last step to its
    process's exit noticed, which holds the slot as long). A short command that never ran alone for long
    enough still has the calibration's rate, so its simulated rate is never unknown. Under the slowdown contract
    the pairs are those of the job types (``inputs.kinds``), as the runs pooled them, each at its split."""
    names = inputs.names
    p50 = np.array(inputs.truth.p50, dtype=float)
    in_trace = sorted(set(inputs.job_kinds()))
    observed, from_dataset = 0, []
    for x, a in enumerate(in_trace):
        for b in in_trace[x:]:
            i, j = names.index(a), names.index(b)
            s_a, s_b, _, count = sitting.pair(a, b)
            if count:
                p50[i, j], p50[j, i] = s_a, s_b
                observed += 1
            elif inputs.truth.allowed[i, j]:
                from_dataset.append(f"{a}+{b}")
    truth = SlowdownTable(names, p50, p50, p50, inputs.truth.allowed, device_name=inputs.layout.device_name,
                          source="this sitting")
    exclusive, startup = [], []
    for spec, n, s in zip(inputs.specs, steps, step_s, strict=True):
        rate = sitting.solo_rate(spec.name)
        if not (rate > 0):
            rate = 1.0 / s
        startups = sitting.startup.get(spec.name) or [1.0 / rate]
        # The first step is one of the steps: the start-up is what the first report took beyond it.
        startup.append(max(0.0, float(np.median(startups)) - 1.0 / rate))
        teardown = sitting.teardown.get(spec.name)
        exclusive.append(startup[-1] + n / rate + (float(np.median(teardown)) if teardown else 0.0))
    notes = [f"simulator's truth: each workload's solo step time, start-up time and teardown (last step to exit) "
             "as measured in this sitting; "
             f"{observed} workload pair(s) of the trace as the runs observed them"
             + (f", {len(from_dataset)} the runs never formed from the dataset ({', '.join(from_dataset[:6])}"
                + (", ..." if len(from_dataset) > 6 else "") + ")" if from_dataset else "")]
    return truth, np.array(exclusive), np.array(startup), notes


def compare(inputs: RunInputs, config: PhysicalConfig, runs: dict[str, RunResult], sitting: Sitting,
            steps: np.ndarray, times: tuple[np.ndarray, np.ndarray]) -> tuple[dict, list[str]]:
    """Simulate every run's trace and policy on the same slots with the sitting's truth; compare per policy.

    ``steps`` is each job's length as the runs learned it, ``times`` each job's solo step time and start-up time
    as the runs' policies knew them (``run_inputs.step_times``). The simulated policies know each job's work as the
    physical run's policies did where its length was known (its start-up and steps at the calibrated step
    time), and from the start where the physical ones ran on an estimate; the simulated jobs run at the speed
    the sitting measured; a paused job resumed on its own slot goes on for free and one moved to another slot
    pays its start-up again, as in the physical run.

    Example: ``{"sharewise": {"avg_jct_physical": 81.2, "avg_jct_simulated": 78.9, "avg_ratio": 1.029,
    "p95_jct_physical": ..., "p95_jct_simulated": ..., "p95_ratio": ..., "job_ratio_median": 1.01,
    "within_10": 0.75, "within_20": 0.94, "gain_vs_exclusive_sjf_physical": 0.21, "..._simulated": 0.19}}``.
    """
    from sharewise.engine.simulator import simulate

    step_s, startup_s = times
    truth, exclusive, startup, notes = sitting_truth(inputs, sitting, steps, step_s)
    known = startup_s + steps * step_s
    trace = Trace(job_id=inputs.trace.job_id, arrival=inputs.trace.arrival, duration=known,
                  gpus=inputs.trace.gpus, workload=np.array(inputs.job_kinds(), dtype=object),
                  line=inputs.trace.line, source=inputs.trace.source, format="csv")
    view = None if config.oracle else inputs.table
    cluster = Cluster(n_gpus=inputs.layout.n_slots, gpus_per_node=inputs.layout.n_slots)
    out: dict[str, dict] = {}
    for name, run in runs.items():
        sim = simulate(trace, get_policy(name), truth, view, cluster=cluster, slo=config.max_slowdown, name=name,
                       observe=config.observe, round_s=config.round_s, job_speed=known / exclusive,
                       move_cost=startup)
        ok = np.isfinite(run.finish)
        phys_jct = run.finish - run.arrival
        ratio = phys_jct[ok] / sim.jct[ok]
        row = {
            "avg_jct_physical": float(np.mean(phys_jct[ok])), "avg_jct_simulated": float(np.mean(sim.jct[ok])),
            "p95_jct_physical": _p95(phys_jct[ok]), "p95_jct_simulated": _p95(sim.jct[ok]),
            "job_ratio_median": float(np.median(ratio)) if ratio.size else math.nan,
            "within_10": _within(ratio, 0.10),
            "within_20": _within(ratio, 0.20),
            "jobs_compared": int(ok.sum()), "preemptions_physical": int(run.metrics.get("preemptions", 0)),
            "preemptions_simulated": int(sim.metrics["preemptions"]),
            "sim_jct": [round(float(x), 3) for x in sim.jct],
        }
        if inputs.bounds is not None:  # the contract's violations, simulated beside the physical run's
            row.update({f"{k}_simulated": v for k, v in bound_metrics(sim, inputs.bound_values()).items()})
        row["avg_ratio"] = row["avg_jct_physical"] / row["avg_jct_simulated"]
        row["p95_ratio"] = row["p95_jct_physical"] / row["p95_jct_simulated"]
        row.update(divergence(run, sim, inputs.trace.job_id, config.round_s))
        out[name] = row
        notes.append(why(name, row))
    if "exclusive-sjf" in out:
        base_p, base_s = out["exclusive-sjf"]["avg_jct_physical"], out["exclusive-sjf"]["avg_jct_simulated"]
        for row in out.values():
            row["gain_vs_exclusive_sjf_physical"] = 1 - row["avg_jct_physical"] / base_p
            row["gain_vs_exclusive_sjf_simulated"] = 1 - row["avg_jct_simulated"] / base_s
    return {k: {m: (round(v, JSON_DECIMALS) if isinstance(v, float) else v) for m, v in row.items()}
            for k, row in out.items()}, notes


def divergence(phys: RunResult, sim: RunResult, job_ids, round_s: float | None) -> dict:
    """Where a physical run and its simulation part: the jobs' own run times, their start order, and with
    rounds the jobs that ended in another round.

    - ``run_ratio_median``, ``run_within_10``: per job, its run time (first start to finish, pauses and
      sharing included) physical over simulated: how far the jobs' speed and start-up strayed from the
      sitting's truth, apart from when they started.
    - ``order_changed``: jobs whose place in the start order (by first start, then trace order) differs;
      ``diverged_at``: the physical time of the first start that differs, with the job that started there
      physically and the one the simulation started in that place. A flipped decision (two events a
      fraction of a second apart, an observed slowdown on the other side of a threshold) reorders every
      job after it, whatever their speeds.
    - ``round_crossings`` (with rounds): jobs that ended physically in another round than simulated; each
      one moves the start of the job after it by a whole round; ``first_crossing`` the earliest of them.

    Example: two jobs started in swapped order at 12.0 s: ``{"run_ratio_median": 1.01, "run_within_10":
    1.0, "order_changed": 2, "diverged_at": {"t": 12.0, "physical": "j1", "simulated": "j2"}}``.
    """
    ok = np.flatnonzero(np.isfinite(phys.finish) & np.isfinite(phys.start) & np.isfinite(sim.start))
    run = (phys.finish[ok] - phys.start[ok]) / (sim.finish[ok] - sim.start[ok])
    p_order = sorted(ok.tolist(), key=lambda j: (phys.start[j], j))
    s_order = sorted(ok.tolist(), key=lambda j: (sim.start[j], j))
    moved = [k for k, (a, b) in enumerate(zip(p_order, s_order, strict=True)) if a != b]
    out = {
        "run_ratio_median": float(np.median(run)) if run.size else math.nan,
        "run_within_10": _within(run, 0.10),
        "order_changed": len(moved),
        "diverged_at": None,
    }
    if moved:
        first_p, first_s = p_order[moved[0]], s_order[moved[0]]
        out["diverged_at"] = {"t": round(float(phys.start[first_p]), 3), "physical": str(job_ids[first_p]),
                              "simulated": str(job_ids[first_s])}
    if round_s:
        crossed = ok[np.floor(phys.finish[ok] / round_s - 1e-9) != np.floor(sim.finish[ok] / round_s - 1e-9)]
        out["round_crossings"] = int(crossed.size)
        if crossed.size:
            j = int(crossed[np.argmin(np.minimum(phys.finish[crossed], sim.finish[crossed]))])
            out["first_crossing"] = {"job": str(job_ids[j]), "physical": round(float(phys.finish[j]), 3),
                                     "simulated": round(float(sim.finish[j]), 3)}
    return out


def why(name: str, row: dict) -> str:
    """One plain-words line: where the policy's physical run and its simulation part, from ``divergence``."""
    n = row["jobs_compared"]
    line = (f"{name}: the jobs' own run times (first start to finish) physical/simulated median "
            f"{row['run_ratio_median']:.3f}, {row['run_within_10']:.0%} within 10% (speed and start-up against "
            f"the sitting's truth)")
    if row["order_changed"]:
        d = row["diverged_at"]
        line += (f"; {row['order_changed']} of {n} jobs started in another order, from {d['t']:.1f} s on "
                 f"({d['physical']} started there physically, {d['simulated']} in the simulation): a decision "
                 "went the other way and the jobs after it swapped places")
    else:
        line += "; every job started in the same order in both"
    if row.get("round_crossings"):
        c = row["first_crossing"]
        line += (f"; {row['round_crossings']} job(s) ended in another round than simulated, the first {c['job']} "
                 f"(at {c['physical']:.1f} s physically, {c['simulated']:.1f} s simulated): the job after it starts "
                 "a whole round later or earlier")
    return line + "."


def _within(ratio: np.ndarray, tol: float) -> float:
    """The share of ``ratio`` within ``tol`` of 1 (NaN for none)."""
    return float(np.mean(np.abs(ratio - 1) <= tol)) if ratio.size else math.nan


def _p95(x: np.ndarray) -> float:
    from sharewise.stats import percentile

    return percentile(x, 95) if x.size else math.nan


