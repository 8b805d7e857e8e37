"""Check that a change leaves the predictor's outputs as they were: predictions, out-of-fold predictions and
evaluations on the reference dataset and on Gavel's import, fingerprinted, saved before and compared after.

A refactoring of the predictor (its modules layered without import cycles) must not move a single number. Run it
on the old code with ``--save``, on the new one with ``--compare``; the comparison names every output that differs
with its largest relative change, so a float-order change (below 1e-12 relative) can be told from a real one.
``--save`` also keeps the models it trained (``model.json`` + ``model.sidecar.json``) next to the saved file, and
``--compare`` loads those old files with the new code: a saved model must still load and predict the same.

What is fingerprinted, per dataset (``reference``; Gavel's ``simulation_throughputs.json`` imported as
``sharewise import gavel`` does):

- ``train``: the model ``sharewise train`` writes (``train_model`` + ``calibrate_model`` by family): its p10/p50/p90
  of every pair of workloads profiled on one device (self pairs included), in memory and after a save and load,
  and the sidecar it writes;
- ``plain``: ``train_model`` alone (no calibration), the same predictions;
- ``shift``: ``refit_on_pairs`` of the trained model for two workloads (a ``WorkloadShift`` in the sidecar): the
  same predictions, in memory and after a save and load; ``suggest_pairs`` for those workloads; ``explain_pair``;
- ``oof``: ``out_of_fold_predictions`` of every pair as ``sharewise simulate`` asks for them (each job held out by
  family, ``holdout="self"``, calibrated);
- ``evaluate_workload``, ``evaluate_family``: the summaries of ``sharewise evaluate --group-by workload|family``
  (what ``--json`` prints), and on the reference dataset ``evaluate_budget2`` (``--budget 2``).

``--speed OLD_SRC`` times ``sharewise train`` and ``sharewise evaluate --group-by family`` of both datasets with the
code of this checkout and with the package at ``OLD_SRC`` (a folder holding another version's ``sharewise/``, e.g.
``git archive BASE sharewise | tar -x -C OLD_SRC``), each call in a fresh process, interleaved, best of ``--repeats``;
it prints the ratio new / old (on a shared machine, indicative only).

    .venv/bin/python benchmarks/check_predictions.py --save before.json [--data-root DIR]
    .venv/bin/python benchmarks/check_predictions.py --compare before.json [--data-root DIR]
    .venv/bin/python benchmarks/check_predictions.py --speed /tmp/old-src [--data-root DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets.public import public_data_root

REPO = Path(__file__).resolve().parents[1]
#: Relative change below which a difference is a float-order change, not a change of a value.
FLOAT_ORDER = 1e-12
#: Workloads given a shift (``refit_on_pairs``) and suggestions: the first ones in name order.
NEW_WORKLOADS = 2


def gavel_dataset(data_root: Path, work: Path) -> Path:
    """Import Gavel's throughputs into ``work/gavel`` (once; ``sharewise import gavel``'s code path)."""
    from sharewise.app.imports import import_data

    out = work / "gavel"
    if not (out / "meta.json").is_file():
        source = data_root / "gavel" / "simulation_throughputs.json"
        if not source.is_file():
            raise SystemExit(f"{source} not found; pass --data-root (the folder holding gavel/)")
        import_data("gavel", {"path": source}, out)
    return out


def all_pairs(profiles: pd.DataFrame) -> pd.DataFrame:
    """Every unordered pair of workloads profiled on one device, self pairs included, in a fixed order."""
    rows = []
    for device, part in profiles.groupby(profiles["device_name"].astype(str), sort=True):
        names = sorted(set(part["workload"].astype(str)))
        rows += [(a, b, device) for i, a in enumerate(names) for b in names[i:]]
    return pd.DataFrame(rows, columns=["workload_a", "workload_b", "device_name"])


def table(frame: pd.DataFrame) -> dict:
    """A prediction table as JSON: its name columns and its float columns (exact through JSON's repr)."""
    floats = [c for c in frame.columns if c.startswith(("p10", "p50", "p90"))]
    names = [c for c in frame.columns if c not in floats]
    block = np.ascontiguousarray(frame[floats].to_numpy(dtype=np.float64))
    return {
        "sha256": hashlib.sha256(block.tobytes()).hexdigest(),
        "names": {c: frame[c].astype(str).tolist() for c in names},
        "values": {c: frame[c].to_numpy(dtype=np.float64).tolist() for c in floats},
    }


def plain(obj):
    """JSON types of an output: numpy scalars and arrays to numbers and lists, keys to strings (NaN kept)."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (np.ndarray, np.generic)):
        return plain(obj.tolist())
    return obj


def sidecar(path: Path) -> dict:
    side = json.loads(path.with_name(path.stem + ".sidecar.json").read_text())
    side.pop("model_file", None)
    return side


def fingerprint_dataset(name: str, data: str, models: Path) -> dict:
    """Every output of the module docstring for one dataset; the trained models are saved under ``models``."""
    from sharewise.app.prediction import EvaluateOptions, TrainOptions, evaluate, train
    from sharewise.datasets import read_datasets
    from sharewise.predictor import (
        SlowdownRegressor,
        explain_pair,
        out_of_fold_predictions,
        predict_pairs,
        refit_on_pairs,
        suggest_pairs,
        train_model,
    )

    out: dict = {}
    profiles, pairs = read_datasets([data])
    candidates = all_pairs(profiles)
    models.mkdir(parents=True, exist_ok=True)

    began = time.perf_counter()
    trained = train(TrainOptions(data=(data,), out=models / "trained.json")).model
    loaded = SlowdownRegressor.load(models / "trained.json")
    out["train"] = {
        "predictions": table(predict_pairs(trained, profiles, candidates)),
        "loaded": table(predict_pairs(loaded, profiles, candidates)),
        "sidecar": sidecar(models / "trained.json"),
    }
    out["plain"] = {"predictions": table(predict_pairs(train_model(profiles, pairs), profiles, candidates))}
    new = sorted(set(profiles["workload"].astype(str)))[:NEW_WORKLOADS]
    shifted = refit_on_pairs(trained, profiles, pairs, new)
    shifted.save(models / "shifted.json")
    a, b, device = candidates[candidates["workload_a"] != candidates["workload_b"]].iloc[0]
    out["shift"] = {
        "predictions": table(predict_pairs(shifted, profiles, candidates)),
        "loaded": table(predict_pairs(SlowdownRegressor.load(models / "shifted.json"), profiles, candidates)),
        "sidecar": sidecar(models / "shifted.json"),
        "suggest": [s.to_dict() for s in suggest_pairs(trained, profiles, pairs, new, budget=2)],
        "explain": plain(explain_pair(shifted, profiles, a, b, device)),
    }
    print(f"  {name}: models and predictions in {time.perf_counter() - began:.0f} s", flush=True)

    began = time.perf_counter()
    oof = out_of_fold_predictions(
        profiles, pairs, group_by="family", candidates=candidates, holdout="self", calibrate=True
    )
    out["oof"] = {"predictions": table(oof)}
    print(f"  {name}: out-of-fold predictions in {time.perf_counter() - began:.0f} s", flush=True)

    runs = [("evaluate_workload", {"group_by": "workload"}), ("evaluate_family", {"group_by": "family"})]
    if name == "reference":
        runs.append(("evaluate_budget2", {"group_by": "workload", "budget": 2}))
    for key, options in runs:
        began = time.perf_counter()
        out[key] = {"summary": plain(evaluate(EvaluateOptions(data=(data,), **options)).summary)}
        print(f"  {name}: {key} in {time.perf_counter() - began:.0f} s", flush=True)
    return out


def predict_saved(models: Path, data: str) -> dict:
    """Predictions of the models saved by ``--save`` (old files), loaded by this code."""
    from sharewise.datasets import read_datasets
    from sharewise.predictor import SlowdownRegressor, predict_pairs

    profiles, _ = read_datasets([data], pairs=False)
    candidates = all_pairs(profiles)
    return {
        kind: table(predict_pairs(SlowdownRegressor.load(models / f"{kind}.json"), profiles, candidates))
        for kind in ("trained", "shifted")
    }


# ---- comparison -----------------------------------------------------------------------------------------


def differences(old, new, path: str = "") -> tuple[list[str], float]:
    """Return (paths whose values differ beyond a float-order change or in kind, largest relative change)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found, worst = [], 0.0
        for key in sorted(set(old) | set(new)):
            if key == "sha256":  # a hash of the values compared below, for a reader of the saved file
                continue
            if key not in old or key not in new:
                found.append(f"{path}/{key}: only {'after' if key in new else 'before'}")
                continue
            f, w = differences(old[key], new[key], f"{path}/{key}")
            found += f
            worst = max(worst, w)
        return found, worst
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items before, {len(new)} after"], math.inf
        if old and all(isinstance(v, (int, float)) or v is None for v in old + new):
            a = np.array([np.nan if v is None else v for v in old], dtype=np.float64)
            b = np.array([np.nan if v is None else v for v in new], dtype=np.float64)
            same_nan = np.isnan(a) == np.isnan(b)
            if not same_nan.all():
                return [f"{path}: NaN at other positions"], math.inf
            ok = ~np.isnan(a)
            scale = np.maximum(np.maximum(np.abs(a[ok]), np.abs(b[ok])), 1e-300)
            rel = np.abs(a[ok] - b[ok]) / scale
            worst = float(rel.max()) if rel.size else 0.0
            return ([f"{path}: {int((rel > FLOAT_ORDER).sum())} values, largest relative change {worst:.3g}"]
                    if worst > FLOAT_ORDER else []), worst
        found, worst = [], 0.0
        for i, (x, y) in enumerate(zip(old, new, strict=True)):
            f, w = differences(x, y, f"{path}[{i}]")
            found += f
            worst = max(worst, w)
        return found, worst
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        if old == new or (math.isnan(old) and math.isnan(new)):
            return [], 0.0
        rel = abs(old - new) / max(abs(old), abs(new), 1e-300)
        return ([f"{path}: {old!r} -> {new!r} (relative {rel:.3g})"] if rel > FLOAT_ORDER else []), rel
    if old != new:
        return [f"{path}: {old!r} -> {new!r}"], math.inf
    return [], 0.0


def compare(before: dict, after: dict) -> int:
    """Print each output's verdict; return how many differ beyond a float-order change."""
    differ = 0
    for dataset, outputs in after.items():
        for key, value in outputs.items():
            old = before.get(dataset, {}).get(key)
            if old is None:
                print(f"  {dataset} / {key}: not in the saved file")
                differ += 1
                continue
            exact = json.dumps(old, sort_keys=True) == json.dumps(value, sort_keys=True)
            found, worst = differences(old, value)
            if exact:
                verdict = "identical"
            elif not found:
                verdict = f"float-order change only (largest relative change {worst:.3g} <= {FLOAT_ORDER:g})"
            else:
                differ += 1
                verdict = "DIFFERENT:\n      " + "\n      ".join(found[:20])
            print(f"  {dataset} / {key}: {verdict}")
    return differ


# ---- speed ----------------------------------------------------------------------------------------------

# The editable install's finder would import this checkout whatever the path says: drop it, so that both trees
# are imported the same way, from the front of sys.path.
SPEED_CODE = """
import resource, sys, time, tempfile
from pathlib import Path
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path.insert(0, sys.argv[3])
began = time.perf_counter()
from sharewise.app.prediction import EvaluateOptions, TrainOptions, evaluate, train
import sharewise
assert Path(sharewise.__file__).resolve().is_relative_to(Path(sys.argv[3]).resolve()), sharewise.__file__
kind, data = sys.argv[1], sys.argv[2]
if kind == "train":
    with tempfile.TemporaryDirectory() as tmp:
        train(TrainOptions(data=(data,), out=Path(tmp) / "m.json"))
else:
    evaluate(EvaluateOptions(data=(data,), group_by="family"))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - began, usage.ru_utime + usage.ru_stime)
"""


def speed(old_src: Path, datasets: dict[str, str], repeats: int) -> None:
    """Time train and evaluate of each dataset, old and new code in fresh processes, interleaved."""
    trees = {"old": old_src.resolve(), "new": REPO}
    print(f"best of {repeats}, fresh processes, interleaved; wall seconds from the import of sharewise to the end,"
          " and the CPU seconds of the process (less sensitive to other load on a shared machine)")
    print(f"{'task':<20}{'old wall':>9}{'new wall':>9}{'new/old':>9}{'old cpu':>9}{'new cpu':>9}{'new/old':>9}")
    for name, data in datasets.items():
        for kind in ("train", "evaluate"):
            best = {(label, what): math.inf for label in trees for what in ("wall", "cpu")}
            for _ in range(repeats):
                for label, src in trees.items():
                    run = subprocess.run(
                        [sys.executable, "-c", SPEED_CODE, kind, data, str(src)],
                        capture_output=True, text=True, check=True, cwd=src,
                    )
                    wall, cpu = (float(v) for v in run.stdout.strip().splitlines()[-1].split())
                    best[(label, "wall")] = min(best[(label, "wall")], wall)
                    best[(label, "cpu")] = min(best[(label, "cpu")], cpu)
            cells = ""
            for what in ("wall", "cpu"):
                old, new = best[("old", what)], best[("new", what)]
                cells += f"{old:>9.2f}{new:>9.2f}{new / old:>9.2f}"
            print(f"{name + ' ' + kind:<20}{cells}", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help="Default: data/ ($SHAREWISE_DATA).")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path)
    group.add_argument("--compare", type=Path)
    group.add_argument("--speed", type=Path, metavar="OLD_SRC")
    parser.add_argument("--only", default=None, help="Only this dataset (reference or gavel).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="Folder for Gavel's import (kept; default temporary).")
    args = parser.parse_args(argv)
    args.data_root = public_data_root(args.data_root)
    with tempfile.TemporaryDirectory(prefix="sharewise-predictions-") as tmp:
        work = args.work or Path(tmp)
        datasets = {"reference": "reference", "gavel": str(gavel_dataset(args.data_root, work))}
        if args.only:
            datasets = {k: v for k, v in datasets.items() if k == args.only}
        if args.speed:
            speed(args.speed, datasets, args.repeats)
            return 0
        target = args.save or args.compare
        models = target.with_name(target.stem + ".models")
        began = time.perf_counter()
        found = {
            name: fingerprint_dataset(name, data, (models if args.save else Path(tmp) / "models") / name)
            for name, data in datasets.items()
        }
        print(f"{len(datasets)} dataset(s) fingerprinted in {time.perf_counter() - began:.0f} s")
        if args.save:
            args.save.write_text(json.dumps(found))
            print(f"saved to {args.save}, models under {models}")
            return 0
        before = json.loads(args.compare.read_text())
        if args.only:
            before = {k: v for k, v in before.items() if k == args.only}
        for name, data in datasets.items():  # the old code's model files, loaded by this code
            saved = predict_saved(models / name, data)
            found[name]["saved_files"] = {"predictions": saved["trained"], "shifted": saved["shifted"]}
            before[name]["saved_files"] = {
                "predictions": before[name]["train"]["loaded"], "shifted": before[name]["shift"]["loaded"]
            }
    differ = compare(before, found)
    print("every output identical or a float-order change" if not differ else f"{differ} output(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
