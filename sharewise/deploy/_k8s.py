"""What the two Kubernetes emitters share: DNS names, a job's pod and annotations, and the YAML stream.

Each job becomes a ``v1`` Pod that is a template of the job's real pod: sharewise sets the node selector,
the GPU request (a DRA claim or HAMi limits), the MPS environment and ``sharewise/*`` annotations (the
predicted slowdowns, the partner, the memory limit); the image is a placeholder to replace.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

from sharewise.deploy.plan import DeployPlan, JobDeploy, PlacementDeploy
from sharewise.errors import MissingDependencyError

ANNOTATION_PREFIX = "sharewise"
IMAGE_PLACEHOLDER = "replace-with-the-job-image"
CONTAINER = "main"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TEMPLATE_NOTE = (
    f"each Pod is a template of the job's pod: replace the image ({IMAGE_PLACEHOLDER}) and add the job's "
    "command; keep what sharewise set (nodeSelector, GPU request, env, sharewise/* annotations)"
)
#: Where Prometheus's usual pod discovery (the ``kubernetes-pods`` job) looks for a pod's metrics.
SCRAPE_ANNOTATIONS = ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path")
METRICS_PORT_NAME = "sharewise"
OBSERVE_NOTE = (
    "observed: each Pod serves its job's step rate on its 'sharewise' port (SHAREWISE_OBSERVE_* env, "
    "prometheus.io/* annotations) once the command runs as `sharewise observe -- COMMAND` (sharewise installed in "
    "the image); `sharewise collect --prometheus URL` turns the pairs Prometheus saw into pair rows"
)


def dns_label(text: str, limit: int = 63) -> str:
    """Return ``text`` as a DNS-1123 label: ``"Job_7"`` -> ``"job-7"`` (lowercase, ``-``, at most ``limit``)."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return label or "x"


def unique_names(keys: list[str], prefix: str = "", limit: int = 56) -> dict[str, str]:
    """Return a distinct DNS label per key (``prefix`` + key); keys that clash once cleaned get a hash suffix.

    Example: ``unique_names(["J1", "j1", "j2"])`` -> ``{"J1": "j1-888066", "j1": "j1-679212", "j2": "j2"}``.
    """
    base = {k: dns_label(prefix + k, limit) for k in keys}
    count = Counter(base.values())
    return {k: f"{n}-{hashlib.sha1(k.encode()).hexdigest()[:6]}" if count[n] > 1 else n for k, n in base.items()}


def pod_names(plan: DeployPlan) -> dict[str, str]:
    """Return a distinct pod name per job id of the plan."""
    return unique_names([j.job_id for p in plan.placements for j in p.jobs])


def mebibytes(mib: int) -> str:
    """Return a Kubernetes quantity of ``mib`` MiB: ``5018`` -> ``"5018Mi"``."""
    return f"{mib}Mi"


def annotations(job: JobDeploy, placement: PlacementDeploy) -> dict[str, str]:
    """Return the ``sharewise/*`` annotations of ``job``'s pod: its plan, predicted slowdowns and partner."""
    out = {
        "job-id": job.job_id,
        "workload": job.workload,
        "gpu": ",".join(d.gpu for d in placement.devices),
        "sharing": placement.sharing,
        "p50-slowdown": f"{job.p50:.4g}",
        "p90-slowdown": f"{job.p90:.4g}",
    }
    partner = placement.partner(job)
    if partner is not None:
        out["partner"] = partner.job_id
        out["memory-limit"] = mebibytes(job.memory_limit_mib)
    if job.resident:
        out["resident"] = "true"
    return {f"{ANNOTATION_PREFIX}/{k}": v for k, v in out.items()}


def job_pod(
    name: str,
    job: JobDeploy,
    placement: PlacementDeploy,
    *,
    resources: dict,
    env: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
    claims: list[dict] | None = None,
) -> dict:
    """Return the Pod of ``job`` (a plain dict of the ``v1`` Pod schema) with ``resources`` on its container, and
    what observing it takes (``JobDeploy.observe_env``, its port, the ``prometheus.io/*`` annotations).

    Example::

        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j1", "annotations": {...}},
         "spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"},
                  "containers": [{"name": "main", "image": "replace-with-the-job-image",
                                  "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    """
    container: dict = {"name": CONTAINER, "image": IMAGE_PLACEHOLDER}
    env = {**(env or {}), **job.observe_env()}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    scrape = {}
    if job.observe_port is not None:
        container["ports"] = [{"name": METRICS_PORT_NAME, "containerPort": job.observe_port}]
        scrape = dict(zip(SCRAPE_ANNOTATIONS, ("true", str(job.observe_port), "/metrics"), strict=True))
    container["resources"] = resources
    spec: dict = {}
    nodes = sorted({d.node for d in placement.devices if d.node})
    if len(nodes) == 1:
        spec["nodeSelector"] = {HOSTNAME_LABEL: nodes[0]}
    if claims:
        spec["resourceClaims"] = claims
    spec["containers"] = [container]
    meta = {"name": name, "annotations": {**annotations(job, placement), **scrape, **(extra_annotations or {})}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def yaml_stream(header: list[str], docs: list[dict]) -> str:
    """Return ``docs`` as one YAML stream (``---`` between documents) opened by ``header`` as comments."""
    try:
        import yaml
    except ImportError:
        raise MissingDependencyError(
            "the Kubernetes formats are written with PyYAML, which is not installed; pip install 'sharewise[deploy]'"
        ) from None
    head = "".join(f"# {line}\n" for line in header)
    return head + yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=1000)
