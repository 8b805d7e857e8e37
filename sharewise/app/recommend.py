"""``sharewise recommend``: predict every pair of the queued and resident workloads, then plan the pairing.

The pipeline around the pure solver (``sharewise.planner.pairing``): read the model, the profiles, the queue
and cluster files; predict; forbid pairs that do not fit in memory (their raw peaks, and their memory limits
of ``sharewise.deploy.plan``) or were measured out of memory; plan; and explain the shared placements.
``deploy`` then turns the plan into the neutral deployment plan and writes it in a stack's format.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.datasets.schema import PREDICTION_COLUMNS
from sharewise.datasets.tables import read_table_csv
from sharewise.deploy import EMITTERS, render
from sharewise.deploy.plan import (
    MEMORY_MARGIN_BYTES,
    MEMORY_MARGIN_FRACTION,
    DeployPlan,
    Device,
    WorkloadResources,
    build_deploy_plan,
    sharing_allowed,
    workload_resources,
)
from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, DatasetError, TraceError
from sharewise.planner.contract import SPLIT_GRID, Bound, Choice, choose_split
from sharewise.planner.jobs import CLUSTER_COLUMNS, QUEUE_COLUMNS
from sharewise.planner.pairing import Plan, plan_pairs
from sharewise.predictor.memory import DEVICE_MEMORY

#: ``--sharing auto`` picks the measured mode if it is one of these GPU modes, else the first (CUDA's default).
AUTO = "auto"


@dataclass(frozen=True)
class RecommendConfig:
    """Inputs of ``sharewise recommend``: a saved model, the dataset with the jobs' solo profiles, the queue,
    and the GPUs (``gpus`` free GPUs, or a ``cluster`` CSV of GPUs and their resident jobs)."""

    model: str
    data: str
    queue: str
    gpus: int | None = None
    cluster: str | None = None
    max_slowdown: float = 2.0
    device_name: str | None = None
    method: str = "auto"
    top: int = 3
    max_explained: int = 20
    sharing: str = AUTO
    node: str | None = None
    #: The sharing knob (``planner.contract``): ``auto`` chooses each pair's split where the model has pairs
    #: measured under the knob and the plan's mode has one; ``none`` never splits.
    split: str = AUTO


@dataclass(frozen=True)
class Deployment:
    """A recommendation written for a stack: the pairing, the neutral plan, the format, its text and file."""

    plan: Plan
    deploy: DeployPlan
    emit: str
    text: str
    out: str | None


@dataclass
class _Solved:
    plan: Plan
    device: str
    profiles: pd.DataFrame
    workloads: list[str]
    measured_modes: list[str]
    device_memory: float | None
    resources: dict[str, WorkloadResources]
    cluster: pd.DataFrame | None


def recommend(config: RecommendConfig) -> Plan:
    """Run ``sharewise recommend``: predict every pair of the queued and resident workloads, then plan.

    Pairs that cannot fit in memory (combined ``f_mem_*`` above ``f_device_mem_bytes``, or memory limits
    of ``sharewise.deploy.plan.memory_limit`` that do not fit together) or that the dataset measured as
    ``oom`` may not share. Each shared placement gets a ``why``: the top feature contributions to both
    predicted slowdowns (``model.explain``), for up to ``max_explained`` distinct workload pairs.
    """
    return _solve(config, strict=False).plan


def deploy(config: RecommendConfig, emit: str, out: str | os.PathLike | None = None) -> Deployment:
    """Recommend, then write the plan in format ``emit`` (``sharewise.deploy.EMITTERS``) to ``out``.

    Unlike ``recommend``, a pair whose memory limit cannot be known (no memory in a profile, device memory
    unknown) may not share, since its limits could not be checked. The GPUs' nodes come from the cluster
    CSV's ``node`` column (or ``config.node`` with ``--gpus N``), their UUIDs from a ``gpu_uuid`` column,
    their indices from a ``gpu_index`` column or the ``gpu`` id itself (``3``, ``node1:3``). ``out`` is
    written atomically; None writes nothing (the caller prints ``text``).
    """
    EMITTERS.check(emit)
    sharing_choice = _check_sharing(config.sharing)
    solved = _solve(config, strict=True)
    devices = _devices(config, solved.cluster)
    sharing, note = _sharing(sharing_choice, solved.measured_modes)
    if note:
        solved.plan.notes.append(note)
    neutral = build_deploy_plan(
        solved.plan,
        devices=devices,
        resources=solved.resources,
        sharing=sharing,
        device_memory=solved.device_memory,
        device_name=solved.device,
        measured_modes=solved.measured_modes,
        model=config.model,
        max_slowdown=config.max_slowdown,
    )
    text = render(neutral, emit)
    if out is not None:
        _write(Path(out), text)
    return Deployment(solved.plan, neutral, emit, text, None if out is None else str(out))


def _command_specs(queue: pd.DataFrame, cluster: pd.DataFrame | None) -> dict[str, str]:
    """Replace command specs in the ``workload`` columns by their recorded names, in place; return
    ``{job_id: spec}`` of the jobs given as commands (the plan carries them, as ``specs``)."""
    from sharewise.command_spec import is_command_spec, recorded_names

    out: dict[str, str] = {}
    for table in (queue, cluster):
        if table is None or "workload" not in table.columns or "job_id" not in table.columns:
            continue
        cells = table["workload"].fillna("").astype(str).str.strip()
        # ``unique`` first: a queue of 100,000 jobs names a few workloads.
        found = [w for w in cells.unique() if is_command_spec(w)]
        if not found:
            continue
        commands = cells.isin(found)
        for job, spec in zip(table.loc[commands, "job_id"].astype(str).str.strip(), cells[commands], strict=True):
            out[job] = spec
        try:
            table.loc[commands, "workload"] = recorded_names(list(cells[commands]))
        except ConfigError as exc:
            raise TraceError(f"queue or cluster: column 'workload': {exc}") from None
    return out


def _solve(config: RecommendConfig, strict: bool) -> _Solved:
    from sharewise.datasets.store import open_dataset
    from sharewise.predictor import SlowdownRegressor, predict_pairs
    from sharewise.predictor.api import unseen_device_note
    from sharewise.predictor.memory import memory_fit

    model = SlowdownRegressor.load(config.model)
    ds = open_dataset(config.data, profiles=True)
    profiles = ds.read_profiles()
    queue = read_table_csv(config.queue, "queue", QUEUE_COLUMNS)
    if queue.empty:
        raise TraceError(
            f"{config.queue}: the queue has no jobs, only its header ({','.join(queue.columns)}); add a line per "
            "job to pair, e.g. job1,resnet18"
        )
    cluster = read_table_csv(config.cluster, "cluster", CLUSTER_COLUMNS) if config.cluster else None
    specs = _command_specs(queue, cluster)
    # ``unique`` first: iterating 100,000 Arrow strings in Python takes 0.06-0.12 s, ``unique`` 1 ms.
    needed = sorted(
        set(queue["workload"].astype(str).str.strip().unique())
        | (
            set(cluster["workload"].fillna("").astype(str).str.strip().unique()) - {""}
            if cluster is not None and "workload" in cluster.columns
            else set()
        )
    )
    device = _device(profiles, needed, config.device_name, config.data)
    prof = profiles[profiles["device_name"].astype(str) == device]
    missing = sorted(set(needed) - set(prof["workload"].astype(str)))
    if missing:
        raise DatasetError(_missing_line(profiles, missing, device, config.data))
    i, j = np.triu_indices(len(needed))
    names = np.array(needed, dtype=object)
    candidates = pd.DataFrame({"workload_a": names[i], "workload_b": names[j], "device_name": device})
    predictions = predict_pairs(model, prof, candidates)
    table = SlowdownTable.from_predictions(predictions, workloads=needed)
    contract = _contract(config, model, queue, prof, needed)
    notes = []
    fits, note = memory_fit(prof, needed)
    notes.append(note)
    device_memory = _device_memory(prof, needed)
    resources = workload_resources(prof, needed)
    allowed, note = _limits_allowed(fits, resources, needed, device_memory, strict)
    notes.append(note)
    measured = ds.read_pairs() if ds.pairs_dir.is_dir() else None
    if measured is not None:
        oom = measured[(measured["status"] == "oom") & (measured["device_name"].astype(str) == device)]
        index = {w: n for n, w in enumerate(needed)}
        for a, b in zip(oom["workload_a"], oom["workload_b"], strict=True):
            if a in index and b in index:
                allowed[index[a], index[b]] = allowed[index[b], index[a]] = False
    table = table.restricted(allowed)
    if contract is not None:
        # Bounds or splits: the jobs' types are (workload, bound); the table holds each pair of types at its
        # chosen split, and the bounds (the --max-slowdown for a job without one) are in its ``allowed``.
        table, queue = contract.typed(table, device, queue, config.max_slowdown)
    plan = plan_pairs(
        queue,
        table,
        gpus=config.gpus,
        cluster=cluster,
        max_slowdown=config.max_slowdown if contract is None else contract.planner_max(config.max_slowdown),
        method=config.method,
    )
    if contract is not None:
        contract.annotate(plan)
    # The first ``max_explained`` distinct shared workload pairs, in placement order, explained together. One
    # pass over the placements (100,000 jobs make some 50,000) finds them and every shared pair.
    keys: dict[tuple[str, str], None] = {}
    shared: set[tuple[str, str]] = set()
    for p in plan.placements:
        if p["kind"] != "alone":
            key = (p["workloads"][0], p["workloads"][1], p.get("split"))
            shared.add(key)
            if len(keys) < config.max_explained:
                keys.setdefault(key)
    explained = {
        key: {
            side: [
                {"feature": c["feature"], "contribution": round(c["contribution"], 4)}
                for c in why[side]["contributions"]
            ]
            for side in ("a", "b")
        }
        for key, why in zip(keys, _explain(model, prof, list(keys), device, config.top), strict=True)
    }
    if explained:
        for p in plan.placements:
            if p["kind"] != "alone":
                why = explained.get((p["workloads"][0], p["workloads"][1], p.get("split")))
                if why is not None:
                    p["why"] = why
    if len(shared) > len(explained):
        notes.append(
            f"explained the first {len(explained)} of {len(shared)} distinct shared workload pairs "
            "(raise max_explained for more)"
        )
    notes.append(f"device {device!r}; slowdowns predicted by {config.model}")
    unseen = unseen_device_note(model, [device])
    if unseen is not None:
        notes.append(unseen)
    if contract is not None:
        notes.extend(contract.notes)
    plan.notes = notes
    if specs:
        for p in plan.placements:
            p["specs"] = [specs.get(str(j), w) for j, w in zip(p["jobs"], p["workloads"], strict=True)]
    modes = _measured_modes(measured, prof, device)
    return _Solved(plan, device, prof, needed, modes, device_memory, resources, cluster)


def _explain(model, prof, keys: list[tuple], device: str, top: int) -> list[dict]:
    """``explain_pairs`` of ``(workload_a, workload_b, split)`` keys: the pairs of one split together."""
    from sharewise.predictor.api import explain_pairs

    out: dict[tuple, dict] = {}
    for split in dict.fromkeys(k[2] for k in keys):
        mine = [k for k in keys if k[2] == split]
        for key, why in zip(mine, explain_pairs(model, prof, [k[:2] for k in mine], device, top=top, split=split),
                            strict=True):
            out[key] = why
    return [out[k] for k in keys]


def _contract(config, model, queue, prof, needed) -> Contract | None:
    """The slowdown contract of this queue (``planner.contract``): None where no job has a bound and no split is
    chosen (the plan is then made as without a contract, at the cost it always had)."""
    has_bounds = "bound" in queue.columns and queue["bound"].fillna("").astype(str).str.strip().ne("").any()
    if config.split not in (AUTO, "none"):
        raise ConfigError(f"--split must be 'auto' or 'none', got {config.split!r}")
    knob_rows = int((getattr(model, "training_summary_", None) or {}).get("knob_rows", 0) or 0)
    mode = _plan_mode(config, prof)
    splits = config.split == AUTO and knob_rows > 0 and mode in ("mps", "cpu", "cpu-partition")
    if not has_bounds and not splits:
        return None
    return Contract.of(model, queue, prof, needed, splits, knob_rows, mode)


def _plan_mode(config, prof: pd.DataFrame) -> str:
    """The sharing mode the plan's pairs run in: ``--sharing`` where given, else the profiles' (one of them)."""
    if config.sharing != AUTO:
        return config.sharing
    modes = sorted(set(prof["mode"].astype(str))) if "mode" in prof else []
    return modes[0] if len(modes) == 1 else "timeslice"


@dataclass
class Contract:
    """Each queued job's bound, and each pair of job types' split (``planner.contract.choose_split``).

    A job's type is its workload and its bound (``"resnet18 [<= 1.3]"``; a job without a bound is its workload):
    jobs of one type are interchangeable for the pairing, as jobs of one workload are without a contract.
    """

    bounds: dict[str, Bound]
    splits: bool
    notes: list[str]
    at_splits: pd.DataFrame | None = None
    choices: dict[tuple[str, str], Choice] = field(default_factory=dict)
    type_workload: dict[str, str] = field(default_factory=dict)
    type_bound: dict[str, Bound] = field(default_factory=dict)

    @classmethod
    def of(cls, model, queue, prof, needed, splits: bool, knob_rows: int, mode: str) -> Contract:
        from sharewise.predictor import predict_pairs

        cells = queue["bound"] if "bound" in queue.columns else [None] * len(queue)
        bounds = {str(j).strip(): Bound.parse(b) for j, b in zip(queue["job_id"], cells, strict=True)}
        if not splits:
            why = (
                "the model has no pair measured under the sharing knob ('sharewise pairs --split 70:30')"
                if mode in ("mps", "cpu", "cpu-partition")
                else f"the {mode!r} mode has no knob"
            )
            return cls(bounds, False, [f"no split is chosen: {why}; each job's bound is checked at the predicted "
                                       "p90 without a knob"])
        grid = list(SPLIT_GRID)
        i, j = np.triu_indices(len(needed))
        names = np.array(needed, dtype=object)
        frame = pd.DataFrame({
            "workload_a": np.repeat(names[i], len(grid)),
            "workload_b": np.repeat(names[j], len(grid)),
            "device_name": str(prof["device_name"].iloc[0]),
            "split_a": np.tile(np.asarray(grid, dtype=float), len(i)),
        })
        at_splits = predict_pairs(model, prof, frame)
        at_splits["split_a"] = frame["split_a"].to_numpy()
        note = (
            f"each pair's split chosen among {grid[0]}:{100 - grid[0]} ... {grid[-1]}:{100 - grid[-1]} "
            "(planner.contract): both jobs' bounds kept at the predicted p90, then the highest 1/p50_a + 1/p50_b; "
            f"predicted by a model trained on {knob_rows} ordered rows measured under the {mode} knob"
        )
        return cls(bounds, True, [note], at_splits)

    def typed(self, table: SlowdownTable, device: str, queue: pd.DataFrame, max_slowdown: float):
        """The table over job types at each pair's chosen split (a type pair no split, or no bound, allows may
        not share) and the queue naming types. A job without a bound is held to ``max_slowdown``."""
        queue = queue.copy()
        labels = []
        for job, workload in zip(queue["job_id"], queue["workload"], strict=True):
            bound, workload = self.bounds[str(job).strip()], str(workload).strip()
            label = workload if not bound.bounded else f"{workload} [{bound}]"
            labels.append(label)
            self.type_workload[label], self.type_bound[label] = workload, bound
        queue["workload"] = labels
        for w in table.workloads:  # residents carry no bound: their type is their workload
            self.type_workload.setdefault(w, w)
            self.type_bound.setdefault(w, Bound())
        types = sorted(self.type_workload)
        index = {w: n for n, w in enumerate(table.workloads)}
        rows = []
        for x, ta in enumerate(types):
            for tb in types[x:]:
                wa, wb = self.type_workload[ta], self.type_workload[tb]
                ba = self.type_bound[ta] if self.type_bound[ta].bounded else Bound(max_slowdown)
                bb = self.type_bound[tb] if self.type_bound[tb].bounded else Bound(max_slowdown)
                ia, ib = index[wa], index[wb]
                if not table.allowed[ia, ib]:
                    continue
                if self.splits:
                    choice = self._choose(wa, wb, ba, bb)
                    if choice is None or not choice.shares:
                        continue
                    self.choices[(ta, tb)] = choice
                    p10, p50, p90 = choice.p50, choice.p50, choice.p90  # the pairing reads p50 and p90
                else:
                    p10 = (float(table.p10[ia, ib]), float(table.p10[ib, ia]))
                    p50 = (float(table.p50[ia, ib]), float(table.p50[ib, ia]))
                    p90 = (float(table.p90[ia, ib]), float(table.p90[ib, ia]))
                    if p90[0] > ba.max_slowdown or p90[1] > bb.max_slowdown:
                        continue
                rows.append((ta, tb, device, p10[0], p50[0], p90[0], p10[1], p50[1], p90[1]))
        frame = pd.DataFrame(rows, columns=list(PREDICTION_COLUMNS))
        return SlowdownTable.from_predictions(frame, workloads=types), queue

    def _choose(self, wa: str, wb: str, ba: Bound, bb: Bound) -> Choice | None:
        frame = self.at_splits
        flip = wa > wb  # the frame holds each pair once, the names in order
        first, second = (wb, wa) if flip else (wa, wb)
        part = frame[(frame["workload_a"] == first) & (frame["workload_b"] == second)].sort_values("split_a")
        if part.empty:
            return None
        share = part["split_a"].to_numpy().astype(int)
        if flip:  # a's share is 100 minus the frame's first job's
            return choose_split(100 - share, part["p50_b"], part["p90_b"], part["p50_a"], part["p90_a"], ba, bb)
        return choose_split(share, part["p50_a"], part["p90_a"], part["p50_b"], part["p90_b"], ba, bb)

    def planner_max(self, max_slowdown: float) -> float:
        """The pairing's own p90 check: the bounds are in the table already, so only what no bound exceeds."""
        return max([max_slowdown, *(b.max_slowdown for b in self.type_bound.values() if b.bounded)])

    def annotate(self, plan: Plan) -> None:
        """Put back each placement's workloads, and add its jobs' bounds and its split (its first job's percent)."""
        for p in plan.placements:
            types = p["workloads"]
            p["workloads"] = [self.type_workload.get(t, t) for t in types]
            p["bounds"] = [str(self.type_bound.get(t, Bound())) for t in types]
            if len(types) == 2 and self.splits:
                choice = self.choices.get((types[0], types[1]))
                if choice is not None:
                    p["split"] = choice.split
                elif (choice := self.choices.get((types[1], types[0]))) is not None:
                    p["split"] = 100 - choice.split
                if choice is not None:
                    p["split_reason"] = choice.reason


