"""Import Gavel's ``simulation_throughputs.json`` (isolated and co-located steps/s on K80, P100, V100).

Format (stanford-futuredata/gavel, ``scheduler/simulation_throughputs.json``)::

    {gpu: {"('<job type>', <scale>)": {"null": <isolated steps/s>,
                                       "('<other job type>', <scale>)": [<this job's steps/s>, <other's>]}}}

Only scale-1 (single-GPU) entries hold co-location measurements. Each (job type, GPU) becomes a profile; the
isolated throughputs of its multi-GPU entries (the whole job's steps/s on 2, 4, 8 GPUs) go into the
profile's ``scale_throughputs`` column, so Gavel's job traces replay with the right durations; the
workload name is Gavel's job type verbatim (``"ResNet-18 (batch size 16)"``), so Gavel's job traces, whose
``job_type`` column uses the same strings, can be replayed against the imported pairs. Each unordered pair
of job types on a GPU becomes one pair row: ``slowdown = isolated / co-located`` throughput, and ``[0, 0]``
(not run, or out of memory) becomes status ``oom``. Gavel co-located jobs as separate processes with
default CUDA contexts, hence mode ``timeslice``. GPU keys ending in ``_unconsolidated`` describe multi-server
placements of the same single-GPU numbers and are skipped.

Gavel gives no profiler features, so the device-independent features (FLOPs, parameter and activation
bytes, op mix) of the zoo configuration that Gavel's job command runs (``ZOO_WORKLOADS``: a zoo workload and
config overrides, e.g. ResNet-18 is the 32 px CIFAR-10 model and LM the 200-unit LSTM) are asked of the
request's ``StaticCounter`` (the profiler counts them on the ``meta`` device and caches them) once per
(configuration, batch size). Without a counter, or where counting fails, they stay missing (NaN), with a
warning that says why.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sharewise.datasets.importers import (
    Importer,
    ImportFlag,
    ImportInput,
    ImportRequest,
    ImportResult,
    StaticCounter,
)
from sharewise.datasets.store import Dataset, utc_now
from sharewise.errors import DatasetError, SchemaError, SharewiseError

# Gavel model name -> our family name (families named after Gavel's model families).
GAVEL_FAMILIES: dict[str, str] = {
    "ResNet-18": "resnet18",
    "ResNet-50": "resnet50",
    "Transformer": "transformer",
    "LM": "lm",
    "Recommendation": "recommendation",
    "A3C": "a3c",
    "CycleGAN": "cyclegan",
}
@dataclass(frozen=True)
class ZooMatch:
    """The zoo workload that stands for a Gavel model when counting device-independent features.

    ``workload`` is a registry name built at ``size="full"``; ``overrides`` replace fields of that size's
    config so the counted model is the configuration Gavel ran (its job commands are in the job traces,
    ``gavel/traces_msr_seed0``); ``source`` says where that configuration comes from.
    """

    workload: str
    overrides: tuple[tuple[str, Any], ...] = ()
    source: str = ""

    def key(self) -> str:
        """Cache key of the configuration: ``"lstm_lm[dim=200,dropout=0.2]"``."""
        if not self.overrides:
            return self.workload
        return f"{self.workload}[{','.join(f'{k}={v}' for k, v in self.overrides)}]"


# Gavel model name -> the zoo configuration Gavel's job command runs.
ZOO_WORKLOADS: dict[str, ZooMatch] = {
    # image_classification/cifar10: the CIFAR-10 ResNet-18 on 32 px images, not ImageNet's.
    "ResNet-18": ZooMatch("resnet18_cifar", source="ResNet-18 on CIFAR-10 (32x32, 10 classes)"),
    "ResNet-50": ZooMatch("resnet50", source="torchvision ResNet-50 on ImageNet (224x224)"),
    # translation/train.py (attention-is-all-you-need-pytorch): d_model 512, 6+6 layers, 8 heads, Multi30k.
    "Transformer": ZooMatch("transformer", source="Transformer-base on Multi30k"),
    # language_modeling/main.py: PyTorch's word_language_model defaults (2-layer LSTM, 200 units, BPTT 35,
    # dropout 0.2) on WikiText-2; the zoo's full size is the 650-unit medium model.
    "LM": ZooMatch(
        "lstm_lm",
        (("dim", 200), ("dropout", 0.2)),
        "word_language_model defaults: 2-layer LSTM, 200 units, WikiText-2 vocabulary, BPTT 35",
    ),
    # recommendation/scripts/ml-20m/train.py on ml-20m/pro_sg: an autoencoder over items, not NeuMF.
    "Recommendation": ZooMatch("dae_cf", source="autoencoder over MovieLens-20M's 20,108 items"),
    # rl/main.py --env PongDeterministic-v4 --workers 4 --amsgrad: rl_a3c_pytorch's A3C with an LSTM.
    "A3C": ZooMatch("a3c_lstm", source="A3C with an LSTM policy on 1x80x80 Pong frames"),
    "CycleGAN": ZooMatch("cyclegan", source="CycleGAN on monet2photo (256x256, ResNet-9 generators)"),
}

GAVEL_MODE = "timeslice"
_JOB_TYPE = re.compile(r"^(?P<model>.+?) \(batch size (?P<batch>\d+)\)$")


def parse_job_type(job_type: str) -> tuple[str, int | None]:
    """Split a Gavel job type into (model, batch size or None): ``"LM (batch size 20)"`` -> ``("LM", 20)``."""
    match = _JOB_TYPE.match(job_type)
    if match:
        return match.group("model"), int(match.group("batch"))
    return job_type, None


def _parse_key(key: str, source: str) -> tuple[str, int]:
    try:
        value = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        value = None
    if not (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    ):
        raise SchemaError(
            f"{source}: key {key!r} is not a Gavel job key; expected the text of a tuple "
            "like \"('ResNet-18 (batch size 16)', 1)\""
        )
    return value


def _family(model: str) -> str:
    return GAVEL_FAMILIES.get(model) or re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")


def import_gavel(
    path: str | os.PathLike,
    out: str | os.PathLike,
    static_counter: StaticCounter | None = None,
) -> ImportResult:
    """Import a Gavel ``simulation_throughputs.json`` into dataset folder ``out``.

    Parameters
    ----------
    path : path
        The throughputs file.
    out : path
        Dataset folder to write (created if needed; new files are added next to existing ones).
    static_counter : callable, optional
        Counts the device-independent features of the zoo configuration of each job type
        (``StaticCounter``); without one, those features are left out.

    Returns
    -------
    ImportResult
        Counts, devices, workloads, and warnings, e.g. "static features unavailable for LM: ...".

    Raises
    ------
    SchemaError
        A file that is not Gavel's format (the message names the file and the offending key).
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DatasetError(f"Gavel throughputs file {source!r} not found")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise SchemaError(f"{source}: expected an object keyed by GPU type, like {{'v100': {{...}}}}")
    warnings: list[str] = []
    created = utc_now()
    skipped = sorted(g for g in data if g.endswith("_unconsolidated"))
    gpus = [g for g in data if not g.endswith("_unconsolidated")]
    if skipped:
        warnings.append(
            f"skipped multi-server GPU keys {skipped} (same single-GPU numbers as their base keys)"
        )

    # Isolated throughputs and the job types seen, per GPU.
    isolated: dict[tuple[str, str], float] = {}
    scaled: dict[tuple[str, str], dict[int, float]] = {}  # (gpu, job) -> {GPUs: steps/s of the whole job}
    job_types: list[str] = []
    for gpu in gpus:
        table = data[gpu]
        if not isinstance(table, dict):
            raise SchemaError(
                f"{source}: entry for GPU {gpu!r} must be an object keyed by job, got {type(table).__name__}"
            )
        for key, row in table.items():
            job, scale = _parse_key(key, source)
            if not isinstance(row, dict) or "null" not in row:
                raise SchemaError(f"{source}: {gpu}/{key} lacks the isolated throughput under key 'null'")
            iso = _number(row["null"], source, f"{gpu}/{key}/null")
            if scale != 1:
                # Multi-GPU jobs: only the isolated rate of the whole job, for replaying traces.
                if iso > 0:
                    scaled.setdefault((gpu, job), {})[scale] = iso
                continue
            if iso > 0:
                isolated[(gpu, job)] = iso
            else:
                warnings.append(f"{gpu}: {job!r} has isolated throughput {iso!r}; skipped")
            if job not in job_types:
                job_types.append(job)

    static = _StaticFeatures(static_counter)
    profile_rows = []
    for gpu, job in isolated:
        model, batch = parse_job_type(job)
        zoo = ZOO_WORKLOADS.get(model)
        feats, zoo_batch = static.get(zoo, batch, job) if zoo else ({}, None)
        if zoo is None and static_counter is not None:
            static.note_missing(job, f"no zoo workload of the same architecture as Gavel model {model!r}")
        iso = isolated[(gpu, job)]
        profile_rows.append(
            {
                "workload": job,
                "family": _family(model),
                "batch_size": batch or zoo_batch or 1,
                "device_kind": "cuda",
                "device_name": gpu,
                "mode": GAVEL_MODE,
                "host": "",
                "torch_version": "",
                "created_at": created,
                "iter_time_ms": 1000.0 / iso,
                "throughput": iso,
                "spec": zoo.key() if zoo else "",
                "size": "full",
                "source": "gavel",
                "f_batch_size": float(batch) if batch else math.nan,
                "scale_throughputs": json.dumps({1: iso, **dict(sorted(scaled.get((gpu, job), {}).items()))}),
                **feats,
            }
        )
    warnings.extend(static.warnings())

    pair_rows = []
    asymmetric = 0
    done: set[tuple[str, frozenset]] = set()
    for gpu in gpus:
        for key, row in data[gpu].items():
            job_a, scale = _parse_key(key, source)
            if scale != 1 or (gpu, job_a) not in isolated:
                continue
            for other, value in row.items():
                if other == "null":
                    continue
                job_b, scale_b = _parse_key(other, source)
                if scale_b != 1 or (gpu, job_b) not in isolated or (gpu, frozenset((job_a, job_b))) in done:
                    continue
                done.add((gpu, frozenset((job_a, job_b))))
                where = f"{gpu}/{key}/{other}"
                if not (isinstance(value, list) and len(value) == 2):
                    raise SchemaError(
                        f"{source}: {where} must be [this job's steps/s, other's steps/s], got {value!r}"
                    )
                coloc_a, coloc_b = (_number(v, source, where) for v in value)
                mirror = data[gpu].get(str((job_b, 1)), {}).get(key)
                if (
                    isinstance(mirror, list)
                    and len(mirror) == 2
                    and not np.allclose([coloc_b, coloc_a], mirror)
                ):
                    asymmetric += 1
                pair_rows.append(_pair_row(gpu, job_a, job_b, isolated, coloc_a, coloc_b, created))
    if asymmetric:
        warnings.append(f"{asymmetric} pair(s) disagree with their mirror entry; the first one seen was used")

    if not profile_rows:
        raise SchemaError(f"{source}: no single-GPU (scale 1) job with a positive isolated throughput")
    profiles = pd.DataFrame(profile_rows)
    pairs = pd.DataFrame(pair_rows)
    ds = Dataset(out)
    files = []
    with ds.lock("gavel import"):
        files.append(ds.write_profiles(profiles))
        if len(pairs):
            files.append(ds.write_pairs(pairs))
    counts = pairs["status"].value_counts().to_dict() if len(pairs) else {}
    return ImportResult(
        out=ds.path,
        profiles=len(profiles),
        pairs=len(pairs),
        pairs_ok=int(counts.get("ok", 0)),
        status_counts={str(k): int(v) for k, v in counts.items()},
        devices=sorted({r["device_name"] for r in profile_rows}),
        workloads=sorted({r["workload"] for r in profile_rows}),
        files=files,
        warnings=warnings,
        static_features=static.counts(),
    )


