"""``--emit ray``: a Python script a Ray driver runs (or imports) to start the plan's jobs as Ray tasks.

One placement group per GPU of the plan, with one bundle ``{"GPU": k}`` (``STRICT_PACK``); the jobs of a
shared GPU are tasks in that one bundle with fractional ``num_gpus`` (``1 / 2`` each), so Ray assigns both
the bundle's GPU. Under ``mps`` each task's ``runtime_env`` sets ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (effective where an MPS daemon serves the node's GPUs). Ray's
resources are logical: ``num_gpus`` limits neither compute nor memory, and a bundle is not pinned to the
plan's node or GPU index, so the script says so. A join's task cannot enter the resident's bundle; it asks
for half a GPU anywhere. The script needs only ``ray``: ``submit(run_job)`` returns ``{job_id: ObjectRef}``.
Each task's ``runtime_env`` also holds the ``SHAREWISE_OBSERVE_*`` variables that make it serve its step rate
where sharewise's step hook is on the workers' ``PYTHONPATH``.
"""

from __future__ import annotations

import pprint

from sharewise.deploy import Emitter
from sharewise.deploy.plan import DeployPlan, PlacementDeploy

CODE = '''
import argparse

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

#: PLAN

def submit(run_job, *, cpus_per_job=1, timeout_s=60.0):
    """Start ``run_job(job_id, workload)`` for every placed job of PLACEMENTS; return ``{job_id: ObjectRef}``.

    Each GPU of the plan is a placement group of one bundle {"GPU": k} (plus cpus_per_job CPUs per job); its
    jobs run in that bundle, so the two jobs of a shared GPU get the same GPU id. A join (bundle None) asks
    for its fraction of a GPU outside any placement group. The placement groups live as long as the driver.
    """
    remote = ray.remote(run_job)
    refs = {}
    for p in PLACEMENTS:
        strategy = None
        if p["bundle"] is not None:
            bundle = dict(p["bundle"])
            if cpus_per_job:
                bundle["CPU"] = float(cpus_per_job * len(p["jobs"]))
            pg = placement_group([bundle], strategy="STRICT_PACK", name=p["name"])
            if not pg.wait(timeout_s):
                raise RuntimeError(
                    f"placement group {p['name']} {bundle} was not ready within {timeout_s} s: "
                    "the Ray cluster lacks these resources"
                )
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        for job in p["jobs"]:
            options = {"num_gpus": job["num_gpus"], "num_cpus": cpus_per_job, "name": job["job_id"]}
            if strategy is not None:
                options["scheduling_strategy"] = strategy
            if job["env"]:
                options["runtime_env"] = {"env_vars": job["env"]}
            refs[job["job_id"]] = remote.options(**options).remote(job["job_id"], job["workload"])
    return refs


def placeholder_job(job_id, workload):
    """Stands in for a job (replace it with the job's entry point): reports where Ray put it."""
    return {"job_id": job_id, "workload": workload, "gpu_ids": ray.get_gpu_ids()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Start the sharewise plan's jobs on a Ray cluster.")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument("--cpus-per-job", type=float, default=1)
    args = parser.parse_args()
    ray.init(address=args.address)
    for result in ray.get(list(submit(placeholder_job, cpus_per_job=args.cpus_per_job).values())):
        print(result)
'''


def placement_spec(placement: PlacementDeploy) -> dict:
    """Return one entry of ``PLACEMENTS``: the bundle (None for a join) and each queued job's task options.

    Example: ``{"name": "sharewise-gpu-0", "gpus": ["0"], "bundle": {"GPU": 1.0}, "jobs": [{"job_id": "j1",
    "workload": "bert", "num_gpus": 0.5, "env": {...}}, ...]}``.
    """
    k = len(placement.devices)
    share = 1.0 / len(placement.jobs) if placement.shared else float(k)
    join = placement.kind == "join"
    return {
        "name": f"sharewise-gpu-{placement.name}",
        "gpus": [d.gpu for d in placement.devices],
        "bundle": None if join else {"GPU": float(k)},
        "jobs": [
            {"job_id": j.job_id, "workload": j.workload, "num_gpus": share,
             "env": {**j.mps_env(), **j.observe_env()}}
            for j in placement.queued()
        ],
    }


def emit(plan: DeployPlan) -> str:
    """Return the driver script: the header as comments, ``PLACEMENTS``, ``WAITING`` and ``submit``."""
    notes = [
        "Ray's resources are logical: num_gpus limits neither compute nor memory; the MPS environment limits "
        "a task only where an MPS daemon serves its GPU",
        "bundles are not pinned to the plan's node or GPU index: Ray chooses; a shared GPU's two tasks share "
        "whichever GPU their bundle reserved",
        "run: python THIS_FILE --address auto, or import it and call submit(your_job_function)",
        "observed: each task's env holds SHAREWISE_OBSERVE_* (port, 0.0.0.0, name); it serves its step rate where "
        "sharewise's hook folder (`sharewise observe --print-env`) is first on the workers' PYTHONPATH",
    ]
    if plan.has_joins:
        notes.append("a join's task cannot enter the resident's bundle: it asks for its fraction of any GPU")
    head = "".join(f"# {line}\n" for line in plan.header(notes))
    specs = [placement_spec(p) for p in plan.placements]
    data = (
        f"PLACEMENTS = {pprint.pformat(specs, width=110, sort_dicts=False)}\n"
        f"WAITING = {pprint.pformat(list(plan.waiting), width=110)}\n\n"
    )
    doc = '"""sharewise plan for Ray: one placement group per GPU (see the comments above)."""\n'
    return head + doc + CODE.replace("#: PLAN\n", data)


EMITTER = Emitter(
    name="ray",
    summary="Ray: a driver script with a placement group per GPU and fractional num_gpus tasks",
    suffix=".py",
    emit=emit,
)
