"""``recommend``'s placement step against its old, quadratic form, kept here as the oracle.

The old ``pairing._assign`` took each job's GPUs with one ``packed_block`` call (a scan of every GPU: 50,000
scans for 100,000 jobs on 50,000 GPUs, 11.5 of 15 s) and each job of a type by slicing the type's list. The
package now hands GPUs out through ``FreeGpus`` and consumes jobs through cursors; these tests hold it to the
same placements, in the same order, as the oracle below (the old code, unchanged but for its name).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sharewise.engine.free_gpus import FreeGpus, packed_block
from sharewise.engine.table import SlowdownTable
from sharewise.planner import pairing
from sharewise.planner.jobs import normalize_cluster, normalize_queue


def assign_reference(p, counts, jobs, layout, table, free_gpus, host_gpus):
    """The old ``pairing._assign``: one ``packed_block`` scan per job (O(jobs x GPUs)); the oracle."""
    order = jobs.sort_values(["remaining_s", "pos"], na_position="last", kind="stable")
    by_type: dict[tuple[int, int], list[int]] = {}
    for pos, w, g in zip(order["pos"].tolist(), order["wid"].tolist(), order["gpus"].tolist(), strict=True):
        by_type.setdefault((int(w), int(g)), []).append(pos)
    ids = jobs["job_id"].tolist()
    free = np.zeros(len(layout.gpu_ids), dtype=bool)
    free[free_gpus] = True
    hosts_of: dict[int, list[int]] = {}
    for g in host_gpus:
        hosts_of.setdefault(layout.residents[g][0][1], []).append(g)
    placed: set[int] = set()
    out: list[dict] = []

    def take(w, g, n):
        got = by_type[(w, g)][:n]
        by_type[(w, g)] = by_type[(w, g)][n:]
        placed.update(got)
        return got

    def free_block(n):
        chosen = packed_block(free, layout.node, n)
        free[chosen] = False
        return [int(x) for x in chosen]

    def alone(gpus, job, workload, k):
        return {"gpus": gpus, "jobs": [job], "workloads": [workload], "kind": "alone", "p50": [1.0],
                "p90": [1.0], "gain": 0.0, "rate": float(k)}

    def shared(kind, gpus, jobs_, a, b):
        p50 = [float(table.p50[a, b]), float(table.p50[b, a])]
        gain = 1.0 / p50[0] + 1.0 / p50[1] - 1.0
        return {"gpus": gpus, "jobs": jobs_, "workloads": [table.workloads[a], table.workloads[b]], "kind": kind,
                "p50": [round(x, 4) for x in p50],
                "p90": [round(float(table.p90[a, b]), 4), round(float(table.p90[b, a]), 4)],
                "gain": round(gain, 4), "rate": 1.0 + gain if kind == "pair" else gain}

    gid = layout.gpu_ids
    for m, (w, g) in enumerate(p.multi):
        for pos in take(w, g, int(counts["alonem"][m])):
            out.append(alone([gid[x] for x in free_block(g)], ids[pos], table.workloads[w], g))
    for e in np.argsort(-p.pair_v, kind="stable").tolist():
        a, b = int(p.t1[p.pair_a[e]]), int(p.t1[p.pair_b[e]])
        for _ in range(int(counts["pairs"][e])):
            ja, jb = take(a, 1, 1)[0], take(b, 1, 1)[0]
            out.append(shared("pair", [gid[x] for x in free_block(1)], [ids[ja], ids[jb]], a, b))
    for e in np.argsort(-p.join_v, kind="stable").tolist():
        a, r = int(p.t1[p.join_a[e]]), int(p.tr[p.join_r[e]])
        for _ in range(int(counts["joins"][e])):
            ja = take(a, 1, 1)[0]
            g = hosts_of[r].pop(0)
            out.append(shared("join", [gid[g]], [ids[ja], layout.residents[g][0][0]], a, r))
    for t, w in enumerate(p.t1.tolist()):
        for pos in take(int(w), 1, int(counts["alone1"][t])):
            out.append(alone([gid[x] for x in free_block(1)], ids[pos], table.workloads[w], 1))
    waiting = [ids[i] for i in range(len(ids)) if i not in placed]
    return out, waiting


def _table(n_types: int, seed: int) -> SlowdownTable:
    rng = np.random.default_rng(seed)
    p50 = rng.uniform(1.1, 2.2, (n_types, n_types))
    allowed = rng.random((n_types, n_types)) < 0.85
    names = [f"w{i}" for i in range(n_types)]
    return SlowdownTable(names, p50 * 0.9, p50, p50 * 1.08, allowed)


def _queue(n_jobs: int, table: SlowdownTable, multi: float, rng) -> pd.DataFrame:
    remaining = rng.exponential(3600.0, n_jobs).round(0)
    remaining[rng.random(n_jobs) < 0.2] = np.nan  # unknown: placed after the known ones of their type
    return pd.DataFrame(
        {
            "job_id": [f"q{i}" for i in range(n_jobs)],
            "workload": rng.choice(list(table.workloads), n_jobs),
            "gpus": np.where(rng.random(n_jobs) < multi, rng.choice([2, 3, 4, 8], n_jobs), 1),
            "remaining_s": remaining,
        }
    )


def _cluster(n_gpus: int, table: SlowdownTable, rng, interleaved: bool) -> pd.DataFrame:
    """Nodes of uneven size (GPUs listed node after node, or interleaved), a third of the GPUs holding jobs."""
    sizes = rng.choice([2, 4, 8], n_gpus)
    node = np.repeat(np.arange(n_gpus), sizes)[:n_gpus]
    if interleaved:
        node = rng.permutation(node)
    rows = []
    for g in range(n_gpus):
        residents = rng.choice([0, 0, 0, 0, 1, 2])
        base = {"gpu": f"g{g}", "node": f"n{node[g]}"}
        if residents == 0:
            rows.append({**base, "job_id": "", "workload": ""})
        for r in range(residents):
            rows.append({**base, "job_id": f"r{g}-{r}", "workload": rng.choice(table.workloads)})
    return pd.DataFrame(rows)


def _oracle_plan(queue, table, gpus=None, cluster=None, method="auto"):
    """The placements and waiting jobs the old assignment makes of the counts ``plan_pairs`` solves for."""
    jobs = normalize_queue(queue, table)
    layout = normalize_cluster(gpus, cluster, table)
    free_gpus = [g for g, r in enumerate(layout.residents) if not r]
    host_gpus = [g for g, r in enumerate(layout.residents) if len(r) == 1 and r[0][2] == 1]
    problem = pairing._problem(jobs, layout, table, host_gpus, len(free_gpus), 2.0)
    counts = pairing._solve_exact(problem) if method != "greedy" else None
    counts = counts if counts is not None else pairing._solve_greedy(problem)
    return assign_reference(problem, counts, jobs, layout, table, free_gpus, host_gpus)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("method", ["auto", "greedy"])
def test_free_gpus_get_the_placements_of_the_old_assignment(seed, method):
    rng = np.random.default_rng(seed)
    table = _table(7, seed)
    queue = _queue(2_400, table, 0.0, rng)
    plan = pairing.plan_pairs(queue, table, gpus=1_400, method=method)
    placements, waiting = _oracle_plan(queue, table, gpus=1_400, method=method)
    assert plan.placements == placements and plan.waiting == waiting
    assert {p["kind"] for p in placements} == {"pair", "alone"}


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_cluster_gets_the_placements_of_the_old_assignment(seed, interleaved):
    """Multi-GPU jobs on nodes of uneven size (blocks that fit a node, and blocks spread over the fullest-free
    nodes once none fits), joins next to residents, pairs and lone jobs."""
    rng = np.random.default_rng(seed)
    table = _table(6, seed)
    cluster = _cluster(600, table, rng, interleaved)
    queue = _queue(900, table, 0.15, rng)
    plan = pairing.plan_pairs(queue, table, cluster=cluster)
    placements, waiting = _oracle_plan(queue, table, cluster=cluster)
    assert plan.placements == placements and plan.waiting == waiting
    kinds = {p["kind"] for p in placements}
    assert {"pair", "join", "alone"} <= kinds
    assert any(len(p["gpus"]) > 1 for p in placements)


def test_free_gpus_takes_what_packed_block_picks_block_after_block():
    """``FreeGpus.take`` (and ``take_ones``) against repeated ``packed_block`` on a shrinking mask: random
    clusters with nodes of uneven size, listed in order or interleaved, blocks of 1 to 8 GPUs."""
    rng = np.random.default_rng(0)
    for _ in range(400):
        n_gpus = int(rng.integers(0, 50))
        node = np.arange(n_gpus) // int(rng.integers(1, 9))
        if rng.random() < 0.4:
            node = rng.integers(0, max(1, n_gpus // 3), n_gpus)
        node = node.astype(np.int64)
        free = rng.random(n_gpus) < rng.uniform(0.2, 1.0)
        picker, mask = FreeGpus(free, node), free.copy()
        for _ in range(20):
            k = int(rng.choice([1, 1, 2, 3, 4, 8]))
            want = packed_block(mask, node, k)
            if rng.random() < 0.2:  # several single GPUs at once
                m = int(rng.integers(1, 6))
                got = picker.take_ones(m)
                wanted = []
                for _ in range(m):
                    one = packed_block(mask, node, 1)
                    if one is None:
                        break
                    wanted.append(int(one[0]))
                    mask[one] = False
                assert got == wanted
                continue
            got = picker.take(k)
            if want is None:
                assert got is None and picker.left == int(mask.sum())
                continue
            assert got == [int(x) for x in want]
            mask[want] = False
        assert picker.left == int(mask.sum())


def test_free_gpus_literal():
    # Node 1 has one free GPU (3): the fewest, so a single GPU comes from it; then node 0's two make a block.
    picker = FreeGpus(np.array([True, True, False, True]), np.array([0, 0, 1, 1]))
    assert picker.take(1) == [3] and picker.take(2) == [0, 1] and picker.take(1) is None and picker.take(0) == []
