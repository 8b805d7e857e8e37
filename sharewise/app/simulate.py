"""``sharewise simulate``: read the truth, the predictions, the trace and the cluster; simulate each policy.

The CLI and the golden test both call ``run_simulation`` with a ``SimulationConfig``, so what the test pins
is exactly what a user runs. The simulator itself (``sharewise.engine.simulator``) reads no files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.app import splits
from sharewise.datasets.tables import read_predictions
from sharewise.datasets.traces import AUTO, TRACE_FORMATS, Trace, TraceContext, detect_format, load_trace
from sharewise.datasets.variability import PAL_SEED, GpuVariability, read_class_mapping, read_variability
from sharewise.engine.result import RunResult
from sharewise.engine.simulator import Cluster, seeded_speeds, simulate
from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, DatasetError, TraceError
from sharewise.policy import event_driven_names, get_policy, policy_names

GAVEL_NOTES = (
    "Measured pairs are single-GPU runs: a multi-GPU job that shares its GPUs uses its single-GPU slowdown "
    "against that partner (and runs at its slowest GPU).",
    "A pair measured as out of memory (oom) never shares; a pair never measured does not share either.",
)
#: Digits kept in the JSON output (``simulate``, ``run``), so the golden file does not depend on a float's last bits.
JSON_DECIMALS = 4
#: ``--data none``: no pair data; no two jobs share a GPU.
NO_DATA = "none"


@dataclass(frozen=True)
class SimulationConfig:
    """Everything one ``sharewise simulate`` run needs, handed over whole.

    ``data`` is the truth dataset folder (measured pairs and profiles); ``predictions`` (a CSV or Parquet file
    of predictions) or ``model`` (a saved ``model.json``) replace the default out-of-fold predictions;
    ``oracle`` shows the policies the truth; ``observe`` (on by default) lets them learn the measured
    slowdown of each pair once it has run, as a real cluster sees it. ``max_slowdown`` is the SLO on a
    job's realized slowdown. ``round_s`` calls the policies only at round boundaries (Gavel: 360 s);
    ``preempt_delay_s`` is what restarting a preempted job costs (preemptive policies), and what a job that
    migrates pays. ``data`` may be ``none``: no pair data, so no two jobs share a GPU.

    GPU speeds: ``speed_sigma`` (a seeded log-normal per GPU) or ``pm_scores``: a dataset folder with
    ``profile --all-devices`` PM scores (one speed per GPU), or a file of PAL's per-class variability
    (``sharewise.datasets.variability``: PAL's ``profiles.json`` of measurements to draw from with
    ``pm_seed``, a ``PerfVar_<class>`` table, or one measurements CSV); jobs map to classes by
    ``job_classes`` (CSV ``workload,class``), by default PAL's mapping of its models.

    The slowdown contract (``app.splits``): a trace's ``bound`` column gives jobs a bound; ``split`` (``auto``:
    choose each pair's split of the sharing knob where the data has slowdowns at splits; ``none``: never) and
    ``bounds`` (``enforce``: the policies keep each bound through their table; ``report``: they schedule as
    without bounds, and the bounded jobs' violations are only counted).
    """

    trace: str
    data: str = "reference"
    policies: tuple[str, ...] = ()
    trace_format: str = "auto"
    n_gpus: int = 160
    gpus_per_node: int = 8
    device_name: str | None = None
    mode: str | None = None
    oracle: bool = False
    predictions: str | None = None
    model: str | None = None
    group_by: str = "family"
    max_slowdown: float = 2.0
    seed: int = 0
    speed_sigma: float = 0.0
    pm_scores: str | None = None
    pm_seed: int = PAL_SEED
    job_classes: str | None = None
    cross_node_slowdown: float = 1.0
    max_jobs: int | None = None
    observe: bool = True
    round_s: float | None = None
    preempt_delay_s: float = 0.0
    split: str = "auto"
    bounds: str = "enforce"

    def __post_init__(self) -> None:
        if self.trace_format != AUTO and self.trace_format not in TRACE_FORMATS:
            raise ConfigError(
                f"trace format must be one of {[AUTO, *TRACE_FORMATS.names()]}, got {self.trace_format!r}"
            )
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ConfigError(f"--max-jobs must be >= 1, got {self.max_jobs}")
        check_run_options(self)
        splits.check_options(self)


def check_run_options(config) -> None:
    """The checks ``simulate`` and ``run`` share: the SLO, at most one source of the policies' table, rounds.
    ``config`` has ``max_slowdown``, ``oracle``, ``predictions``, ``model`` and ``round_s``."""
    if not (math.isfinite(config.max_slowdown) and config.max_slowdown >= 1.0):
        raise ConfigError(f"--max-slowdown must be a number >= 1.0, got {config.max_slowdown}")
    if sum(bool(x) for x in (config.oracle, config.predictions, config.model)) > 1:
        raise ConfigError("choose at most one of --oracle, --predictions and --model")
    if config.round_s is not None and not (math.isfinite(config.round_s) and config.round_s > 0):
        raise ConfigError(f"--round-s must be a positive number of seconds, got {config.round_s}")


@dataclass
class SimulationReport:
    """Results of every simulated policy, plus what the run assumed."""

    config: SimulationConfig
    n_jobs: int
    n_gpus: int
    results: dict[str, RunResult]
    view: str
    observe: bool = False
    notes: list[str] = field(default_factory=list)
    bounds: list | None = None  # each job's ``planner.contract.Bound`` where the trace gives any (None: none)
    job_ids: list[str] | None = None

    def bounded_jobs(self) -> dict[str, list[dict]]:
        """Per policy, its bounded jobs with their realized slowdowns (``splits.bound_lines`` reads them):
        ``{"sharewise": [{"job_id": "j1", "bound": "<= 1.3", "bound_max": 1.3, "realized_slowdown": 1.42}]}``;
        {} where no job has a bound."""
        if not self.bounds or not any(b.bounded for b in self.bounds):
            return {}
        out = {}
        for name, r in self.results.items():
            done = r.done()
            out[name] = [{"job_id": str(self.job_ids[j]), "bound": str(b), "bound_max": b.max_slowdown,
                          "realized_slowdown": float(r.realized_slowdown[j]) if done[j] else None}
                         for j, b in enumerate(self.bounds) if b.bounded]
        return out

    def to_json(self) -> dict:
        """Return the ``--json`` object.

        Example: ``{"jobs": 2000, "gpus": 160, "view": "predicted", "observe": True, "policies": {"sjf-bsbf":
        {"avg_jct": 345600.0, "p95_jct": 2.1e6, "makespan": 1.4e7, "avg_queue": 24000.0, "utilization": 0.34,
        "slo_violations": 336, "preemptions": 0}}}``; ``view`` is ``oracle`` or where predictions came from.
        """
        return {
            "jobs": self.n_jobs,
            "gpus": self.n_gpus,
            "view": self.view,
            "observe": self.observe,
            "policies": {
                name: {
                    k: (round(v, JSON_DECIMALS) if isinstance(v, float) else v) for k, v in r.metrics.items()
                }
                for name, r in self.results.items()
            },
        }


@dataclass
class SimulationInputs:
    """What every policy of one ``simulate`` run shares: truth, trace, cluster, the policies' table (None: they
    see the truth), notes."""

    truth: SlowdownTable
    trace: Trace
    cluster: Cluster
    table: SlowdownTable | None
    observe: bool
    notes: list[str]
    bounds: list | None = None  # each job's ``planner.contract.Bound`` where the trace gives any column of them
    contract: splits.Contract | None = None  # the typed tables (the trace's workloads are then its job types)


def prepare(config: SimulationConfig) -> SimulationInputs:
    """Read the truth, the trace and the predictions of ``config``; build the cluster; collect the notes."""
    if config.data == NO_DATA:
        return _prepare_unshared(config)
    profiles, pairs = _read_truth(config.data)
    # The truth without the knob (rows measured at a split are the truth at that split, under the contract).
    truth, knob = splits.base_truth(pairs, device_name=config.device_name, mode=config.mode)
    if not truth.allowed.any() and knob.empty:
        raise DatasetError(
            f"dataset {config.data!r} holds no measured pair with status 'ok' on device "
            f"{truth.device_name!r}; the simulator needs measured slowdowns as its truth"
        )
    device = truth.device_name
    notes = list(GAVEL_NOTES)
    trace = _load_trace(config, profiles, truth, device)
    notes.extend(trace.notes)
    bounds = splits.job_bounds(trace)  # a bad cell fails here, naming its line
    cluster = _cluster(config, trace, notes)
    mode = config.mode or _pairs_mode(pairs, device)
    grid = model_grid(config)
    contract_on = splits.wants_contract(config, bounds, knob, mode, model_grid=bool(grid))
    at = None
    if contract_on and config.split == "auto" and mode in splits.KNOB_MODES:
        at = split_candidates(sorted(set(trace.workload.tolist()) & set(truth.workloads)),
                              grid or splits.measured_splits(knob), device)
    table, table_note, view_at = policies_tables(config, profiles, pairs, truth, device, at_splits=at)
    notes.append(table_note)
    contract = None
    if contract_on:
        on_device = pairs[pairs["device_name"].astype(str) == device]
        contract = splits.type_jobs(trace.workload.tolist(), bounds, table, truth, view_at,
                                    splits.measured_at(knob, truth.workloads), config.max_slowdown,
                                    splits.not_oom(on_device, truth.workloads), mode or "", config.split)
        trace, truth, table, cluster = _typed(trace, truth, table, cluster, contract)
        notes.extend(contract.notes)
    elif any(b.bounded for b in bounds):
        notes.append(f"--bounds {config.bounds}: {sum(b.bounded for b in bounds)} job(s) carry a bound; the policies "
                     "schedule as without them, and each policy's bounded jobs that exceed their bound are counted")
    observe = config.observe and table is not None
    if observe:
        notes.append(
            "Observe: once two workloads have run side by side, policies see their measured slowdowns "
            "(--no-observe turns this off)."
        )
    if config.round_s:
        notes.append(f"Rounds: policies start jobs only every {config.round_s:g} s.")
    notes.append(
        "Policies know each job's exclusive run time (as SJF schedulers assume) and which pairs fit in "
        "memory; "
        f"SLO: realized slowdown <= {config.max_slowdown:g}."
    )
    return SimulationInputs(truth=truth, trace=trace, cluster=cluster, table=table, observe=observe, notes=notes,
                            bounds=bounds if trace.bound is not None else None, contract=contract)


def _typed(trace: Trace, truth: SlowdownTable, table: SlowdownTable | None, cluster: Cluster,
           contract: splits.Contract):
    """The trace, the truth, the policies' table and the cluster over the contract's job types: each job's
    workload becomes its type's label, the tables those over types (the policies need no change)."""
    typed = contract.typed
    trace = replace(trace, workload=np.array(contract.labels, dtype=object))
    if cluster.variability is not None:  # a type runs in its workload's variability class
        v = cluster.variability
        class_of = {**v.class_of, **{t: v.class_of[w] for t, w in typed.workload.items() if w in v.class_of}}
        cluster = replace(cluster, variability=replace(v, class_of=class_of))
    return trace, typed.truth, None if table is None else typed.view, cluster


