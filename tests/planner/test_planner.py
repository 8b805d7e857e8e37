"""``recommend``'s planner: pairs within the SLO, memory, residents, exact against greedy, queue errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from policy_cases import WORKLOADS, table

from sharewise.errors import ConfigError, TraceError, UnknownWorkloadError
from sharewise.planner.pairing import plan_pairs
from sharewise.predictor.memory import memory_fit


# ---- recommend -------------------------------------------------------------------------------------
def _queue(workloads, remaining=None, gpus=None):
    df = pd.DataFrame({"job_id": [f"j{i}" for i in range(len(workloads))], "workload": workloads})
    if remaining is not None:
        df["remaining_s"] = remaining
    if gpus is not None:
        df["gpus"] = gpus
    return df


def test_recommend_pairs_only_within_max_slowdown():
    p50 = np.array([[1.3, 1.2], [1.25, 1.4]])
    p90 = np.array([[1.6, 1.5], [2.6, 1.7]])  # b next to a: p90 2.6
    plan = plan_pairs(_queue(["a", "b", "a", "b"]), table(p50, p90), gpus=2, max_slowdown=2.0)
    kinds = sorted(tuple(p["workloads"]) for p in plan.placements)
    assert kinds == [("a", "a"), ("b", "b")]  # a with b would break the SLO at p90
    plan = plan_pairs(_queue(["a", "b", "a", "b"]), table(p50, p90), gpus=2, max_slowdown=3.0)
    assert sorted(tuple(p["workloads"]) for p in plan.placements) == [("a", "b"), ("a", "b")]
    assert all(p["kind"] == "pair" for p in plan.placements) and not plan.waiting
    assert plan.work_rate == pytest.approx(2 * (1 / 1.2 + 1 / 1.25))
    assert plan.exclusive_work_rate == pytest.approx(2.0)


def test_recommend_leaves_jobs_alone_when_gpus_suffice_and_respects_memory():
    p50 = np.full((2, 2), 1.1)
    plan = plan_pairs(_queue(["a", "b"]), table(p50), gpus=2)
    assert [p["kind"] for p in plan.placements] == ["alone", "alone"]
    profiles = pd.DataFrame(
        {"workload": ["a", "b"], "f_mem_peak_reserved_bytes": [6e9, 3e9], "f_device_mem_bytes": [10e9, 10e9]}
    )
    fits, note = memory_fit(profiles, ["a", "b"])
    assert fits.tolist() == [[False, True], [True, True]] and "GiB" in note
    plan = plan_pairs(_queue(["a", "a", "b"]), table(p50).restricted(fits), gpus=2)
    assert sorted(tuple(p["workloads"]) for p in plan.placements) == [("a",), ("a", "b")]


def test_recommend_joins_residents_and_keeps_multi_gpu_jobs_alone():
    p50 = np.array([[1.2, 1.1], [1.15, 1.3]])
    cluster = pd.DataFrame(
        {"gpu": ["g0", "g1", "g2", "g2"], "job_id": ["", "r1", "r2", "r3"], "workload": ["", "b", "a", "a"]}
    )
    plan = plan_pairs(_queue(["a", "a", "b"], gpus=[1, 1, 2]), table(p50), cluster=cluster)
    by_kind = {p["kind"]: p for p in plan.placements}
    assert by_kind["join"]["gpus"] == ["g1"] and by_kind["join"]["jobs"][1] == "r1"
    assert by_kind["alone"]["gpus"] == ["g0"]
    assert {by_kind["alone"]["jobs"][0], by_kind["join"]["jobs"][0]} == {"j0", "j1"}
    assert plan.waiting == ["j2"]  # the 2-GPU job finds only one free GPU
    with pytest.raises(TraceError, match="third job"):
        plan_pairs(_queue(["a"]), table(p50), cluster=pd.concat([cluster, cluster.tail(1)]))


def test_recommend_exact_and_greedy_agree_on_a_small_case_and_auto_says_which():
    rng = np.random.default_rng(4)
    p50 = rng.uniform(1.05, 1.9, (3, 3))
    queue = _queue(list(rng.choice(WORKLOADS, 12)), remaining=rng.uniform(10, 100, 12))
    exact = plan_pairs(queue, table(p50), gpus=5, method="exact")
    greedy = plan_pairs(queue, table(p50), gpus=5, method="greedy")
    assert exact.method == "exact" and greedy.method == "greedy"
    assert greedy.work_rate <= exact.work_rate + 1e-9
    assert greedy.work_rate >= 0.9 * exact.work_rate
    simple = plan_pairs(_queue(["a", "a"]), table(np.full((1, 1), 1.25)), gpus=1, method="greedy")
    assert simple.work_rate == pytest.approx(1.6)
    auto = plan_pairs(queue, table(p50), gpus=5, exact_max_variables=3)
    assert auto.method == "greedy" and "exceed the exact limit" in auto.method_note
    # Within a workload type, the job with less remaining time goes first.
    one = plan_pairs(_queue(["a", "a"], remaining=[50, 5]), table(np.full((1, 1), 3.0)), gpus=1)
    assert one.placements[0]["jobs"] == ["j1"] and one.waiting == ["j0"]


def test_recommend_queue_errors_name_the_line():
    tab = table(np.full((1, 1), 1.2))
    with pytest.raises(TraceError, match="line 3: column 'gpus'"):
        plan_pairs(_queue(["a", "a"], gpus=["1", "x"]), tab, gpus=1)
    with pytest.raises(TraceError, match="line 3: job_id 'j0' appears twice"):
        plan_pairs(pd.DataFrame({"job_id": ["j0", "j0"], "workload": ["a", "a"]}), tab, gpus=1)
    with pytest.raises(UnknownWorkloadError, match="zeta"):
        plan_pairs(_queue(["zeta"]), tab, gpus=1)
    with pytest.raises(ConfigError, match="--gpus N"):
        plan_pairs(_queue(["a"]), tab)


