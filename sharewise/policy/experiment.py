"""``run_simulation``: the ``sharewise simulate`` pipeline (truth, predictions, trace, cluster, policies).

The CLI and the golden test both call ``run_simulation`` with a ``SimulationConfig``, so what the test pins
is exactly what a user runs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, DatasetError, SchemaError
from sharewise.policy import get_policy, policy_names
from sharewise.policy.simulator import Cluster, SimulationResult, seeded_speeds, simulate
from sharewise.policy.table import SlowdownTable
from sharewise.policy.traces import TRACE_FORMATS, Trace, detect_format, load_trace

GAVEL_NOTES = (
    "Measured pairs are single-GPU runs: a multi-GPU job that shares its GPUs uses its single-GPU slowdown "
    "against that partner (and runs at its slowest GPU).",
    "A pair measured as out of memory (oom) never shares; a pair never measured does not share either.",
)
# Digits kept in the JSON output, so the golden file does not depend on the last bits of a float.
_JSON_DECIMALS = 4


@dataclass(frozen=True)
class SimulationConfig:
    """Everything one ``sharewise simulate`` run needs, handed over whole.

    ``data`` is the truth dataset folder (measured pairs and profiles); ``predictions`` (a CSV or Parquet file
    of predictions) or ``model`` (a saved ``model.json``) replace the default out-of-fold predictions;
    ``oracle`` shows the policies the truth; ``observe`` lets them learn the measured slowdown of each pair
    once it has run. ``max_slowdown`` is the SLO on a job's realized slowdown.
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
    cross_node_slowdown: float = 1.0
    max_jobs: int | None = None
    observe: bool = False

    def __post_init__(self) -> None:
        if self.trace_format not in ("auto", *TRACE_FORMATS):
            raise ConfigError(
                f"trace format must be one of {['auto', *TRACE_FORMATS]}, got {self.trace_format!r}"
            )
        if not (math.isfinite(self.max_slowdown) and self.max_slowdown >= 1.0):
            raise ConfigError(f"--max-slowdown must be a number >= 1.0, got {self.max_slowdown}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ConfigError(f"--max-jobs must be >= 1, got {self.max_jobs}")
        if sum(bool(x) for x in (self.oracle, self.predictions, self.model)) > 1:
            raise ConfigError("choose at most one of --oracle, --predictions and --model")


@dataclass
class SimulationReport:
    """Results of every simulated policy, plus what the run assumed."""

    config: SimulationConfig
    n_jobs: int
    n_gpus: int
    results: dict[str, SimulationResult]
    view: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """Return the ``--json`` object.

        Example: ``{"jobs": 2000, "gpus": 160, "policies": {"sjf-bsbf": {"avg_jct": 345600.0,
        "p95_jct": 2.1e6, "makespan": 1.4e7, "avg_queue": 24000.0, "utilization": 0.34,
        "slo_violations": 336}}}``
        """
        return {
            "jobs": self.n_jobs,
            "gpus": self.n_gpus,
            "policies": {
                name: {
                    k: (round(v, _JSON_DECIMALS) if isinstance(v, float) else v) for k, v in r.metrics.items()
                }
                for name, r in self.results.items()
            },
        }


def run_simulation(config: SimulationConfig) -> SimulationReport:
    """Load truth, predictions, trace and cluster from ``config``; simulate each policy on the same trace.

    Returns
    -------
    SimulationReport
        ``results`` maps each policy name to its ``SimulationResult``; ``to_json()`` gives the CLI's JSON.
    """
    names = list(config.policies) or policy_names()
    policies = {name: get_policy(name) for name in names}
    profiles, pairs = _read_truth(config.data)
    truth = SlowdownTable.from_pairs(pairs, device_name=config.device_name, mode=config.mode)
    if not truth.allowed.any():
        raise DatasetError(
            f"dataset {config.data!r} holds no measured pair with status 'ok' on device "
            f"{truth.device_name!r}; the simulator needs measured slowdowns as its truth"
        )
    device = truth.device_name
    notes = list(GAVEL_NOTES)
    trace = _load_trace(config, profiles, truth, device)
    notes.extend(trace.notes)
    cluster = _cluster(config)
    view, view_note = _policy_view(config, profiles, pairs, truth, device)
    notes.append(view_note)
    if config.observe and view is not None:
        notes.append(
            "Observe: once two workloads have run side by side, policies see their measured slowdowns."
        )
    notes.append(
        "Policies know each job's exclusive run time (as SJF schedulers assume) and which pairs fit in "
        "memory; "
        f"SLO: realized slowdown <= {config.max_slowdown:g}."
    )
    results = {}
    for name, policy in policies.items():
        results[name] = simulate(
            trace,
            policy,
            truth,
            view,
            cluster=cluster,
            slo=config.max_slowdown,
            name=name,
            observe=config.observe and view is not None,
        )
    return SimulationReport(
        config=config,
        n_jobs=len(trace),
        n_gpus=cluster.n_gpus,
        results=results,
        view="oracle" if view is None else view.source,
        notes=notes,
    )


def plot_jct_cdf(report: SimulationReport, out_dir: str | os.PathLike) -> Path:
    """Write ``jct_cdf.png`` in ``out_dir``: the JCT CDF of every simulated policy; return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in report.results.items():
        jct = np.sort(r.jct) / 3600.0
        ax.step(jct, np.arange(1, jct.shape[0] + 1) / jct.shape[0], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF: {report.n_jobs} jobs on {report.n_gpus} GPUs ({report.view} slowdowns)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "jct_cdf.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    fmt = detect_format(config.trace) if config.trace_format == "auto" else config.trace_format
    throughputs = None
    workloads = None
    if fmt == "gavel":
        prof = _device_profiles(profiles, device, config.mode)
        # Several profiles of one workload (repeats): their median isolated throughput.
        throughputs = prof.groupby("workload")["throughput"].median().to_dict()
    if fmt == "philly":
        # Workloads that can share with at least one other: a draw of unshareable ones tells nothing.
        workloads = [w for i, w in enumerate(truth.workloads) if truth.allowed[i].any()]
    trace = load_trace(
        config.trace, format=fmt, throughputs=throughputs, workloads=workloads, seed=config.seed
    )
    if config.max_jobs is not None:
        trace = trace.head(config.max_jobs)
    return trace


def _cluster(config: SimulationConfig) -> Cluster:
    if config.speed_sigma and config.pm_scores:
        raise ConfigError("choose either --speed-sigma or --pm-scores for the GPU speed factors, not both")
    speeds = None
    if config.speed_sigma:
        speeds = seeded_speeds(config.n_gpus, config.speed_sigma, config.seed)
    elif config.pm_scores:
        speeds = pm_score_speeds(config.pm_scores, config.n_gpus)
    return Cluster(
        n_gpus=config.n_gpus,
        gpus_per_node=config.gpus_per_node,
        speeds=speeds,
        cross_node_slowdown=config.cross_node_slowdown,
    )


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


def _policy_view(
    config: SimulationConfig,
    profiles: pd.DataFrame,
    pairs: pd.DataFrame,
    truth: SlowdownTable,
    device: str,
) -> tuple[SlowdownTable | None, str]:
    if config.oracle:
        return None, "Oracle: policies see the measured slowdowns."
    if config.predictions:
        predictions = read_predictions(config.predictions)
        note = f"Policies see the predictions in {config.predictions}."
    else:
        candidates = _candidates(pairs, truth, device)
        if config.model:
            from sharewise.predictor import SlowdownRegressor, predict_pairs

            model = SlowdownRegressor.load(config.model)
            predictions = predict_pairs(model, profiles, candidates)
            note = f"Policies see predictions of model {config.model}."
        else:
            from sharewise.predictor import out_of_fold_predictions

            predictions = out_of_fold_predictions(
                profiles, pairs, group_by=config.group_by, candidates=candidates, holdout="self"
            )
            note = (
                f"Policies see out-of-fold predictions: each job's slowdown predicted by a model that never "
                f"saw that job's {config.group_by} (a brand-new model next to jobs the cluster knows)."
            )
    if "device_name" in predictions.columns and (predictions["device_name"].astype(str) == device).any():
        predictions = predictions[predictions["device_name"].astype(str) == device]
    view = SlowdownTable.from_predictions(predictions, device_name=None, workloads=truth.workloads)
    return view, note


def _candidates(pairs: pd.DataFrame, truth: SlowdownTable, device: str) -> pd.DataFrame:
    """The pairs the policies may ever ask about: those the truth lets share, once per unordered pair."""
    i, j = np.nonzero(np.triu(truth.allowed))
    names = np.array(truth.workloads, dtype=object)
    frame = pd.DataFrame({"workload_a": names[i], "workload_b": names[j], "device_name": device})
    modes = pairs.loc[pairs["device_name"].astype(str) == device, "mode"].unique()
    if len(modes) == 1:
        frame["mode"] = modes[0]
    return frame


def read_predictions(path: str | os.PathLike) -> pd.DataFrame:
    """Read a predictions table (CSV or Parquet) with the columns of ``predict_pairs``."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"predictions file {str(path)!r} does not exist")
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except Exception as exc:  # any reader failure is a bad input file, reported as such
        raise SchemaError(f"cannot read predictions {str(path)!r}: {str(exc).splitlines()[0]}") from None