def _pairs_mode(pairs: pd.DataFrame, device: str) -> str | None:
    """The one sharing mode of ``device``'s pairs, None where they hold several (or none)."""
    if "mode" not in pairs.columns:
        return None
    modes = pairs.loc[pairs["device_name"].astype(str) == device, "mode"].astype(str).unique()
    return str(modes[0]) if len(modes) == 1 else None


def model_grid(config) -> tuple[int, ...]:
    """``splits.grid_for`` the model of ``config.model`` (``--model``; none without one, or with --oracle /
    --predictions); ``simulate`` and ``run`` both read their splits' grid here."""
    if not config.model or config.oracle or config.predictions:
        return ()
    from sharewise.predictor import SlowdownRegressor

    return splits.grid_for(SlowdownRegressor.load(config.model))


def split_candidates(workloads: list[str], at: tuple[int, ...], device: str) -> pd.DataFrame:
    """Every unordered pair of ``workloads`` (itself included) at each split of ``at`` (job a's percent), for
    the policies' predictions there (no row where ``at`` is empty).

    Example: ``split_candidates(["a", "b"], (30, 70), "cpu")`` holds ``a+a``, ``a+b`` and ``b+b`` at 30 and 70.
    """
    if not at or not workloads:
        return pd.DataFrame(columns=["workload_a", "workload_b", "device_name", "split_a"])
    i, j = np.triu_indices(len(workloads))
    names = np.array(workloads, dtype=object)
    k = len(at)
    return pd.DataFrame({"workload_a": np.repeat(names[i], k), "workload_b": np.repeat(names[j], k),
                         "device_name": device, "split_a": np.tile(np.asarray(at, dtype=float), len(i))})


