"""The inputs of ``recommend``: a queue of jobs and a cluster layout, validated into arrays over workload ids.

Both come as tables (read from CSV by the caller); every problem is a ``TraceError`` naming the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, TraceError

QUEUE_COLUMNS = ("job_id", "workload")
CLUSTER_COLUMNS = ("gpu",)


@dataclass
class ClusterLayout:
    """GPUs (ids as given), their node codes, and per GPU the resident jobs as (job id, workload id, GPUs)."""

    gpu_ids: list[str]
    node: np.ndarray
    # Per GPU: (job id, workload id, GPUs of that job); GPUs without residents may share one empty tuple.
    residents: list[Sequence[tuple[str, int, int]]]


def normalize_queue(queue: pd.DataFrame, table: SlowdownTable) -> pd.DataFrame:
    missing = [c for c in QUEUE_COLUMNS if c not in queue.columns]
    if missing:
        raise TraceError(
            f"queue: missing column(s) {missing}; expected {list(QUEUE_COLUMNS)} and optionally gpus, "
            "remaining_s"
        )
    job_id = queue["job_id"].astype(str).str.strip()
    workload = queue["workload"].astype(str).str.strip()
    # Job ids become Python strings (the placements name them); workloads stay Arrow text, read once per name.
    jobs = pd.DataFrame({"job_id": job_id.to_numpy(dtype=object), "workload": workload.array})
    gpus = _numbers(queue["gpus"]) if "gpus" in queue.columns else np.ones(len(queue))
    bad = np.isnan(gpus) | (gpus < 1) | (gpus % 1 != 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise TraceError(
            f"queue line {row + 2}: column 'gpus' must be a whole number >= 1, got "
            f"{queue['gpus'].iloc[row]!r}"
        )
    jobs["gpus"] = gpus.astype(np.int64)
    if "remaining_s" in queue.columns:
        rem = _numbers(queue["remaining_s"])
        given = queue["remaining_s"].notna().to_numpy(copy=True)
        if not pd.api.types.is_numeric_dtype(queue["remaining_s"]):  # text: an empty cell is not given either
            given &= queue["remaining_s"].astype(str).str.strip().ne("").to_numpy()
        bad = given & (~np.isfinite(rem) | (rem < 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise TraceError(
                f"queue line {row + 2}: column 'remaining_s' must be a number >= 0 (or empty), got "
                f"{queue['remaining_s'].iloc[row]!r}"
            )
        jobs["remaining_s"] = np.where(given, rem, np.nan)
    else:
        jobs["remaining_s"] = np.nan
    dup = job_id.duplicated().to_numpy()  # on the text column as read (Arrow-backed: hashed without Python)
    if dup.any():
        row = int(np.argmax(dup))
        raise TraceError(f"queue line {row + 2}: job_id {jobs['job_id'].iloc[row]!r} appears twice")
    # The table looks up each distinct workload once; an empty one goes the whole column's way, which names its line.
    codes, uniques = pd.factorize(workload)
    if (codes < 0).any():
        jobs["wid"] = table.ids(jobs["workload"], what="queued workload")
    else:
        jobs["wid"] = table.ids(list(uniques), what="queued workload")[codes]
    jobs["pos"] = np.arange(len(jobs))
    return jobs


def _numbers(column: pd.Series) -> np.ndarray:
    """``pd.to_numeric(column, errors="coerce")`` as floats, each distinct value parsed once (a queue of 100,000
    jobs asks for a handful of GPU counts). The distinct values are parsed together, with a missing one if the
    column has any, so ``to_numeric`` sees what it would see in the whole column: the same numbers come out."""
    if pd.api.types.is_numeric_dtype(column):
        return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    codes, uniques = pd.factorize(column, use_na_sentinel=False)
    return pd.to_numeric(pd.Series(uniques, dtype=column.dtype), errors="coerce").to_numpy(dtype=float)[codes]


def normalize_cluster(gpus: int | None, cluster: pd.DataFrame | None, table: SlowdownTable) -> ClusterLayout:
    if (gpus is None) == (cluster is None):
        raise ConfigError("give the GPUs either as a count (--gpus N) or as a cluster file (--cluster FILE)")
    if cluster is None:
        if gpus < 0:
            raise ConfigError(f"--gpus must be >= 0, got {gpus}")
        return ClusterLayout([str(g) for g in range(gpus)], np.zeros(gpus, dtype=np.int64), [()] * gpus)
    if "gpu" not in cluster.columns:
        raise TraceError(
            f"cluster: missing column 'gpu'; expected {list(CLUSTER_COLUMNS)} and optionally node, job_id, "
            "workload"
        )
    text = {
        c: cluster[c].fillna("").astype(str).str.strip().tolist()
        if c in cluster.columns
        else [""] * len(cluster)
        for c in ("gpu", "node", "job_id", "workload")
    }
    gpu_ids: list[str] = []
    nodes: list[str] = []
    residents: dict[str, list[tuple[str, str, int]]] = {}
    for i, g in enumerate(text["gpu"]):
        if not g:
            raise TraceError(f"cluster line {i + 2}: column 'gpu' is empty")
        if g not in residents:
            gpu_ids.append(g)
            nodes.append(text["node"][i])
            residents[g] = []
        job, w = text["job_id"][i], text["workload"][i]
        if bool(job) != bool(w):
            raise TraceError(
                f"cluster line {i + 2}: give both job_id and workload of a resident job, or neither"
            )
        if job:
            residents[g].append((job, w, i + 2))
            if len(residents[g]) > 2:
                raise TraceError(
                    f"cluster line {i + 2}: GPU {g!r} lists a third job; at most two jobs share a GPU"
                )
    span: dict[str, int] = {}
    for res in residents.values():
        for job, _, _ in res:
            span[job] = span.get(job, 0) + 1
    all_w = [w for res in residents.values() for _, w, _ in res]
    ids = dict(zip(all_w, table.ids(all_w, what="resident workload").tolist(), strict=True)) if all_w else {}
    node_codes = pd.factorize(pd.Series(nodes))[0].astype(np.int64)
    return ClusterLayout(
        gpu_ids,
        node_codes,
        [[(job, ids[w], span[job]) for job, w, _ in residents[g]] for g in gpu_ids],
    )


