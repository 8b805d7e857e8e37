"""Growth checks: every path whose input a user scales costs about 10x at 10x the input, never 100x.

Each check runs its path at ``n`` and ``10 n`` in this process (``loadguard.check_growth``: CPU time on one
thread, best of interleaved repeats) and fails above 20x: linear work grows about 10x, an O(n^2) or
O(jobs x GPUs) path about 100x. ``n`` is sized so that a quadratic part costing about an eighth of the linear
work at ``n`` already fails, and each check was seen to fail once its path was made quadratic on purpose
(a per-job scan of every GPU, a per-call pass over every job, a per-row scan of every row: the sabotages are
listed in ``docs/benchmarks/growth.md``). Sizes stay inside one cache regime: a vectorized pass whose arrays move
from L2 to L3 costs up to 2x more per element (pm-first's call grew 18-20x from 20,000 to 200,000 queued jobs,
all of it linear work), which would eat the margin. ``benchmarks/bench_growth.py`` prints the measured ratios.
Jobs and GPUs grow together where a user grows both (``recommend``, ``simulate``): a cost of jobs x GPUs is
exactly what such a check is for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from loadguard import check_growth

from sharewise.datasets.synthetic import synthetic_tables
from sharewise.engine.table import SlowdownTable
from sharewise.planner.pairing import plan_pairs
from sharewise.policy import get_policy, policy_names

# -- recommend: jobs and GPUs --------------------------------------------------------------------------------


def _pairing_table(n_types: int = 6, seed: int = 0) -> SlowdownTable:
    """Slowdowns among a few workload types, most pairs worth sharing: the pairing's integer program stays a
    fixed, small cost, and the queue's jobs are what grows."""
    rng = np.random.default_rng(seed)
    p50 = rng.uniform(1.1, 1.9, (n_types, n_types))
    names = [f"w{i}" for i in range(n_types)]
    return SlowdownTable(names, p50 * 0.9, p50, p50 * 1.05, np.ones((n_types, n_types), bool))


def _queue(n_jobs: int, table: SlowdownTable, multi: float, rng: np.random.Generator) -> pd.DataFrame:
    gpus = np.where(rng.random(n_jobs) < multi, rng.choice([2, 4, 8], n_jobs), 1)
    return pd.DataFrame(
        {
            "job_id": [f"q{i}" for i in range(n_jobs)],
            "workload": rng.choice(list(table.workloads), n_jobs),
            "gpus": gpus,
            "remaining_s": rng.exponential(3600.0, n_jobs).round(1),
        }
    )


def _cluster(n_gpus: int, table: SlowdownTable, rng: np.random.Generator) -> pd.DataFrame:
    """``n_gpus`` GPUs, 8 per node: one in 16 holds one job (a partner to join), one in 16 two, the rest free."""
    g = np.arange(n_gpus)
    held = np.where(g % 16 == 0, 1, np.where(g % 16 == 8, 2, 0))
    rows = np.repeat(g, np.maximum(held, 1))
    slot = np.concatenate([np.arange(max(h, 1)) for h in held])
    busy = held[rows] > 0
    return pd.DataFrame(
        {
            "gpu": [f"g{x}" for x in rows],
            "node": [f"n{x // 8}" for x in rows],
            "job_id": np.where(busy, [f"r{x}-{s}" for x, s in zip(rows, slot, strict=True)], ""),
            "workload": np.where(busy, rng.choice(list(table.workloads), rows.shape[0]), ""),
        }
    )