def _device_memory(prof: pd.DataFrame, workloads: list[str]) -> float | None:
    """The smallest device memory among the workloads' profiles (as ``memory_fit`` checks), None if unknown."""
    if DEVICE_MEMORY not in prof.columns:
        return None
    per = pd.to_numeric(prof[DEVICE_MEMORY], errors="coerce").groupby(prof["workload"]).median()
    value = float(per.reindex(workloads).min())
    return value if np.isfinite(value) else None


def _limits_allowed(fits, resources, workloads, device_memory, strict) -> tuple[np.ndarray, str]:
    """``fits`` narrowed to pairs whose memory limits fit together; unknown limits block only if ``strict``."""
    ok, unknown = sharing_allowed(resources, workloads, device_memory, strict)
    allowed = fits & ok
    blocked = int(np.triu(fits & ~allowed).sum())
    memory = "unknown" if device_memory is None else f"{device_memory / 2**30:.1f} GiB"
    note = (
        f"memory limits (peak x {1 + MEMORY_MARGIN_FRACTION:g} + {MEMORY_MARGIN_BYTES // 2**20} MiB) checked "
        f"against {memory}: {blocked} more workload pair(s) may not share"
    )
    if strict and np.triu(unknown).any():
        note += "; pairs with an unknown limit may not share in a deployed plan"
    return allowed, note


