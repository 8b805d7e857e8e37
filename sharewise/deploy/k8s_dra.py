"""``--emit k8s-dra``: one ResourceClaim per GPU of the plan and one Pod per job that references it.

Kubernetes with the NVIDIA DRA driver: pods that name the same ``ResourceClaim`` share its device. A shared
GPU's claim (API ``resource.k8s.io/v1``, device class ``gpu.nvidia.com``) carries an opaque ``GpuConfig``:

- ``mps``: ``sharing.strategy: MPS`` with ``mpsConfig.defaultActiveThreadPercentage`` and
  ``mpsConfig.defaultPinnedDeviceMemoryLimit`` set to the larger of the two jobs' values (the claim-wide
  defaults), and each pod lowering them to its own with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (an MPS client's environment may tighten the daemon's defaults).
- ``timeslice``: ``sharing.strategy: TimeSlicing`` with ``timeSlicingConfig.interval: Default``; time-slicing
  limits no memory, so the limits are only annotations (the plan emitted the pair because they fit).

A job alone gets a claim of its own without sharing config (exclusive). A claim pins its GPU by UUID where
the cluster CSV gives ``gpu_uuid``, else by index where the node is known, else the driver picks a free GPU.
For a join, the resident's pod is emitted too (``sharewise/resident: "true"``): it must be re-created with
the shared claim, since a running pod's claims and an allocated claim's config cannot change.
"""

from __future__ import annotations

import json

from sharewise.deploy import Emitter
from sharewise.deploy._k8s import (
    OBSERVE_NOTE,
    TEMPLATE_NOTE,
    job_pod,
    mebibytes,
    pod_names,
    unique_names,
    yaml_stream,
)
from sharewise.deploy.plan import DeployPlan, PlacementDeploy

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
GPU_CONFIG_API = "resource.nvidia.com/v1beta1"
STRATEGY = {"mps": "MPS", "timeslice": "TimeSlicing"}
TIME_SLICE_INTERVAL = "Default"
REQUEST = "gpu"


def claim_names(plan: DeployPlan) -> dict[str, str]:
    """Return each placement's claim name, ``sharewise-gpu-<node>-<gpu>`` as a DNS label, by placement name."""
    return unique_names([p.name for p in plan.placements], prefix="sharewise-gpu-")


def selector(placement: PlacementDeploy) -> str | None:
    """Return the CEL expression that pins the claim's device(s), or None where nothing identifies them.

    Example: ``device.attributes["gpu.nvidia.com"].uuid == "GPU-5c3a..."``.
    """
    devices = placement.devices
    if all(d.uuid for d in devices):
        attr, values = "uuid", [d.uuid for d in devices]
    elif all(d.node and d.index is not None for d in devices):
        attr, values = "index", [d.index for d in devices]
    else:
        return None
    lhs = f'device.attributes["{DRIVER}"].{attr}'
    if len(values) == 1:
        return f"{lhs} == {json.dumps(values[0])}"
    return f"{lhs} in {json.dumps(values)}"


def gpu_config(placement: PlacementDeploy) -> dict:
    """Return the NVIDIA driver's opaque ``GpuConfig`` of a shared GPU (see the module docstring)."""
    sharing: dict = {"strategy": STRATEGY[placement.sharing]}
    if placement.sharing == "mps":
        sharing["mpsConfig"] = {
            "defaultActiveThreadPercentage": max(j.active_thread_percentage for j in placement.jobs),
            "defaultPinnedDeviceMemoryLimit": mebibytes(max(j.memory_limit_mib for j in placement.jobs)),
        }
    else:
        sharing["timeSlicingConfig"] = {"interval": TIME_SLICE_INTERVAL}
    return {"apiVersion": GPU_CONFIG_API, "kind": "GpuConfig", "sharing": sharing}


def resource_claim(placement: PlacementDeploy, name: str) -> dict:
    """Return the ``ResourceClaim`` of one placement: its device(s) and, when shared, the ``GpuConfig``."""
    exactly: dict = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": len(placement.devices)}
    cel = selector(placement)
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    devices: dict = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    if placement.shared:
        devices["config"] = [{"requests": [REQUEST], "opaque": {"driver": DRIVER, "parameters": gpu_config(placement)}}]
    meta = {
        "name": name,
        "annotations": {
            "sharewise/gpu": ",".join(d.gpu for d in placement.devices),
            "sharewise/jobs": ",".join(j.job_id for j in placement.jobs),
        },
    }
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": meta, "spec": {"devices": devices}}


def emit(plan: DeployPlan) -> str:
    """Return the YAML stream: per placement its ResourceClaim, then the Pod of each of its jobs."""
    names = pod_names(plan)
    claim_of = claim_names(plan)
    docs: list[dict] = []
    for p in plan.placements:
        docs.append(resource_claim(p, claim_of[p.name]))
        claims = [{"name": REQUEST, "resourceClaimName": claim_of[p.name]}]
        for job in p.jobs:
            docs.append(
                job_pod(
                    names[job.job_id],
                    job,
                    p,
                    resources={"claims": [{"name": REQUEST}]},
                    env=job.mps_env(),
                    claims=claims,
                )
            )
    notes = [
        f"NVIDIA DRA driver: pods that reference the same ResourceClaim share its GPU (device class {DEVICE_CLASS}); "
        "create the claims before the pods, in the pods' namespace",
        TEMPLATE_NOTE,
        OBSERVE_NOTE,
    ]
    if plan.sharing == "mps":
        notes.append(
            "MPS: a claim's defaults are the larger of its two jobs' thread percentage and memory limit; each "
            "pod lowers them to its own (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
        )
    else:
        notes.append(
            "TimeSlicing limits no memory: the limits are the sharewise/memory-limit annotations only; the "
            "pairs were emitted because their limits fit on the device together"
        )
    if any(not selector(p) for p in plan.placements):
        notes.append(
            "claims without a selector take any free GPU (give gpu_uuid, or node and a GPU index, in the "
            "cluster CSV to pin them)"
        )
    if plan.has_joins:
        notes.append(
            'a join\'s resident (sharewise/resident: "true") must be re-created with its pod here: a running '
            "pod's claims cannot change"
        )
    return yaml_stream(plan.header(notes), docs)


EMITTER = Emitter(
    name="k8s-dra",
    summary="Kubernetes NVIDIA DRA driver: a ResourceClaim per GPU (GpuConfig MPS or TimeSlicing), a Pod per job",
    suffix=".yaml",
    emit=emit,
)
