"""The neutral deployment plan: per GPU its node, index and UUID, the sharing mode, the jobs and their limits.

Every stack format (``sharewise.deploy``) is made from this plan, and ``--emit plan`` writes it as JSON. The
rules that turn a pairing (``sharewise.planner.pairing.Plan``) and the jobs' solo profiles into limits are
stated here once, as constants, and copied into the JSON (``rules``):

- **memory limit** of a job that shares a GPU: its peak device memory from the profile (the rule of
  ``sharewise.predictor.memory.job_memory``: peak reserved, else peak allocated, else RSS growth, else
  ``4 x f_param_bytes + f_activation_bytes``; medians over the workload's profiles) times
  ``1 + MEMORY_MARGIN_FRACTION`` plus ``MEMORY_MARGIN_BYTES`` (the CUDA context and allocator slack the
  profile does not count), rounded up to a whole MiB. A job alone has the whole GPU and no limit.
- **memory fit**: two jobs share a GPU only if their limits sum to at most the device memory; a pair with
  an unknown limit, or on a device of unknown memory, is never emitted (``recommend`` forbids such pairs
  before it plans, so the plan holds none).
- **MPS active-thread percentage** of a shared job: its share of the pair's SM demand,
  ``100 * d / (d_a + d_b)`` rounded and clipped to ``[MPS_MIN_PERCENT, 100 - MPS_MIN_PERCENT]``, the
  partner getting the rest, so the two sum to 100 (Slurm's ``mps`` count then holds both on one GPU). The
  demand ``d`` is ``f_nvml_sm_util_mean / 100``, else ``f_busy_frac``, else 1 (unknown counts as saturating).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sharewise.deploy import Emitter
from sharewise.errors import DatasetError, InvalidPlacementError
from sharewise.predictor.memory import MEMORY_COLUMNS, STATIC_MEMORY, job_memory
from sharewise.profiler.exporter import DEFAULT_PORT, ENV_HOST, ENV_NAME, ENV_PORT

if TYPE_CHECKING:
    from sharewise.planner.pairing import Plan

SCHEMA = "sharewise-deploy-plan/1"
MIB = 2**20
MEMORY_MARGIN_FRACTION = 0.10
MEMORY_MARGIN_BYTES = 512 * MIB
MPS_MIN_PERCENT = 10
#: SM demand of a job, in the order preferred: (profile column, factor to a 0..1 fraction).
DEMAND_COLUMNS = (("f_nvml_sm_util_mean", 0.01), ("f_busy_frac", 1.0))
#: ``sharing`` of a GPU that holds one job.
EXCLUSIVE = "exclusive"
#: An observed job of a plan binds every address: the cluster's Prometheus scrapes it from another machine.
OBSERVE_HOST = "0.0.0.0"

RULES = {
    "memory_limit": (
        f"limit = peak x {1 + MEMORY_MARGIN_FRACTION:g} + {MEMORY_MARGIN_BYTES // MIB} MiB, rounded up to a "
        f"whole MiB, for every job that shares a GPU; peak = the first measured of {', '.join(MEMORY_COLUMNS)} "
        f"(medians of the workload's profiles), else 4 x {STATIC_MEMORY[0]} + {STATIC_MEMORY[1]}; "
        "a job alone has the whole GPU(s) and no limit"
    ),
    "memory_fit": (
        "two jobs share a GPU only if their limits sum to at most device_memory_bytes; pairs with an unknown "
        "limit, or on a device of unknown memory, are never emitted"
    ),
    "mps_active_thread_percentage": (
        "per job of an MPS-shared GPU: where the model has pairs measured under the sharing knob, the split the "
        "slowdown contract chose (planner.contract: both jobs' bounds kept at the predicted p90 at that split, then "
        "the highest 1/p50_a + 1/p50_b; split_source 'contract'); else 100 x d / (d_a + d_b), rounded and clipped "
        f"to [{MPS_MIN_PERCENT}, {100 - MPS_MIN_PERCENT}], the partner gets the rest (the two sum to 100); d = "
        + ", else ".join(f"{c} x {k:g}" for c, k in DEMAND_COLUMNS)
        + ", else 1 (unknown counts as saturating; split_source 'demand', not predicted); null for timeslice and "
        "for a job alone"
    ),
    "slowdowns": (
        "p50/p90 are the model's predictions for the profiled device in the measured sharing mode: at the "
        "emitted split where split_source is 'contract' (predicted from pairs measured under the knob and the jobs' "
        "scaling curves), else without any thread or memory limit, as the runs behind them had none"
    ),
    "observe": (
        f"every job exports its step rate for `sharewise collect` on port {DEFAULT_PORT} + its rank among the plan's "
        f"jobs of its node, bound to {OBSERVE_HOST}, named by its workload, once its command runs under "
        "`sharewise observe --` (or with sharewise's hook folder first on PYTHONPATH: `sharewise observe --print-env`)"
    ),
}


@dataclass(frozen=True)
class WorkloadResources:
    """What a workload's solo profiles say about its memory and SM demand (None where they say nothing)."""

    peak_memory_bytes: float | None
    memory_source: str | None
    sm_demand: float | None
    demand_source: str | None