def _prepare_unshared(config: SimulationConfig) -> SimulationInputs:
    """``--data none``: the trace's workloads, none of which may share a GPU (no pair data covers them)."""
    fmt = detect_format(config.trace) if config.trace_format == AUTO else config.trace_format
    trace = load_trace(config.trace, format=fmt, context=TraceContext(seed=config.seed, n_gpus=config.n_gpus))
    if config.max_jobs is not None:
        trace = trace.head(config.max_jobs)
    truth = SlowdownTable.unshared(sorted(set(trace.workload)), source="no pair data (--data none)")
    notes = [*trace.notes, "No pair data (--data none): no two jobs share a GPU; every job runs alone."]
    cluster = _cluster(config, trace, notes)
    if config.round_s:
        notes.append(f"Rounds: policies start jobs only every {config.round_s:g} s.")
    return SimulationInputs(truth=truth, trace=trace, cluster=cluster, table=None, observe=False, notes=notes,
                            bounds=splits.job_bounds(trace) if trace.bound is not None else None)


def run_policy(name: str, inputs: SimulationInputs, config: SimulationConfig) -> RunResult:
    """Simulate registered policy ``name`` on prepared inputs; where jobs carry bounds its metrics add
    ``bounded_jobs``, ``bound_violations`` and ``bound_violation_rate`` (``splits.bound_metrics``)."""
    result = simulate(
        inputs.trace,
        get_policy(name),
        inputs.truth,
        inputs.table,
        cluster=inputs.cluster,
        slo=config.max_slowdown,
        name=name,
        observe=inputs.observe,
        round_s=config.round_s,
    )
    if inputs.bounds is not None:
        result.metrics.update(bound_metrics(result, [b.max_slowdown for b in inputs.bounds]))
    return result