def _number(value, source: str, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise SchemaError(f"{source}: {where} must be a non-negative finite number of steps/s, got {value!r}")
    return float(value)


def _pair_row(gpu, job_a, job_b, isolated, coloc_a, coloc_b, created) -> dict:
    solo_a, solo_b = isolated[(gpu, job_a)], isolated[(gpu, job_b)]
    if coloc_a > 0 and coloc_b > 0:
        status, error = "ok", ""
    elif coloc_a == 0 and coloc_b == 0:
        status, error = "oom", "Gavel reports [0, 0]: not run or out of memory"
    else:
        status, error = "failed", "Gavel reports a zero co-located throughput for one job only"
    ok = status == "ok"
    return {
        "workload_a": job_a,
        "workload_b": job_b,
        "device_kind": "cuda",
        "device_name": gpu,
        "mode": GAVEL_MODE,
        "solo_a": solo_a,
        "solo_b": solo_b,
        "coloc_a": coloc_a if ok else math.nan,
        "coloc_b": coloc_b if ok else math.nan,
        "slowdown_a": solo_a / coloc_a if ok else math.nan,
        "slowdown_b": solo_b / coloc_b if ok else math.nan,
        "trials": 1,
        # Gavel publishes one number per pair, no spread; the schema needs a finite cv on ok rows.
        "cv_a": 0.0 if ok else math.nan,
        "cv_b": 0.0 if ok else math.nan,
        "status": status,
        "error": error,
        "created_at": created,
        "source": "gavel",
        # One published number per pair: no interval, so no precision to judge (``schema.PAIR_OPTIONAL``).
        "precision": "",
    }


class _StaticFeatures:
    """Device-independent features per (zoo configuration, batch size), asked of the counter once each."""

    def __init__(self, counter: StaticCounter | None) -> None:
        self.counter = counter
        self.known: dict[str, tuple[dict, int | None]] = {}
        self.failed: dict[str, str] = {}

    def get(self, zoo: ZooMatch, batch: int | None, job: str) -> tuple[dict, int | None]:
        if self.counter is None:
            return {}, None
        key = f"{zoo.key()}|{batch if batch else 'default'}"
        if key not in self.known and key not in self.failed:
            try:
                feats, used = self.counter(zoo.key(), batch)
            except SharewiseError as exc:
                self.failed[key] = f"counting zoo configuration {zoo.key()!r} failed: {exc}"
                self.note_missing(job, self.failed[key])
                return {}, None
            self.known[key] = ({k: v for k, v in feats.items() if k != "f_batch_size"}, used)
        if key in self.failed:
            return {}, None
        feats, used = self.known[key]
        return dict(feats), used

    def note_missing(self, job: str, why: str) -> None:
        self.failed.setdefault(f"job:{job}", why)

    def warnings(self) -> list[str]:
        if self.counter is None:
            return ["static features not computed (disabled); device-independent f_* columns are absent"]
        out = []
        for key, why in self.failed.items():
            if key.startswith("job:"):
                out.append(f"static features left missing (NaN) for {key[len('job:'):]}: {why}")
        return out

    def counts(self) -> dict[str, int]:
        """``{"counted": configurations counted, "missing": job types left without them}``; ``{}`` when off."""
        if self.counter is None:
            return {}
        missing = sum(1 for k in self.failed if k.startswith("job:"))
        return {"counted": len(self.known), "missing": missing}


def _run(request: ImportRequest) -> ImportResult:
    counter = None if "no_static" in request.flags else request.static_counter
    return import_gavel(request.inputs["path"], request.out, static_counter=counter)


IMPORTER = Importer(
    name="gavel",
    summary="Import Gavel's measured co-location throughputs (K80, P100, V100).",
    example="sharewise import gavel data/gavel/simulation_throughputs.json --out gavel-ds",
    inputs=(ImportInput("path", "Gavel's simulation_throughputs.json."),),
    flags=(ImportFlag("no_static", "Skip the zoo's device-independent features."),),
    run=_run,
    wants_static_features=True,
)