def workload_resources(profiles: pd.DataFrame, workloads: Sequence[str]) -> dict[str, WorkloadResources]:
    """Return each workload's peak memory and SM demand from the medians of its profiles.

    Example: ``{"bert": WorkloadResources(6.1e9, "f_mem_peak_reserved_bytes", 0.82, "f_nvml_sm_util_mean")}``.
    """
    mem_cols = [c for c in (*MEMORY_COLUMNS, *STATIC_MEMORY) if c in profiles.columns]
    demand_cols = [c for c, _ in DEMAND_COLUMNS if c in profiles.columns]
    med = profiles.groupby("workload")[[*mem_cols, *demand_cols]].median().reindex(list(workloads))
    peak = (
        job_memory(med[mem_cols].to_numpy(dtype=float), {c: i for i, c in enumerate(mem_cols)})
        if mem_cols
        else np.full(len(workloads), np.nan)
    )
    out = {}
    for n, w in enumerate(workloads):
        row = med.iloc[n]
        source = next((c for c in MEMORY_COLUMNS if c in mem_cols and math.isfinite(row[c])), None)
        if source is None and math.isfinite(peak[n]):
            source = f"4 x {STATIC_MEMORY[0]} + {STATIC_MEMORY[1]}"
        demand = next(((c, row[c] * k) for c, k in DEMAND_COLUMNS if c in demand_cols and math.isfinite(row[c])), None)
        out[w] = WorkloadResources(
            float(peak[n]) if math.isfinite(peak[n]) else None,
            source,
            round(float(demand[1]), 4) if demand else None,
            demand[0] if demand else None,
        )
    return out


def memory_limit(peak_bytes: float | None) -> int | None:
    """Return the memory limit of a sharing job with peak ``peak_bytes`` (see ``RULES``), None if unknown.

    Example: a peak of 4 GiB gives ``4 * 1.1 GiB + 512 MiB`` = 5018 MiB = ``5261755392``.
    """
    if peak_bytes is None or not math.isfinite(peak_bytes):
        return None
    return math.ceil((peak_bytes * (1 + MEMORY_MARGIN_FRACTION) + MEMORY_MARGIN_BYTES) / MIB) * MIB


def limits_fit(limits: np.ndarray, device_memory: float | None) -> np.ndarray:
    """Return ``fits[i, j]``: whether limits ``i`` and ``j`` (bytes, NaN if unknown) fit on one device together.

    An unknown limit or device memory never fits. Example: limits ``[6e9, 12e9]`` on 16e9 give
    ``[[True, False], [False, False]]``.
    """
    total = limits[:, None] + limits[None, :]
    if device_memory is None or not math.isfinite(device_memory):
        return np.zeros(total.shape, dtype=bool)
    return np.isfinite(total) & (total <= device_memory)


def sharing_allowed(resources: dict[str, WorkloadResources], workloads: Sequence[str], device_memory: float | None,
                    strict: bool) -> tuple[np.ndarray, np.ndarray]:
    """The memory rule of sharing, for ``recommend`` and ``run`` alike: return ``(allowed, unknown)``, where
    ``allowed[i, j]`` says whether workloads ``i`` and ``j`` may share a device: their memory limits
    (``memory_limit`` of their peaks, ``resources``) fit ``device_memory`` together, or (unless ``strict``) a
    limit or the device memory is unknown (``unknown[i, j]``: the pair's measured status then decides).

    Example: peaks giving limits of 6e9 and 12e9 bytes and one unknown, on 16e9: ``allowed`` is ``[[True, False,
    True], [False, False, True], [True, True, True]]``; with ``strict`` the last row and column are False.
    """
    limits = np.array([memory_limit(resources[w].peak_memory_bytes) or np.nan for w in workloads], dtype=float)
    ok = limits_fit(limits, device_memory)
    known_device = device_memory is not None and math.isfinite(device_memory)
    unknown = ~np.isfinite(limits[:, None] + limits[None, :]) | (not known_device)
    return (ok if strict else ok | unknown), unknown