def bound_metrics(result: RunResult, bounds: list[float]) -> dict:
    """``splits.bound_metrics`` of a run: each job's realized slowdown where it finished (a job that did not
    is not counted)."""
    realized = np.where(result.done(), np.asarray(result.realized_slowdown, dtype=float), np.nan)
    return splits.bound_metrics(realized, bounds)


def run_simulation(config: SimulationConfig) -> SimulationReport:
    """Load truth, predictions, trace and cluster from ``config``; simulate each policy on the same trace.

    Returns
    -------
    SimulationReport
        ``results`` maps each policy name to its ``RunResult``; ``to_json()`` gives the CLI's JSON.
    """
    # By default every policy defined for the run's scheduling: PAL's round-based artifact policies re-place
    # every running job at every call, which event-driven runs of a long trace cannot afford.
    names = list(config.policies) or (policy_names() if config.round_s else event_driven_names())
    for name in names:
        get_policy(name)  # an unknown name fails before anything is read
    inputs = prepare(config)
    results = {name: run_policy(name, inputs, config) for name in names}
    return SimulationReport(
        config=config,
        n_jobs=len(inputs.trace),
        n_gpus=inputs.cluster.n_gpus,
        results=results,
        view="oracle" if inputs.table is None else inputs.table.source,
        observe=inputs.observe,
        notes=inputs.notes,
        bounds=inputs.bounds,
        job_ids=[str(j) for j in inputs.trace.job_id],
    )


