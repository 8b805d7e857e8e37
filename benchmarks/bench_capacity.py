"""Benchmark: capacity that follows the data (issue 47): each structure, the chosen one and the baselines side by side.

Every number is a grouped cross-validation (``sharewise evaluate``'s): each workload (or model family, or device)
held out in turn, every candidate on the same folds, the feature state fitted on each fold's training rows.

1. **Structures**: for each dataset, the nested choice (``auto``: each fold's structure chosen by an inner grouped
   CV on that fold's training rows) next to each structure fixed (``offset``: the probe offset alone;
   ``structured``: plus the partner's pressure and measured effect; ``linear``: the probe and a ridge regression;
   ``trees``: ``structured`` plus XGBoost's trees) and the
   baselines (median, linear, util_sum), with p10-p90 coverage. Datasets: the shipped CPU ``reference``, the
   shipped ``reference-h200`` (timeslice), and Gavel's K80, P100 and V100 (family held out, each device alone,
   all devices together, and each device held out).
2. **Budget**: ``reference-h200`` when each held-out workload reveals 2 of its pairs (``evaluate --budget 2``).
3. **The partner**: the same evaluations with every ``partner_*``/``pair_*`` feature blanked (the model sees the
   job alone): what the partner is worth, in MAPE points.
4. **Pooling**: a user's small campaign (3 workloads, every pair among them) with one of their workloads held
   out, trained on their rows alone against their rows pooled with the shipped rows of the other workloads on
   the same device; every 3-workload campaign of the dataset, each of its workloads held out in turn.

    .venv/bin/python benchmarks/bench_capacity.py [--only structures,budget,partner,pooling] [--json out.json]

Deterministic (seeded XGBoost, grouped folds): no timing, so it may run beside other work.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets import read_datasets
from sharewise.datasets.public import public_data_root
from sharewise.predictor import ordered_rows
from sharewise.predictor.budget import evaluate_budget
from sharewise.predictor.evaluation import cross_validate, summarize
from sharewise.predictor.pair_features import PairRows

GAVEL_FILE = public_data_root() / "gavel" / "simulation_throughputs.json"
STRUCTURES = ("auto", "offset", "structured", "linear", "trees")


def gavel(work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    from sharewise.datasets.importers.gavel import import_gavel

    folder = work / "gavel"
    if not (folder / "pairs").is_dir():
        import_gavel(GAVEL_FILE, folder)
    return read_datasets([str(folder)])


def settings(work: Path) -> list[tuple[str, pd.DataFrame, pd.DataFrame, str]]:
    """(name, profiles, ok pairs, held-out unit) of every dataset the benchmark scores."""
    out = []
    for name in ("reference", "reference-h200"):
        profiles, pairs = read_datasets([name])
        pairs = pairs[pairs["status"] == "ok"]
        for mode, part in pairs.groupby("mode"):
            out.append((f"{name} ({mode})", profiles[profiles["mode"] == mode], part, "workload"))
    profiles, pairs = gavel(work)
    pairs = pairs[pairs["status"] == "ok"]
    for device, part in pairs.groupby("device_name"):
        out.append((f"gavel {device}", profiles[profiles["device_name"] == device], part, "family"))
    out.append(("gavel, all devices", profiles, pairs, "family"))
    out.append(("gavel, device held out", profiles, pairs, "device"))
    return out


def blank_partner(rows: PairRows) -> PairRows:
    """``rows`` with every partner and pair feature blanked (NaN: the model sees the job alone)."""
    X = rows.X.copy()
    cols = [c for c in X.columns if c.startswith(("partner_", "pair_"))]
    X[cols] = np.nan
    return PairRows(X=X, y=rows.y, meta=rows.meta)


def structures(work: Path) -> list[dict]:
    results = []
    for name, profiles, pairs, group_by in settings(work):
        rows = ordered_rows(profiles, pairs)
        entry = {"dataset": name, "group_by": group_by, "rows": len(rows.y)}
        for structure in STRUCTURES:
            cv = cross_validate(
                rows, group_by=group_by, structure=structure, baselines=None if structure == "auto" else {}
            )
            summary = summarize(cv)
            entry[structure] = {
                "mape": summary["model"]["mape"],
                "coverage": summary["model"]["coverage_p10_p90"],
                "per_device": {d: v["model_mape"] for d, v in summary["per_device"].items()},
            }
            if structure == "auto":
                entry["chosen"] = [f["structure"] for f in summary["folds"]]
                entry["baselines"] = {
                    k: v["mape"] for k, v in summary["baselines"].items() if v.get("mape") is not None
                }
                entry["per_group"] = {g: v["model_mape"] for g, v in summary["per_group"].items()}
        blank = summarize(cross_validate(blank_partner(rows), group_by=group_by, partner_effect=False, baselines={}))
        entry["without the partner"] = blank["model"]["mape"]
        results.append(entry)
        print_structure(entry)
        sys.stdout.flush()
    return results


def print_structure(e: dict) -> None:
    cells = [f"{e[s]['mape']:5.1f} ({e[s]['coverage']:4.1f})" for s in STRUCTURES]
    base = "  ".join(f"{k} {v:.1f}" for k, v in e["baselines"].items())
    counts = pd.Series(e["chosen"]).value_counts().to_dict()
    print(
        f"{e['dataset']:<26}{e['rows']:>5}  " + "  ".join(f"{c:>13}" for c in cells)
        + f"  no partner {e['without the partner']:5.1f}  | {base}  | chosen {counts}"
    )
    if len(e["auto"]["per_device"]) > 1:
        print(" " * 33 + "auto by device: " + ", ".join(f"{d} {v:.1f}" for d, v in e["auto"]["per_device"].items()))


def budget() -> dict:
    profiles, pairs = read_datasets(["reference-h200"])
    pairs = pairs[(pairs["status"] == "ok") & (pairs["mode"] == "timeslice")]
    profiles = profiles[profiles["mode"] == "timeslice"]
    rows = ordered_rows(profiles, pairs)
    out = {}
    for label, data, pe in (("every feature", rows, True), ("without the partner", blank_partner(rows), False)):
        curve = evaluate_budget(data, group_by="workload", budgets=(2,), partner_effect=pe)[2]
        out[label] = {s: {"mape": m["mape"], "coverage": m["coverage_p10_p90"]} for s, m in curve["strategies"].items()}
        shown = []
        for s, m in out[label].items():
            cover = "n/a" if m["coverage"] is None else f"{m['coverage']:.0f}%"
            shown.append(f"{s} {m['mape']:.1f}% (in p10-p90 {cover})")
        print(f"reference-h200, budget 2, {label}: " + ", ".join(shown))
    return out


def pooling(work: Path) -> list[dict]:
    """Held-out user workload: the user's rows alone against their rows pooled with the shipped rows."""
    from sharewise.predictor import predict_pairs, train_model

    cases = []
    sources = [("reference", read_datasets(["reference"]))]
    profiles, pairs = gavel(work)
    for device in ("k80", "p100", "v100"):
        sources.append((f"gavel {device}", (profiles[profiles["device_name"] == device],
                                            pairs[pairs["device_name"] == device])))
    for name, (prof, prs) in sources:
        prs = prs[prs["status"] == "ok"]
        workloads = sorted(set(prs["workload_a"]) | set(prs["workload_b"]))
        if len(workloads) > 8:  # Gavel: 26 workloads; 3 seeded 3-workload campaigns keep the run short
            rng = np.random.default_rng(0)
            triples = [tuple(rng.choice(workloads, 3, replace=False)) for _ in range(8)]
        else:
            triples = list(itertools.combinations(workloads, 3))
        errors = {"user rows alone": [], "pooled with shipped rows": []}
        for triple in triples:
            mine = prs["workload_a"].isin(triple) & prs["workload_b"].isin(triple)
            shipped = ~prs["workload_a"].isin(triple) & ~prs["workload_b"].isin(triple)
            for held in triple:
                rest = [w for w in triple if w != held]
                train_user = prs[mine & ~((prs["workload_a"] == held) | (prs["workload_b"] == held))]
                test = prs[mine & ((prs["workload_a"] == held) | (prs["workload_b"] == held))
                           & (prs["workload_a"].isin(rest) | prs["workload_b"].isin(rest))]
                if train_user.empty or test.empty:
                    continue
                truth = np.where(test["workload_a"] == held, test["slowdown_a"], test["slowdown_b"])
                for label, train in (("user rows alone", train_user),
                                     ("pooled with shipped rows", pd.concat([train_user, prs[shipped]]))):
                    model = train_model(prof, train, group_by="workload")
                    pred = predict_pairs(model, prof, test[["workload_a", "workload_b", "device_name"]])
                    p50 = np.where(test["workload_a"].to_numpy() == held, pred["p50_a"], pred["p50_b"])
                    errors[label].extend(np.abs(p50 - truth) / truth * 100)
        case = {"source": name, "campaigns": len(triples),
                **{k: float(np.mean(v)) for k, v in errors.items()}, "rows": len(errors["user rows alone"])}
        cases.append(case)
        print(f"pooling, {name}: {case['rows']} held-out rows over {case['campaigns']} 3-workload campaigns; MAPE "
              f"user rows alone {case['user rows alone']:.1f}%, pooled {case['pooled with shipped rows']:.1f}%")
        sys.stdout.flush()
    return cases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="structures,budget,pooling", help="comma-separated parts to run")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-capacity"))
    parser.add_argument("--json", type=Path, help="write every number to this file")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    out: dict = {}
    if "structures" in parts:
        print("grouped MAPE % (p10-p90 coverage %) of each structure; 'auto' chooses per fold (nested)")
        print(f"{'dataset':<26}{'rows':>5}  " + "  ".join(f"{s:>13}" for s in STRUCTURES))
        out["structures"] = structures(args.work)
    if "budget" in parts:
        out["budget"] = budget()
    if "pooling" in parts:
        out["pooling"] = pooling(args.work)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