def thread_percentages(demands: Sequence[float | None]) -> list[int]:
    """Return the MPS active-thread percentages of the two jobs of a GPU (see ``RULES``).

    Example: demands ``[0.9, 0.3]`` give ``[75, 25]``; ``[None, 0.5]`` gives ``[67, 33]``.
    """
    if len(demands) != 2:
        raise ValueError(f"thread percentages are for the two jobs of a shared GPU, got {len(demands)} jobs")
    d = [x if x is not None and x > 0 else 1.0 for x in demands]
    first = min(max(round(100 * d[0] / (d[0] + d[1])), MPS_MIN_PERCENT), 100 - MPS_MIN_PERCENT)
    return [first, 100 - first]


@dataclass(frozen=True)
class Device:
    """A GPU of the plan: its id in the plan, node, index on the node, UUID, and where these came from."""

    gpu: str
    node: str | None
    index: int | None
    uuid: str | None
    source: str

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "node": self.node, "index": self.index, "uuid": self.uuid}


@dataclass(frozen=True)
class JobDeploy:
    """One job of a placement: predicted slowdowns, memory limit and (MPS) thread percentage."""

    job_id: str
    workload: str
    resident: bool
    p50: float
    p90: float
    peak_memory_bytes: float | None
    memory_source: str | None
    memory_limit_bytes: int | None
    active_thread_percentage: int | None
    sm_demand: float | None
    demand_source: str | None
    spec: str | None = None  # the workload spec the job was queued as, where it is a command
    observe_port: int | None = None  # the port it serves its step rate on (``observe_env``)
    #: The job's bound of the slowdown contract (``"<= 1.3"``, ``"protected (<= 1.25)"``, ``"none"``; None: none asked).
    bound: str | None = None
    #: Where its thread percentage comes from: ``"contract"`` (the split chosen for its bound, predicted at it) or
    #: ``"demand"`` (the SM-demand ratio, not predicted: no pair was measured under the knob).
    split_source: str | None = None

    @property
    def memory_limit_mib(self) -> int | None:
        return None if self.memory_limit_bytes is None else self.memory_limit_bytes // MIB

    def mps_env(self) -> dict[str, str]:
        """Return the MPS client environment that holds the job to its thread percentage and memory limit.

        ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` is per device ordinal as the job sees it (``0``: its one GPU);
        empty for a job that does not run under MPS. Example: ``{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "55",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=5018M"}``.
        """
        if self.active_thread_percentage is None:
            return {}
        return {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(self.active_thread_percentage),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={self.memory_limit_mib}M",
        }

    def observe_env(self) -> dict[str, str]:
        """Return the environment that makes the job export its steps (``sharewise observe``; see ``RULES``).

        Example: ``{"SHAREWISE_OBSERVE_PORT": "9478", "SHAREWISE_OBSERVE_HOST": "0.0.0.0",
        "SHAREWISE_OBSERVE_NAME": "bert"}``; empty for a job given no port.
        """
        if self.observe_port is None:
            return {}
        return {ENV_PORT: str(self.observe_port), ENV_HOST: OBSERVE_HOST, ENV_NAME: self.workload}

    def to_json(self) -> dict:
        spec = {} if self.spec is None else {"spec": self.spec}
        return {
            "job_id": self.job_id,
            "workload": self.workload,
            **spec,
            "resident": self.resident,
            "p50": self.p50,
            "p90": self.p90,
            "peak_memory_bytes": None if self.peak_memory_bytes is None else int(self.peak_memory_bytes),
            "memory_source": self.memory_source,
            "memory_limit_bytes": self.memory_limit_bytes,
            "memory_limit_mib": self.memory_limit_mib,
            "active_thread_percentage": self.active_thread_percentage,
            "split_source": self.split_source,
            "bound": self.bound,
            "sm_demand": self.sm_demand,
            "demand_source": self.demand_source,
            "observe": {"port": self.observe_port, "env": self.observe_env()},
        }