# ---- pieces ------------------------------------------------------------------------------------------
def _read_truth(data: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    from sharewise.datasets.store import open_dataset

    ds = open_dataset(data, profiles=True, pairs=True)
    return ds.read_profiles(), ds.read_pairs()


def _device_profiles(profiles: pd.DataFrame, device: str, mode: str | None) -> pd.DataFrame:
    sel = profiles[profiles["device_name"].astype(str) == device]
    if mode is not None and (sel["mode"] == mode).any():
        sel = sel[sel["mode"] == mode]
    return sel


def _load_trace(config: SimulationConfig, profiles: pd.DataFrame, truth: SlowdownTable, device: str) -> Trace:
    """Load the trace with what any format may need: the device's isolated throughputs and its workloads."""
    fmt = detect_format(config.trace) if config.trace_format == AUTO else config.trace_format
    prof = _device_profiles(profiles, device, config.mode)
    context = TraceContext(
        # Several profiles of one workload (repeats): their median isolated throughput.
        throughputs=prof.groupby("workload")["throughput"].median().to_dict(),
        scale_throughputs=scale_curves(prof),
        # Workloads that can share with at least one other: a draw of unshareable ones tells nothing.
        workloads=[w for i, w in enumerate(truth.workloads) if truth.allowed[i].any()],
        seed=config.seed,
        n_gpus=config.n_gpus,
    )
    trace = load_trace(config.trace, format=fmt, context=context)
    unknown = np.flatnonzero(~np.isfinite(trace.duration))
    if unknown.shape[0]:
        i = int(unknown[0])
        raise TraceError(
            f"{trace.source}:{int(trace.line[i])}: job {trace.job_id[i]!r} is given in steps, and dataset "
            f"{config.data!r} holds no solo profile of {trace.workload[i]!r} on {device!r} to turn steps into "
            "seconds; profile it ('sharewise profile') or give duration_s"
        )
    if config.max_jobs is not None:
        trace = trace.head(config.max_jobs)
    return trace


def scale_curves(profiles: pd.DataFrame) -> dict[str, dict[int, float]]:
    """Per workload, the whole job's isolated steps/s by GPU count (median over its profiles).

    Single-GPU throughput comes from ``throughput``; more GPUs from the ``scale_throughputs`` column where a
    source measured them (Gavel's importer). Example: ``{"LM (batch size 80)": {1: 28.2, 2: 58.1, 8: 231.2}}``.
    """
    values: dict[str, dict[int, list[float]]] = {}
    extra = profiles["scale_throughputs"] if "scale_throughputs" in profiles.columns else [""] * len(profiles)
    for w, tp, text in zip(profiles["workload"].astype(str), profiles["throughput"], extra, strict=True):
        curve = values.setdefault(w, {})
        curve.setdefault(1, []).append(float(tp))
        for k, v in (json.loads(text) if text else {}).items():
            if int(k) != 1:
                curve.setdefault(int(k), []).append(float(v))
    return {w: {k: float(np.median(v)) for k, v in sorted(c.items())} for w, c in values.items()}


def _cluster(config: SimulationConfig, trace: Trace, notes: list[str]) -> Cluster:
    if config.speed_sigma and config.pm_scores:
        raise ConfigError("choose either --speed-sigma or --pm-scores for the GPU speed factors, not both")
    speeds, variability = None, None
    if config.speed_sigma:
        speeds = seeded_speeds(config.n_gpus, config.speed_sigma, config.seed)
    elif config.pm_scores and Path(config.pm_scores).is_file():
        variability = class_variability(config.pm_scores, config.n_gpus, config.pm_seed, config.job_classes)
        variability.class_ids(trace.workload)  # every job needs a class: fail here, naming the unmapped ones
        notes.append(
            f"GPU speeds: PAL's per-class factors ({variability.source}; classes "
            f"{', '.join(variability.classes)}): a job runs at its slowest GPU's factor for its class."
        )
    elif config.pm_scores:
        speeds = pm_score_speeds(config.pm_scores, config.n_gpus)
    if config.job_classes and variability is None:
        raise ConfigError("--job-classes maps jobs to the classes of a per-class variability file (--pm-scores FILE)")
    return Cluster(
        n_gpus=config.n_gpus,
        gpus_per_node=config.gpus_per_node,
        speeds=speeds,
        cross_node_slowdown=config.cross_node_slowdown,
        preempt_delay_s=config.preempt_delay_s,
        variability=variability,
    )


def class_variability(path: str, n_gpus: int, seed: int = PAL_SEED, job_classes: str | None = None) -> GpuVariability:
    """PAL's per-class factors for ``n_gpus`` GPUs from ``path``, jobs mapped by the file ``job_classes`` or,
    by default, by PAL's mapping of its models (``pal_class_mapping``)."""
    from sharewise.datasets.traces.pal import pal_class_mapping

    class_of = read_class_mapping(job_classes) if job_classes else pal_class_mapping()
    return read_variability(path, n_gpus, seed=seed, class_of=class_of)


def pm_score_speeds(data: str, n_gpus: int) -> tuple[float, ...]:
    """Speed factors from ``profile --all-devices`` PM scores: the median score of each device index,
    repeated over the simulated GPUs (GPU ``g`` gets the score of device ``g mod n_devices``)."""
    from sharewise.datasets.store import open_dataset

    profiles = open_dataset(data, profiles=True).read_profiles()
    if not {"pm_score", "device_index"} <= set(profiles.columns):
        raise DatasetError(
            f"dataset {data!r} holds no PM scores (columns pm_score, device_index); measure them with "
            "'sharewise profile --all-devices'"
        )
    scores = profiles.dropna(subset=["pm_score"]).groupby("device_index")["pm_score"].median()
    scores = scores[scores > 0]
    if scores.empty:
        raise DatasetError(f"dataset {data!r} holds no positive PM score")
    values = scores.sort_index().to_numpy(dtype=float)
    return tuple(float(values[g % values.shape[0]]) for g in range(n_gpus))


def policies_table(
    config: SimulationConfig,
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    truth: SlowdownTable,
    device: str,
) -> tuple[SlowdownTable | None, str]:
    """The table the policies see and a note saying what it is: ``None`` for the truth (``oracle``), else the
    predictions of ``config.predictions`` or ``config.model``, or out-of-fold predictions with calibrated
    intervals (the default); ``simulate`` and ``run`` both take the policies' table from here."""
    table, note, _ = policies_tables(config, profiles, pairs, truth, device)
    return table, note


def policies_tables(
    config: SimulationConfig,
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    truth: SlowdownTable,
    device: str,
    at_splits: pd.DataFrame | None = None,
) -> tuple[SlowdownTable | None, str, splits.SplitTable | None]:
    """``policies_table``, and the policies' slowdowns at the splits of the sharing knob where ``at_splits``
    (``split_candidates``: the pairs and splits to predict) is given: the rows at a split of
    ``config.predictions``, else the model's or the out-of-fold predictions of ``at_splits``. The table
    without the knob is made of the rows without a split. Returns ``(table, note, view_at)``; ``view_at`` is
    None with ``oracle``, without ``at_splits``, or where nothing is predicted at a split."""
    if config.oracle:
        return None, "Oracle: policies see the measured slowdowns.", None
    candidates = None
    if config.predictions:
        predictions = read_predictions(config.predictions)
        note = f"Policies see the predictions in {config.predictions}."
    else:
        candidates = prediction_candidates(pairs, truth, device)
        if at_splits is not None and len(at_splits):
            if "mode" in candidates.columns and len(candidates):
                at_splits = at_splits.assign(mode=candidates["mode"].iloc[0])
            candidates = pd.concat([candidates, at_splits], ignore_index=True)
        if config.model:
            from sharewise.predictor import SlowdownRegressor, predict_pairs

            model = SlowdownRegressor.load(config.model)
            predictions = predict_pairs(model, profiles, candidates)
            note = f"Policies see predictions of model {config.model}."
        else:
            from sharewise.predictor import out_of_fold_predictions

            # Calibrated intervals: the SLO checks of the sharing policies read the p90.
            # A policy runs with whatever pairs exist: a group whose holding-out leaves nothing is widened, said.
            predictions = out_of_fold_predictions(
                profiles, pairs, group_by=config.group_by, candidates=candidates, holdout="self", calibrate=True,
                nothing_left="widen",
            )
            note = (
                f"Policies see out-of-fold predictions: each job's slowdown predicted by a model that never "
                f"saw that job's {config.group_by} (a brand-new model next to jobs the cluster knows), with "
                "conformally calibrated p10-p90 intervals."
                + "".join(f" Except: {n}." for n in predictions.attrs.get("notes", []))
            )
        if at_splits is not None and len(at_splits):  # the predictors return the candidates' rows in order
            predictions["split_a"] = candidates["split_a"].to_numpy()
    if "device_name" in predictions.columns and (predictions["device_name"].astype(str) == device).any():
        predictions = predictions[predictions["device_name"].astype(str) == device]
    view_at = None
    if "split_a" in predictions.columns:
        under = splits.knob_rows(predictions)
        if at_splits is not None:
            view_at = splits.at_predictions(predictions, truth.workloads)
        predictions = predictions[~under]
    table = SlowdownTable.from_predictions(predictions, device_name=None, workloads=truth.workloads)
    return table, note, view_at


def prediction_candidates(pairs: pd.DataFrame, truth: SlowdownTable, device: str) -> pd.DataFrame:
    """The pairs the policies may ever ask about: those the truth lets share, once per unordered pair."""
    i, j = np.nonzero(np.triu(truth.allowed))
    names = np.array(truth.workloads, dtype=object)
    frame = pd.DataFrame({"workload_a": names[i], "workload_b": names[j], "device_name": device})
    modes = pairs.loc[pairs["device_name"].astype(str) == device, "mode"].unique()
    if len(modes) == 1:
        frame["mode"] = modes[0]
    return frame


#: Sharing policies: the ones whose SLO violations ours is compared with.
SHARING_POLICIES = ("sjf-ffs", "sjf-bsbf", "sharewise")
#: "Lowest average JCT" allows this much.
JCT_TOLERANCE = 0.01


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit to show a time of this magnitude in, and its seconds: hours from one hour, minutes from one
    minute, else seconds (a trace of seconds reads ``36.2 s``, not ``0.01 h``).

    >>> time_unit(36.2), time_unit(600.0), time_unit(5400.0)
    (('s', 1.0), ('min', 60.0), ('h', 3600.0))
    """
    if seconds >= 3600.0:
        return "h", 3600.0
    if seconds >= 60.0:
        return "min", 60.0
    return "s", 1.0


def jct_unit(sim: dict) -> tuple[str, float]:
    """``time_unit`` of the largest average JCT of a ``simulate --json`` result (one unit for its table)."""
    jcts = [m["avg_jct"] for m in sim["policies"].values() if math.isfinite(m.get("avg_jct", math.nan))]
    return time_unit(max(jcts)) if jcts else ("s", 1.0)


def verdict(sim: dict, ours: str = "sharewise", unit: tuple[str, float] = ("h", 3600.0),
            shared: dict[str, int | None] | None = None, noise: bool = False,
            bounded: dict[str, list[dict]] | None = None) -> list[str]:
    """Say in plain words where ``ours`` stands in a ``simulate --json`` result, and why when it does not win.

    Ours wins a run when its average JCT is the lowest (within 1%) and it has no more SLO violations than any
    other sharing policy. The reasons are read off the numbers: a policy that beats ours by violating the
    SLO more often, sharing that does not pay on this load (an exclusive policy leads), or freer preemption.
    ``shared`` (per policy, how many jobs ever shared a GPU; None where unknown): where ours shared none, its
    average JCT says nothing of sharing, and the verdict says that instead of crediting or blaming sharing.
    ``noise``: the runs are physical, so runs that decided alike still differ by run-to-run noise.
    Where jobs carry bounds (the slowdown contract), one line per policy says how many bounded jobs exceeded
    theirs (``splits.bound_lines``; ``bounded``: each policy's bounded jobs, to name those that did).

    Example: ``["sharewise: average JCT 1.38 h, 0.76x exclusive-sjf, 0 SLO violation(s) of 300 jobs",
    "sjf-bsbf's average JCT is 14% lower, at the cost of 10 SLO violations to our 0: ..."]``
    """
    return _jct_verdict(sim, ours, unit, shared, noise) + splits.bound_lines(sim, bounded)


def _jct_verdict(sim: dict, ours: str, unit: tuple[str, float], shared: dict[str, int | None] | None,
                 noise: bool) -> list[str]:
    """``verdict``'s lines on the average JCT and the SLO."""
    pol = sim["policies"]
    if ours not in pol:
        return []
    mine = pol[ours]
    best_name = min(pol, key=lambda n: pol[n]["avg_jct"])
    best = pol[best_name]
    lines = []
    head = f"{ours}: average JCT {mine['avg_jct'] / unit[1]:.2f} {unit[0]}"
    if "exclusive-sjf" in pol and pol["exclusive-sjf"]["avg_jct"] > 0:
        head += f", {mine['avg_jct'] / pol['exclusive-sjf']['avg_jct']:.2f}x exclusive-sjf"
    head += f", {mine['slo_violations']} SLO violation(s) of {sim['jobs']} jobs"
    lines.append(head)
    more_violations = [
        n for n in SHARING_POLICIES if n in pol and n != ours and pol[n]["slo_violations"] < mine["slo_violations"]
    ]
    if shared is not None and shared.get(ours) == 0:
        lines.append(_unshared(ours, pol, noise))
    elif mine["avg_jct"] <= best["avg_jct"] * (1 + JCT_TOLERANCE) and not more_violations:
        lines.append(f"{ours} has the lowest average JCT here (within {JCT_TOLERANCE:.0%}).")
        return lines
    elif mine["avg_jct"] > best["avg_jct"] * (1 + JCT_TOLERANCE):
        gap = 1 - best["avg_jct"] / mine["avg_jct"]
        why = f"{best_name}'s average JCT is {gap:.0%} lower"
        if best["slo_violations"] > mine["slo_violations"]:
            why += (
                f", at the cost of {best['slo_violations']} SLO violations to our {mine['slo_violations']}: it "
                "shares where a job's realized slowdown exceeds the SLO, which ours does not do at the "
                "pessimistic (p90) prediction"
            )
        elif best_name not in SHARING_POLICIES and best.get("preemptions", 0):
            why += (
                f": it preempts running jobs more freely ({best['preemptions']} preemptions to our "
                f"{mine.get('preemptions', 0)}; ours pauses a job only where its SLO still holds)"
            )
        elif best_name not in SHARING_POLICIES:
            why += ": on this load sharing does not pay for itself as predicted"
        else:
            why += f" with no more SLO violations ({best['slo_violations']}): its sharing choices were better here"
        lines.append(why + ".")
    for n in more_violations:
        lines.append(f"{n} has fewer SLO violations ({pol[n]['slo_violations']}) than ours.")
    return lines


def _unshared(ours: str, pol: dict, noise: bool) -> str:
    """The verdict's line where no job of ours shared a GPU: its average JCT against the best other policy's
    comes from job order and pauses (and noise), not from sharing, so it is neither credited nor blamed."""
    others = [n for n in pol if n != ours]
    what = "its job order, its pauses and run-to-run noise" if noise else "its job order and pauses"
    if not others:
        return f"No job shared a GPU under {ours} (each ran alone): nothing here measures sharing."
    ref = min(others, key=lambda n: pol[n]["avg_jct"])
    diff = pol[ours]["avg_jct"] / pol[ref]["avg_jct"] - 1 if pol[ref]["avg_jct"] > 0 else 0.0
    rel = (f"within {JCT_TOLERANCE:.0%} of" if abs(diff) <= JCT_TOLERANCE else
           f"{abs(diff):.0%} {'below' if diff < 0 else 'above'}")
    return (f"No job shared a GPU under {ours} (each ran alone): its average JCT, {rel} {ref}'s, comes from "
            f"{what}, not from sharing.")
