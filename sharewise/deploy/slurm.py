"""``--emit slurm``: a shell script with one ``sbatch`` line per queued job, pinned to the plan's node.

- ``mps``: ``--gres=mps:<percent>``, the job's MPS active-thread percentage, assuming ``gres.conf`` gives each
  GPU ``Name=mps Count=100`` (then the count is a percent of one GPU, Slurm sets
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` from it, and a pair's percentages sum to 100 so one GPU holds
  both); the memory limit goes in ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` through ``--export``.
- ``timeslice``: ``--gres=shard:1``, assuming ``Name=shard Count=2`` per GPU (at most two jobs on a GPU, as
  in the plan); shards limit no memory.
- a job alone: ``--gres=gpu:<k>``.

``-w <node>`` pins the node; Slurm cannot pin a GPU, so a pair shares a GPU only if Slurm puts both jobs on
the same one (the script says so). The job script is a placeholder, ``<job_id>.sbatch``. Every job gets the
``SHAREWISE_OBSERVE_*`` variables through ``--export`` (its port in its line's comment), so a batch script that
runs it under ``sharewise observe`` serves its step rate to Prometheus.
"""

from __future__ import annotations

import shlex

from sharewise.deploy import Emitter
from sharewise.deploy.plan import DeployPlan, JobDeploy, PlacementDeploy

MPS_COUNT_PER_GPU = 100
SHARDS_PER_GPU = 2


def gres(job: JobDeploy, placement: PlacementDeploy) -> str:
    """Return the job's ``--gres`` value: ``mps:55``, ``shard:1`` or ``gpu:2`` (see the module docstring)."""
    if not placement.shared:
        return f"gpu:{len(placement.devices)}"
    if placement.sharing == "mps":
        return f"mps:{job.active_thread_percentage * MPS_COUNT_PER_GPU // 100}"
    return f"shard:{SHARDS_PER_GPU // len(placement.jobs)}"


def sbatch(job: JobDeploy, placement: PlacementDeploy) -> list[str]:
    """Return the ``sbatch`` command of one job as arguments."""
    nodes = ",".join(sorted({d.node for d in placement.devices}))
    args = ["sbatch", f"--job-name={job.job_id}", "-w", nodes, f"--gres={gres(job, placement)}"]
    export = dict(job.observe_env())
    if placement.shared and placement.sharing == "mps":
        export["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={job.memory_limit_mib}M"
    if export:
        args.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in export.items())]))
    return [*args, f"{job.job_id}.sbatch"]


def _comment(job: JobDeploy, placement: PlacementDeploy) -> str:
    gpus = ",".join(d.gpu for d in placement.devices)
    partner = placement.partner(job)
    metrics = "" if job.observe_port is None else f"; metrics on {placement.devices[0].node}:{job.observe_port}"
    if partner is None:
        return f"GPU {gpus} alone{metrics}"
    joins = " (resident, already running)" if partner.resident else ""
    return (
        f"GPU {gpus} with {partner.job_id}{joins}: p50 {job.p50:.2f}, p90 {job.p90:.2f}, "
        f"memory limit {job.memory_limit_mib} MiB{metrics}"
    )


def emit(plan: DeployPlan) -> str:
    """Return the script: the plan's header as comments, then one ``sbatch`` line per queued job."""
    notes = [
        "Slurm cannot pin a GPU: -w pins the node only, and a pair shares a GPU only if Slurm gives both jobs "
        "the same one (it may not when other GPUs of the node are free)",
        f"assumes gres.conf gives each GPU Name=mps Count={MPS_COUNT_PER_GPU} (mps:<n> is a percent of a GPU; "
        f"Slurm sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from it) and Name=shard Count={SHARDS_PER_GPU}",
        "replace each <job_id>.sbatch with the job's batch script",
        "observed: --export gives each job SHAREWISE_OBSERVE_* (port, 0.0.0.0, name); in the batch script run the "
        "job as `srun sharewise observe -- COMMAND` and it serves its step rate on the port in its comment, for a "
        "Prometheus that scrapes those node:port targets (`sharewise collect` turns them into pair rows)",
    ]
    if plan.sharing != "mps":
        notes.append("shards limit no memory: the limits are in the comments only")
    lines = ["#!/bin/sh", *(f"# {line}" for line in plan.header(notes))]
    for p in plan.placements:
        for job in p.queued():
            lines.append(f"{shlex.join(sbatch(job, p))}  # {_comment(job, p)}")
    return "\n".join(lines) + "\n"


EMITTER = Emitter(
    name="slurm",
    summary="Slurm: one sbatch line per job (--gres=mps:<percent> or shard:<n>, -w <node>)",
    suffix=".sh",
    emit=emit,
    needs_node=True,
)