def _measured_modes(measured: pd.DataFrame | None, prof: pd.DataFrame, device: str) -> list[str]:
    """The sharing modes the device's pairs were measured in (else the profiles' modes)."""
    if measured is not None and "mode" in measured.columns:
        modes = measured.loc[measured["device_name"].astype(str) == device, "mode"].dropna().astype(str)
        if len(modes):
            return sorted(set(modes))
    return sorted(set(prof["mode"].dropna().astype(str))) if "mode" in prof.columns else []


def _check_sharing(choice: str) -> str:
    from sharewise.profiler.modes import modes_for

    allowed = [AUTO, *modes_for("cuda")]
    if choice not in allowed:
        raise ConfigError(f"--sharing must be one of {allowed}, got {choice!r}")
    return choice


def _sharing(choice: str, measured: list[str]) -> tuple[str, str | None]:
    """The mode of the plan's shared GPUs, and a note where it is not the mode the slowdowns were measured in."""
    from sharewise.profiler.modes import modes_for

    gpu_modes = modes_for("cuda")
    if choice == AUTO:
        choice = measured[0] if len(measured) == 1 and measured[0] in gpu_modes else gpu_modes[0]
    if measured == [choice]:
        return choice, None
    where = f"mode(s) {', '.join(measured)}" if measured else "an unrecorded mode"
    return choice, (
        f"the slowdowns were measured in {where}, the plan shares GPUs by {choice}: the predictions "
        f"carry over only as far as the modes interfere alike (choose with --sharing {' | '.join(gpu_modes)})"
    )