def test_recommend_grows_linearly_in_jobs_and_gpus_on_free_gpus():
    """One and a half times as many jobs as free GPUs, both scaled: a third of the jobs pair up, each GPU is
    handed out once. The greedy pairing: the integer program is over workload types, not jobs, but HiGHS takes
    5-250 ms on it depending on the counts alone, which would blur the ratio either way."""
    table = _pairing_table()

    def prepare(n_gpus):
        queue = _queue(3 * n_gpus // 2, table, 0.0, np.random.default_rng(n_gpus))
        return lambda: plan_pairs(queue, table, gpus=n_gpus, method="greedy")

    check_growth("recommend (free GPUs)", prepare, 3_000, "GPUs (and 1.5x the jobs)")


def test_recommend_grows_linearly_in_jobs_and_gpus_on_a_cluster():
    """A cluster of 8-GPU nodes with resident jobs, twice as many jobs as GPUs, 5% of them multi-GPU: blocks of
    GPUs, joins and pairs (greedy, as above)."""
    table = _pairing_table()

    def prepare(n_gpus):
        rng = np.random.default_rng(n_gpus)
        queue, cluster = _queue(2 * n_gpus, table, 0.05, rng), _cluster(n_gpus, table, rng)
        return lambda: plan_pairs(queue, table, cluster=cluster, method="greedy")

    check_growth("recommend (cluster)", prepare, 2_500, "GPUs (and twice the jobs)")


# -- simulate: jobs and GPUs ---------------------------------------------------------------------------------


def _simulation_tables(n_types: int = 6, seed: int = 0) -> tuple[SlowdownTable, SlowdownTable]:
    """A truth and a view that predicts it with some error: every policy's whole path runs."""
    rng = np.random.default_rng(seed)
    p50 = rng.uniform(1.1, 2.2, (n_types, n_types))
    names = [f"w{i}" for i in range(n_types)]
    allowed = np.ones((n_types, n_types), bool)
    truth = SlowdownTable(names, p50, p50, p50, allowed)
    view = SlowdownTable(names, p50 * 0.9, p50 * 1.03, p50 * 1.25, allowed)
    return truth, view


def test_simulate_grows_linearly_in_jobs_and_gpus():
    """Jobs and GPUs scaled together (arrivals 10x as dense on 10x the GPUs, load 0.8 so the queue stays
    stationary): every event costs about the same, whatever the number of jobs already seen or GPUs."""
    from sharewise.datasets.traces.synthetic import synthetic_trace
    from sharewise.engine.simulator import Cluster, simulate

    truth, view = _simulation_tables()

    def prepare(n_gpus):
        trace = synthetic_trace(truth.workloads, 12 * n_gpus, n_gpus, seed=1, load=0.8)
        cluster = Cluster(n_gpus=n_gpus, gpus_per_node=8)
        return lambda: simulate(trace, get_policy("sharewise"), truth, view, cluster=cluster)

    check_growth("simulate (sharewise)", prepare, 48, "GPUs (and 12 jobs per GPU)", repeats=2)


# -- the policy call: queue length, every registered policy --------------------------------------------------


def _policy_state(n_queued: int, n_gpus: int = 64, seed: int = 0):
    """A cluster of 8-GPU nodes, a quarter of its GPUs free, a quarter holding one job (partners to join), the
    rest two; and ``n_queued`` waiting jobs (some multi-GPU, some preempted with attained service)."""
    from sharewise.engine.policy_types import ClusterState, Queue

    rng = np.random.default_rng(seed)
    truth, view = _simulation_tables(seed=seed)
    held = np.array([0 if g % 4 == 0 else 1 if g % 4 == 1 else 2 for g in range(n_gpus)])
    n_running = int(held.sum())
    n_jobs = n_running + n_queued
    resident = np.full((n_gpus, 2), -1, dtype=np.int64)
    slots = [(g, s) for g in range(n_gpus) for s in range(held[g])]
    for j, (g, s) in enumerate(slots):
        resident[g, s] = j
    workload = rng.integers(0, len(truth), n_jobs)
    remaining = rng.uniform(60, 36_000, n_jobs)
    attained = np.where(rng.random(n_jobs) < 0.2, rng.uniform(0, 8_000, n_jobs), 0.0)
    cluster = ClusterState(
        resident=resident,
        node=np.arange(n_gpus) // 8,
        speed=rng.uniform(0.8, 1.0, n_gpus),
        job_remaining=remaining,
        job_workload=workload,
        job_ngpus=np.ones(n_jobs, dtype=np.int64),
        job_start=np.where(np.arange(n_jobs) < n_running, 0.0, np.nan),
        job_work=remaining * 1.5,
        cross_node_slowdown=1.1,
        job_attained=attained,
        job_arrival=np.zeros(n_jobs),
        placed_at=np.where(held > 0, 0.0, np.nan),
    )
    queued = np.arange(n_running, n_jobs)
    queue = Queue(
        job=queued,
        arrival=np.sort(rng.uniform(0, 100, n_queued)),
        gpus=rng.choice([1, 1, 1, 1, 2, 4], n_queued),
        remaining=remaining[queued],
        workload=workload[queued],
        attained=attained[queued],
    )
    return queue, cluster, view


@pytest.mark.parametrize("name", policy_names())
def test_policy_call_grows_linearly_in_queue_length(name):
    policy = get_policy(name)

    def prepare(n_queued):
        queue, cluster, view = _policy_state(n_queued)
        return lambda: policy(queue, cluster, view, 3_600.0)

    check_growth(f"policy call ({name})", prepare, 2_000, "queued jobs")


# -- predict and train: pairs and rows -----------------------------------------------------------------------


#: A dozen measured features (with f_busy_frac and f_probe_slowdown): per-row work is what grows, and the
#: checks stay fast.
FEATURES = (
    "f_flops_per_step",
    "f_param_bytes",
    "f_activation_bytes",
    "f_kernels_per_step",
    "f_launch_rate",
    "f_mem_peak_allocated_bytes",
    "f_achieved_flops",
    "f_kernel_mean_us",
    "f_probe_pressure",
)


def _predictor_tables(n_workloads: int, n_pairs: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Profiles of ``n_workloads`` workloads on one device and ``n_pairs`` measured pairs drawn among them."""
    return synthetic_tables(n_workloads, n_pairs, features=FEATURES)


def test_predict_grows_linearly_in_pairs():
    """``predict_pairs`` on distinct pairs among 400 workloads: features, the model (``predict_matrix``), the
    shift, the output table."""
    from sharewise.predictor import predict_pairs, train_model

    profiles, pairs = _predictor_tables(400, 400)
    model = train_model(profiles, pairs, n_estimators=30, n_jobs=1)

    def prepare(n_pairs):
        rng = np.random.default_rng(n_pairs)
        names = profiles["workload"].to_numpy()
        query = pd.DataFrame(
            {"workload_a": rng.choice(names, n_pairs), "workload_b": rng.choice(names, n_pairs), "device_name": "gpu"}
        )
        return lambda: predict_pairs(model, profiles, query)

    check_growth("predict_pairs / predict_matrix", prepare, 8_000, "pairs", repeats=2)


def test_train_grows_linearly_in_rows():
    """``train_model``: joining pairs to profiles, the featurizer's fitted state, XGBoost on both directions."""
    from sharewise.predictor import train_model

    profiles, pairs = _predictor_tables(400, 10_000)

    def prepare(n_pairs):
        head = pairs.head(n_pairs)
        return lambda: train_model(profiles, head, n_estimators=4, n_jobs=1)

    check_growth("train", prepare, 600, "pairs (two rows each)", repeats=2)


# -- profile table reads: files ------------------------------------------------------------------------------


def test_profile_reads_grow_linearly_in_files(tmp_path):
    """``Dataset.read_profiles`` over a folder of one Parquet file per measurement batch (written as the store
    writes them, without its fsync per file, which would make the set-up the slow part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sharewise.datasets import Dataset
    from sharewise.datasets.schema import validate_profiles

    profiles, _ = _predictor_tables(200, 0)
    table = pa.Table.from_pandas(validate_profiles(profiles, "batch"), preserve_index=False)
    names = profiles["workload"].to_numpy(dtype=object)

    def prepare(n_files):
        ds = Dataset(tmp_path / f"d{n_files}")
        ds.profiles_dir.mkdir(parents=True)
        for i in range(n_files):
            batch = table.set_column(table.schema.get_field_index("workload"), "workload", pa.array(names + f"-{i}"))
            pq.write_table(batch, ds.profiles_dir / f"p-{i:05d}.parquet")
        return ds.read_profiles

    check_growth("read_profiles", prepare, 12, "files (200 rows each)")
