"""``--emit hami``: one Pod per queued job with HAMi's GPU limits and, where the UUID is known, a GPU pin.

HAMi shares a GPU among pods by their resource limits, enforced in the container by HAMi-core:
``nvidia.com/gpu`` (GPUs), ``nvidia.com/gpumem`` (MiB: the plan's memory limit), ``nvidia.com/gpucores``
(percent of the GPU's compute: the plan's MPS active-thread percentage; not set for ``timeslice``, which the
pair was predicted without a cap). A job alone asks ``nvidia.com/gpumem-percentage: 100``, so no other pod
fits next to it. The annotation ``nvidia.com/use-gpuuuid`` pins a pod to the plan's GPU where the cluster
CSV gives ``gpu_uuid``; without it HAMi may put a pair's two pods on different GPUs of the node. The node
is a ``kubernetes.io/hostname`` node selector, so the format needs the node of every GPU.
"""

from __future__ import annotations

from sharewise.deploy import Emitter
from sharewise.deploy._k8s import OBSERVE_NOTE, TEMPLATE_NOTE, job_pod, pod_names, yaml_stream
from sharewise.deploy.plan import DeployPlan, JobDeploy, PlacementDeploy

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
USE_UUID = "nvidia.com/use-gpuuuid"


def limits(job: JobDeploy, placement: PlacementDeploy) -> dict[str, str]:
    """Return HAMi's limits of ``job``: ``{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5018", ...}``."""
    out = {GPU: str(len(placement.devices))}
    if not placement.shared:
        out[GPUMEM_PERCENTAGE] = "100"
        return out
    out[GPUMEM] = str(job.memory_limit_mib)
    if job.active_thread_percentage is not None:
        out[GPUCORES] = str(job.active_thread_percentage)
    return out


def emit(plan: DeployPlan) -> str:
    """Return the YAML stream of one Pod per queued job (a join's resident keeps running as it is)."""
    names = pod_names(plan)
    docs = []
    unpinned = 0
    for p in plan.placements:
        uuids = [d.uuid for d in p.devices]
        pin = {USE_UUID: ",".join(uuids)} if all(uuids) else {}
        unpinned += p.shared and not pin
        for job in p.queued():
            res = {"limits": limits(job, p)}
            docs.append(job_pod(names[job.job_id], job, p, resources=res, extra_annotations=pin))
    notes = [
        "HAMi: pods share a GPU by their nvidia.com/gpumem (MiB) and nvidia.com/gpucores (percent) limits, "
        "enforced by HAMi-core; a job alone asks nvidia.com/gpumem-percentage 100 so nothing fits beside it",
        TEMPLATE_NOTE,
        OBSERVE_NOTE,
    ]
    if plan.sharing != "mps":
        notes.append("timeslice: no nvidia.com/gpucores cap (the slowdowns were predicted without one)")
    if unpinned:
        notes.append(
            f"{unpinned} shared GPU(s) have no UUID, so their pods are not pinned (nvidia.com/use-gpuuuid) and "
            "HAMi may place a pair on different GPUs of the node: add a gpu_uuid column to the cluster CSV"
        )
    if plan.has_joins:
        notes.append(
            "a join's resident keeps running with its own HAMi limits; HAMi places the joining pod on its GPU "
            "only if the resident's nvidia.com/gpumem leaves room for the joiner's"
        )
    return yaml_stream(plan.header(notes), docs)


EMITTER = Emitter(
    name="hami",
    summary="HAMi: a Pod per job with nvidia.com/gpu, gpumem, gpucores limits and nvidia.com/use-gpuuuid",
    suffix=".yaml",
    emit=emit,
    needs_node=True,
)