def _devices(config: RecommendConfig, cluster: pd.DataFrame | None) -> dict[str, Device]:
    """Each GPU id of the plan: its node, index, UUID and where they came from."""
    if cluster is None:
        src = f"--gpus {config.gpus}"
        return {str(g): Device(str(g), config.node, g, None, src) for g in range(config.gpus or 0)}
    if config.node is not None:
        raise ConfigError("--node names the node of --gpus N; with --cluster the CSV's 'node' column gives it")
    out: dict[str, Device] = {}
    for i, row in enumerate(cluster.to_dict("records")):
        gpu = str(row.get("gpu", "")).strip()
        if gpu in out:
            continue
        text = {c: str(row.get(c) or "").strip() for c in ("node", "gpu_uuid", "gpu_index")}
        src = f"{config.cluster} line {i + 2}"
        out[gpu] = Device(
            gpu, text["node"] or None, _gpu_index(gpu, text["gpu_index"], src), text["gpu_uuid"] or None, src
        )
    return out


def _gpu_index(gpu: str, given: str, source: str) -> int | None:
    """The GPU's index on its node: the ``gpu_index`` column, else the number ending the id (``3``, ``n1:3``)."""
    if given:
        if not given.isdigit():
            raise TraceError(f"{source}: column 'gpu_index' must be a whole number >= 0, got {given!r}")
        return int(given)
    match = re.fullmatch(r"(?:.*[:/])?(\d+)", gpu)
    return int(match.group(1)) if match else None


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temp file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _device(profiles: pd.DataFrame, workloads: list[str], device_name: str | None, data: str = "DIR") -> str:
    """The one device the plan is for: ``device_name``, else the only device the queued workloads are profiled
    on, else the only one that has a profile of each of them.

    A plan takes no stand-in profiles from another device (as ``predict`` and ``suggest`` do): it also checks
    memory fits and sets memory limits from the profiles, and those are the device's own. Where no device has
    every queued workload, the error says so in one line with the command that profiles the rest on this
    machine's device (or on the device most of them are profiled on).
    """
    present = sorted(set(profiles["device_name"].astype(str)))
    if device_name is not None:
        if device_name not in present:
            raise DatasetError(f"no profiles on device {device_name!r}; the dataset holds {present}")
        return device_name
    of_jobs = sorted(set(profiles.loc[profiles["workload"].astype(str).isin(workloads), "device_name"].astype(str)))
    if len(of_jobs) == 1:
        return of_jobs[0]
    if not of_jobs:
        raise DatasetError(
            f"no profile of any queued workload; the dataset's workloads: "
            f"{', '.join(sorted(set(profiles['workload'].astype(str)))[:30])}"
        )
    from sharewise.predictor.stand_in import profiled_devices

    devices = profiled_devices(profiles[profiles["workload"].astype(str).isin(workloads)])
    complete = [d for d in of_jobs if all(d in devices.get(w, set()) for w in workloads)]
    if len(complete) == 1:
        return complete[0]
    if complete:
        raise ConfigError(f"the profiles cover several devices {complete}; choose one with --device-name NAME")
    from sharewise.profiler.device import local_device_names

    count = {d: sum(d in devices.get(w, set()) for w in workloads) for d in of_jobs}
    here = next((d for d in local_device_names() if d in count), max(of_jobs, key=lambda d: (count[d], d)))
    missing = sorted(w for w in workloads if here not in devices.get(w, set()))
    raise DatasetError(_missing_line(profiles, missing, here, data))


def _missing_line(profiles: pd.DataFrame, missing: list[str], device: str, data: str) -> str:
    """One line: the queued workloads without a profile on the plan's ``device``, where they are profiled, and
    the command that profiles them there."""
    from sharewise.app.suggest import profile_folder
    from sharewise.predictor.stand_in import profile_command, profiled_devices

    devices = profiled_devices(profiles[profiles["workload"].astype(str).isin(missing)])
    where = sorted({d for w in missing for d in devices.get(w, set())})
    elsewhere = f" (profiled on {' and '.join(repr(d) for d in where)})" if where else ""
    command = profile_command(profiles, missing, device, profile_folder([data], profiles, device))
    return (
        f"no profile on device {device!r} of queued workload(s) {', '.join(missing[:10])}{elsewhere}; a plan is for "
        f"one device and uses its own profiles (memory included): profile them there: {command}, or choose "
        "another device with --device-name"
    )