@dataclass(frozen=True)
class PlacementDeploy:
    """The GPU(s) of one placement, how they are shared (``exclusive``, ``mps``, ``timeslice``), the jobs."""

    devices: tuple[Device, ...]
    kind: str
    sharing: str
    gain: float
    jobs: tuple[JobDeploy, ...]

    @property
    def shared(self) -> bool:
        return len(self.jobs) > 1

    @property
    def name(self) -> str:
        """A name for the placement's GPU(s): ``"n1-3"`` (node n1, GPU 3) or ``"3"`` without a node."""
        d = self.devices[0]
        return f"{d.node}-{d.gpu}" if d.node else d.gpu

    def queued(self) -> list[JobDeploy]:
        """The jobs of the placement that come from the queue (not the resident of a join)."""
        return [j for j in self.jobs if not j.resident]

    def partner(self, job: JobDeploy) -> JobDeploy | None:
        """The other job on the GPU, or None for a job alone."""
        return next((j for j in self.jobs if j is not job), None)

    def to_json(self) -> dict:
        total = [j.memory_limit_bytes for j in self.jobs]
        return {
            "gpus": [d.to_json() for d in self.devices],
            "kind": self.kind,
            "sharing": self.sharing,
            "gain": self.gain,
            "memory_limit_total_bytes": sum(total) if self.shared and None not in total else None,
            "jobs": [j.to_json() for j in self.jobs],
        }


@dataclass(frozen=True)
class DeployPlan:
    """The neutral plan: placements with limits, the jobs left waiting, what the predictions rest on.

    ``to_json()`` example (abridged)::

        {"schema": "sharewise-deploy-plan/1", "sharing": "mps", "device_memory_bytes": 85899345920,
         "rules": {"memory_limit": "...", "memory_fit": "...", "mps_active_thread_percentage": "..."},
         "placements": [{"gpus": [{"gpu": "0", "node": "n1", "index": 0, "uuid": "GPU-..."}], "kind": "pair",
                         "sharing": "mps", "gain": 0.52, "memory_limit_total_bytes": 11811160064,
                         "jobs": [{"job_id": "j1", "workload": "bert", "p50": 1.3, "p90": 1.5,
                                   "memory_limit_mib": 6144, "active_thread_percentage": 55, ...}, ...]}],
         "waiting": ["j9"], "work_rate": 5.9, "exclusive_work_rate": 5.0, "notes": ["..."]}
    """

    sharing: str
    device_name: str
    measured_modes: tuple[str, ...]
    model: str
    max_slowdown: float
    device_memory_bytes: float | None
    placements: tuple[PlacementDeploy, ...]
    waiting: tuple[str, ...]
    work_rate: float
    exclusive_work_rate: float
    notes: tuple[str, ...] = field(default=())

    @property
    def has_joins(self) -> bool:
        """Whether a queued job joins a resident somewhere (stacks differ in what that takes)."""
        return any(p.kind == "join" for p in self.placements)

    def jobs(self) -> list[str]:
        """Every queued job of the plan once: placed ones in placement order, then the waiting ones."""
        return [j.job_id for p in self.placements for j in p.queued()] + list(self.waiting)

    def header(self, stack_notes: Sequence[str] = ()) -> list[str]:
        """Lines every emitted file opens with (as comments): what the plan is, the stack's caveats, notes."""
        shared = sum(p.shared for p in self.placements)
        lines = [
            f"sharewise recommend: {len(self.jobs()) - len(self.waiting)} job(s) on {len(self.placements)} "
            f"placement(s), {shared} shared ({self.sharing}); slowdowns predicted for device "
            f"{self.device_name!r} by {self.model}",
            f"expected work rate {self.work_rate:.2f} GPU-equivalents vs {self.exclusive_work_rate:.2f} "
            "without sharing",
            "waiting (no GPU in this plan): " + (", ".join(self.waiting) or "none"),
        ]
        return [*lines, *stack_notes, *(f"note: {n}" for n in self.notes)]

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "sharing": self.sharing,
            "predicted_on": {
                "device": self.device_name,
                "measured_modes": list(self.measured_modes),
                "model": self.model,
            },
            "max_slowdown": self.max_slowdown,
            "device_memory_bytes": None if self.device_memory_bytes is None else int(self.device_memory_bytes),
            "rules": dict(RULES),
            "placements": [p.to_json() for p in self.placements],
            "waiting": list(self.waiting),
            "work_rate": round(self.work_rate, 6),
            "exclusive_work_rate": round(self.exclusive_work_rate, 6),
            "notes": list(self.notes),
        }


def build_deploy_plan(
    plan: Plan,
    *,
    devices: dict[str, Device],
    resources: dict[str, WorkloadResources],
    sharing: str,
    device_memory: float | None,
    device_name: str,
    measured_modes: Sequence[str],
    model: str,
    max_slowdown: float,
) -> DeployPlan:
    """Turn a pairing ``plan`` into a ``DeployPlan``: devices, memory limits and thread percentages.

    ``devices`` maps each GPU id of the placements to its ``Device``; ``resources`` each workload to its
    ``WorkloadResources``; ``sharing`` is the mode of the shared GPUs (``mps`` or ``timeslice``);
    ``device_memory`` the bytes two limits must fit in. A shared GPU whose limits are unknown or do not fit
    raises: ``recommend`` forbids such pairs before planning, so this is a guard.
    """
    out = []
    ranks: dict[str | None, int] = {}  # observed jobs of a node so far: each gets the next port
    for p in plan.placements:
        shared = len(p["jobs"]) > 1
        node = devices[p["gpus"][0]].node
        ports = [DEFAULT_PORT + ranks.get(node, 0) + k for k in range(len(p["jobs"]))]
        ranks[node] = ranks.get(node, 0) + len(p["jobs"])
        res = [resources[w] for w in p["workloads"]]
        limits = [memory_limit(r.peak_memory_bytes) if shared else None for r in res]
        if shared:
            if None in limits or device_memory is None or not math.isfinite(device_memory):
                raise DatasetError(
                    f"GPU {p['gpus'][0]}: the memory of {p['workloads']} or of the device is unknown, so no "
                    "memory limit can be set; profile the workloads where f_mem_* and f_device_mem_bytes are "
                    "measured (any CUDA device)"
                )
            if sum(limits) > device_memory:
                raise InvalidPlacementError(
                    f"GPU {p['gpus'][0]}: limits {limits} exceed the device's {int(device_memory)} bytes"
                )
        if shared and sharing == "mps" and p.get("split") is not None:
            # The split the slowdown contract chose (``planner.contract``): predicted at it, bounds kept at p90.
            pct = [int(p["split"]), 100 - int(p["split"])]
        elif shared and sharing == "mps":
            pct = thread_percentages([r.sm_demand for r in res])
        else:
            pct = [None] * len(res)
        jobs = tuple(
            JobDeploy(
                job_id=str(job),
                workload=str(w),
                resident=p["kind"] == "join" and k == 1,
                p50=float(p["p50"][k]),
                p90=float(p["p90"][k]),
                peak_memory_bytes=r.peak_memory_bytes,
                memory_source=r.memory_source,
                memory_limit_bytes=limits[k],
                active_thread_percentage=pct[k],
                sm_demand=r.sm_demand,
                demand_source=r.demand_source,
                spec=None if spec == w else spec,
                observe_port=ports[k],
                bound=(p.get("bounds") or [None] * len(p["jobs"]))[k],
                split_source="contract" if p.get("split") is not None else ("demand" if pct[k] is not None else None),
            )
            for k, (job, w, r, spec) in enumerate(
                zip(p["jobs"], p["workloads"], res, p.get("specs", p["workloads"]), strict=True)
            )
        )
        out.append(
            PlacementDeploy(
                devices=tuple(devices[g] for g in p["gpus"]),
                kind=p["kind"],
                sharing=sharing if shared else EXCLUSIVE,
                gain=float(p["gain"]),
                jobs=jobs,
            )
        )
    return DeployPlan(
        sharing=sharing,
        device_name=device_name,
        measured_modes=tuple(measured_modes),
        model=model,
        max_slowdown=max_slowdown,
        device_memory_bytes=device_memory,
        placements=tuple(out),
        waiting=tuple(plan.waiting),
        work_rate=plan.work_rate,
        exclusive_work_rate=plan.exclusive_work_rate,
        notes=tuple(plan.notes),
    )


def _emit(plan: DeployPlan) -> str:
    return json.dumps(plan.to_json(), indent=2) + "\n"


EMITTER = Emitter(
    name="plan",
    summary="the neutral plan as JSON: per GPU the node, index, UUID, mode, jobs, slowdowns, limits, rules",
    suffix=".json",
    emit=_emit,
)
