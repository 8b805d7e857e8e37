"""Deployable plans (``recommend --emit``): every format read back by its real tool, through the CLI.

Kubernetes objects are validated by the official client's model classes (unknown fields fail), Slurm lines
by an ``sbatch``-shaped argument parser, the Ray script is run on a local Ray with logical GPUs. The model is
trained once on the shipped ``reference`` dataset; the queue is the demo's (one job per workload).
"""

from __future__ import annotations

import argparse
import json
import runpy
import shlex
import shutil

import numpy as np
import pytest
from conftest import run_cli

from sharewise.deploy import EMITTERS
from sharewise.deploy.plan import MIB, limits_fit, memory_limit, thread_percentages

DEPLOY_EXTRA = "the deploy formats' tools are the 'deploy' extra (pip install 'sharewise[deploy]')"
yaml = pytest.importorskip("yaml", reason=DEPLOY_EXTRA)

WORKLOADS = ("resnet18", "mobilenet_v2", "bert", "lstm_lm", "ncf", "dcgan", "a3c", "pointnet")
DEMO_QUEUE = "job_id,workload\n" + "".join(f"j{i + 1},{w}\n" for i, w in enumerate(WORKLOADS))
# A bigger queue than the GPUs hold, with repeated workloads: some jobs wait.
LONG_QUEUE = DEMO_QUEUE + "j9,bert\nj10,a3c\nj11,ncf\n"
CLUSTER = "gpu,node,gpu_uuid,job_id,workload\nn1:0,n1,GPU-aaaa,r1,lstm_lm\nn1:1,n1,GPU-bbbb,,\nn2:0,n2,GPU-cccc,,\n"
JOIN_QUEUE = "job_id,workload\nq1,mobilenet_v2\nq2,a3c\nq3,ncf\nq4,bert\nq5,resnet18\n"
# The NVIDIA DRA driver's GpuConfig (api/nvidia.com/resource/v1beta1): the fields each level may hold.
GPU_CONFIG = {"apiVersion", "kind", "sharing"}
GPU_SHARING = {"strategy", "timeSlicingConfig", "mpsConfig"}
MPS_CONFIG = {"defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit", "defaultPerDevicePinnedMemoryLimit"}
TIME_SLICE_INTERVALS = {"Default", "Short", "Medium", "Long"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("xgboost")
    from sharewise.datasets.store import open_dataset
    from sharewise.predictor import train_model

    ds = open_dataset("reference", profiles=True, pairs=True)
    path = tmp_path_factory.mktemp("model") / "model.json"
    train_model(ds.read_profiles(), ds.read_pairs(), n_estimators=20).save(path)
    return path


def emitted(tmp_path, model, fmt, *extra, queue=DEMO_QUEUE, data="reference") -> str:
    """Run ``recommend --emit fmt --out FILE`` and return the file's text."""
    q = tmp_path / "queue.csv"
    q.write_text(queue)
    out = tmp_path / f"plan-{fmt}{EMITTERS.get(fmt).suffix}"
    argv = ["recommend", "-m", str(model), "-d", str(data), "-q", str(q), "--emit", fmt, "--out", str(out), *extra]
    assert run_cli(argv) == 0
    return out.read_text()


def load_k8s(text: str) -> list[dict]:
    """Validate every document with the kubernetes client's model class and check nothing was dropped.

    ``from_dict`` and ``ApiClient.deserialize`` ignore unknown keys; the models' pydantic validation
    (``extra="forbid"``) rejects them, and serializing the model back must give the document unchanged.
    """
    client = pytest.importorskip("kubernetes.client", reason=DEPLOY_EXTRA)
    ApiClient, ResourceV1ResourceClaim, V1Pod = client.ApiClient, client.ResourceV1ResourceClaim, client.V1Pod
    models = {("v1", "Pod"): V1Pod, ("resource.k8s.io/v1", "ResourceClaim"): ResourceV1ResourceClaim}
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for doc in docs:
        obj = models[(doc["apiVersion"], doc["kind"])].model_validate(doc)
        assert ApiClient().sanitize_for_serialization(obj) == doc
    return docs


def waiting_line(text: str) -> list[str]:
    line = next(x for x in text.splitlines() if "waiting (no GPU in this plan): " in x)
    rest = line.split(": ", 1)[1]
    return [] if rest == "none" else rest.split(", ")


def sbatch_lines(text: str) -> list[argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="sbatch", add_help=False, exit_on_error=False)
    for opt in ("--job-name", "-w", "--gres", "--export"):
        parser.add_argument(opt)
    parser.add_argument("script")
    lines = [shlex.split(x, comments=True) for x in text.splitlines() if x.startswith("sbatch ")]
    return [parser.parse_args(args[1:]) for args in lines]


def jobs_in(fmt: str, text: str, tmp_path) -> list[str]:
    """Every queued job the format launches or lists as waiting (residents excluded)."""
    if fmt == "plan":
        plan = json.loads(text)
        placed = [j["job_id"] for p in plan["placements"] for j in p["jobs"] if not j["resident"]]
        return placed + plan["waiting"]
    if fmt in ("k8s-dra", "hami"):
        pods = [d for d in load_k8s(text) if d["kind"] == "Pod"]
        ann = [p["metadata"]["annotations"] for p in pods]
        return [a["sharewise/job-id"] for a in ann if "sharewise/resident" not in a] + waiting_line(text)
    if fmt == "slurm":
        return [ns.job_name for ns in sbatch_lines(text)] + waiting_line(text)
    pytest.importorskip("ray")
    script = tmp_path / "plan_ray.py"
    script.write_text(text)
    ns = runpy.run_path(str(script), run_name="sharewise_plan")
    return [j["job_id"] for p in ns["PLACEMENTS"] for j in p["jobs"]] + ns["WAITING"]


# ---- the rules ---------------------------------------------------------------------------------------
def test_memory_limit_fit_and_thread_percentage_rules():
    assert memory_limit(4 * 2**30) == 5018 * MIB  # 4 GiB x 1.1 + 512 MiB, up to a whole MiB
    assert memory_limit(None) is None and memory_limit(float("nan")) is None
    fits = limits_fit(np.array([6e9, 12e9, np.nan]), 16e9)
    assert fits.tolist() == [[True, False, False], [False, False, False], [False, False, False]]
    assert not limits_fit(np.array([1e9]), None).any()  # unknown device memory: nothing fits
    assert thread_percentages([0.9, 0.3]) == [75, 25]
    assert thread_percentages([None, 0.5]) == [67, 33]  # unknown demand counts as saturating
    assert thread_percentages([1.0, 0.01]) == [90, 10]  # clipped: neither job starves


def test_emitters_come_from_the_registry_and_the_cli_help(capsys):
    for name, emitter in EMITTERS.items():
        assert emitter.name == name and emitter.summary and emitter.suffix.startswith(".")
    assert run_cli(["recommend", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(name in help_text for name in EMITTERS.names())


# ---- every format ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", EMITTERS.names())
def test_every_queued_job_appears_exactly_once(fmt, tmp_path, model):
    text = emitted(tmp_path, model, fmt, "--gpus", "4", "--node", "n1", "--sharing", "mps", queue=LONG_QUEUE)
    jobs = jobs_in(fmt, text, tmp_path)
    assert sorted(jobs) == sorted(f"j{i}" for i in range(1, 12))
    assert waiting_line(text) if fmt != "plan" else json.loads(text)["waiting"]  # 11 jobs, 4 GPUs: some wait


def test_neutral_plan_states_its_rules_and_every_limit_fits(tmp_path, model):
    plan = json.loads(emitted(tmp_path, model, "plan", "--gpus", "5", "--sharing", "mps"))
    assert set(plan["rules"]) >= {"memory_limit", "memory_fit", "mps_active_thread_percentage"}
    assert plan["sharing"] == "mps" and plan["predicted_on"]["measured_modes"] == ["cpu"]
    assert any("measured in mode(s) cpu, the plan" in n for n in plan["notes"])
    shared = [p for p in plan["placements"] if len(p["jobs"]) == 2]
    assert shared and len(plan["placements"]) == 5
    for p in plan["placements"]:
        assert [g["index"] for g in p["gpus"]] == [int(g["gpu"]) for g in p["gpus"]]
        jobs = p["jobs"]
        if len(jobs) == 1:
            assert p["sharing"] == "exclusive" and jobs[0]["memory_limit_bytes"] is None
            continue
        for j in jobs:
            assert j["memory_limit_bytes"] == memory_limit(j["peak_memory_bytes"]) == j["memory_limit_mib"] * MIB
            assert j["memory_source"] == "f_mem_rss_growth_bytes" and j["demand_source"] == "f_busy_frac"
        assert p["memory_limit_total_bytes"] == sum(j["memory_limit_bytes"] for j in jobs)
        assert p["memory_limit_total_bytes"] <= plan["device_memory_bytes"]
        pct = [j["active_thread_percentage"] for j in jobs]
        assert sum(pct) == 100 and pct == thread_percentages([j["sm_demand"] for j in jobs])


@pytest.mark.parametrize("sharing", ["mps", "timeslice"])
def test_k8s_dra_claims_and_pods_load_and_share_one_claim(sharing, tmp_path, model):
    docs = load_k8s(emitted(tmp_path, model, "k8s-dra", "--gpus", "5", "--sharing", sharing))
    plan = json.loads(emitted(tmp_path, model, "plan", "--gpus", "5", "--sharing", sharing))
    claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaim"}
    pods = [d for d in docs if d["kind"] == "Pod"]
    # One claim per GPU of the plan, one pod per placed job (a pair over the SLO leaves a job waiting).
    placed = sorted(j["job_id"] for p in plan["placements"] for j in p["jobs"])
    assert len(claims) == len(plan["placements"]) == 5 and sorted(p["metadata"]["name"] for p in pods) == placed
    assert any(len(p["jobs"]) == 2 for p in plan["placements"])
    users: dict[str, list[dict]] = {}
    for pod in pods:
        (ref,) = pod["spec"]["resourceClaims"]
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": ref["name"]}]
        users.setdefault(ref["resourceClaimName"], []).append(pod)
    assert set(users) == set(claims)
    for name, claim in claims.items():
        (request,) = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
        config = claim["spec"]["devices"].get("config")
        if len(users[name]) == 1:
            assert config is None  # a job alone: an exclusive claim
            continue
        params = config[0]["opaque"]["parameters"]
        assert config[0]["opaque"]["driver"] == "gpu.nvidia.com" and set(params) <= GPU_CONFIG
        assert params["kind"] == "GpuConfig" and set(params["sharing"]) <= GPU_SHARING
        envs = [{e["name"]: e["value"] for e in p["spec"]["containers"][0].get("env", [])} for p in users[name]]
        if sharing == "mps":
            from kubernetes.utils import parse_quantity

            mps = params["sharing"]["mpsConfig"]
            assert params["sharing"]["strategy"] == "MPS" and set(mps) <= MPS_CONFIG
            pct = [int(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) for e in envs]
            assert sum(pct) == 100 and mps["defaultActiveThreadPercentage"] == max(pct)
            limits = [parse_quantity(p["metadata"]["annotations"]["sharewise/memory-limit"]) for p in users[name]]
            assert parse_quantity(mps["defaultPinnedDeviceMemoryLimit"]) == max(limits)
            assert [e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] for e in envs] == [f"0={q // MIB}M" for q in limits]
        else:
            assert params["sharing"] == {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
            assert params["sharing"]["timeSlicingConfig"]["interval"] in TIME_SLICE_INTERVALS
            assert [{k: v for k, v in e.items() if not k.startswith("SHAREWISE_OBSERVE_")} for e in envs] == [{}, {}]


def test_the_loader_fails_on_an_unknown_field_the_client_would_drop(tmp_path, model):
    client = pytest.importorskip("kubernetes.client", reason=DEPLOY_EXTRA)
    V1Pod = client.V1Pod
    from pydantic import ValidationError

    text = emitted(tmp_path, model, "hami", "--gpus", "5", "--node", "n1")
    pod = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Pod")
    pod["spec"]["containers"][0]["resourcez"] = {"limits": {}}
    # The client's deserializers ignore the typo...
    assert V1Pod.from_dict(pod) is not None
    assert client.ApiClient().deserialize(json.dumps(pod), "V1Pod", None).spec.containers[0].name == "main"
    with pytest.raises(ValidationError, match="resourcez"):
        load_k8s(yaml.safe_dump(pod))  # ...the test's loader does not
    claim = next(d for d in yaml.safe_load_all(emitted(tmp_path, model, "k8s-dra", "--gpus", "5")) if d)
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClass"] = "gpu.nvidia.com"
    with pytest.raises(ValidationError, match="deviceClass"):
        load_k8s(yaml.safe_dump(claim))


def test_hami_limits_per_job(tmp_path, model):
    pods = load_k8s(emitted(tmp_path, model, "hami", "--gpus", "5", "--node", "n1", "--sharing", "mps"))
    plan = json.loads(emitted(tmp_path, model, "plan", "--gpus", "5", "--sharing", "mps"))
    want = {j["job_id"]: (j, len(p["jobs"])) for p in plan["placements"] for j in p["jobs"]}
    for pod in pods:
        job, n = want[pod["metadata"]["annotations"]["sharewise/job-id"]]
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
        if n == 1:
            assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}
        else:
            assert limits == {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": str(job["memory_limit_mib"]),
                "nvidia.com/gpucores": str(job["active_thread_percentage"]),
            }


def test_cluster_csv_pins_nodes_and_uuids_and_handles_a_join(tmp_path, model):
    cluster = tmp_path / "cluster.csv"
    cluster.write_text(CLUSTER)
    extra = ("--cluster", str(cluster), "--sharing", "mps")
    plan = json.loads(emitted(tmp_path, model, "plan", *extra, queue=JOIN_QUEUE))
    gpus = {g["gpu"]: g for p in plan["placements"] for g in p["gpus"]}
    assert gpus["n1:0"] == {"gpu": "n1:0", "node": "n1", "index": 0, "uuid": "GPU-aaaa"}
    (join,) = [p for p in plan["placements"] if p["kind"] == "join"]
    assert [j["resident"] for j in join["jobs"]] == [False, True] and join["jobs"][1]["job_id"] == "r1"
    uuid = {"n1:0": "GPU-aaaa", "n1:1": "GPU-bbbb", "n2:0": "GPU-cccc"}
    dra = load_k8s(emitted(tmp_path, model, "k8s-dra", *extra, queue=JOIN_QUEUE))
    for d in dra:
        gpu = d["metadata"]["annotations"]["sharewise/gpu"]
        if d["kind"] == "ResourceClaim":
            (sel,) = d["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
            assert sel["cel"]["expression"] == f'device.attributes["gpu.nvidia.com"].uuid == "{uuid[gpu]}"'
        else:
            assert d["spec"]["nodeSelector"] == {"kubernetes.io/hostname": gpus[gpu]["node"]}
    assert [d["metadata"]["name"] for d in dra if "sharewise/resident" in d["metadata"]["annotations"]] == ["r1"]
    hami = load_k8s(emitted(tmp_path, model, "hami", *extra, queue=JOIN_QUEUE))
    placed = sorted(j["job_id"] for p in plan["placements"] for j in p["jobs"] if not j["resident"])
    assert sorted(p["metadata"]["name"] for p in hami) == placed  # r1 keeps running
    assert set(placed) | set(plan["waiting"]) == {"q1", "q2", "q3", "q4", "q5"}
    for p in hami:
        assert (
            p["metadata"]["annotations"]["nvidia.com/use-gpuuuid"]
            == uuid[p["metadata"]["annotations"]["sharewise/gpu"]]
        )
    lines = sbatch_lines(emitted(tmp_path, model, "slurm", *extra, queue=JOIN_QUEUE))
    assert sorted(ns.job_name for ns in lines) == placed
    by_job = {j["job_id"]: gpus[p["gpus"][0]["gpu"]]["node"] for p in plan["placements"] for j in p["jobs"]}
    shares = {j["job_id"] for p in plan["placements"] if len(p["jobs"]) == 2 for j in p["jobs"]}
    assert all(ns.w == by_job[ns.job_name] for ns in lines)
    assert all(ns.gres.startswith("mps:") for ns in lines if ns.job_name in shares)


def test_pairs_whose_limits_do_not_fit_are_never_emitted(tmp_path, model, capsys):
    from sharewise.datasets.store import Dataset, reference_path

    data = tmp_path / "data"
    shutil.copytree(reference_path(), data)
    profiles = Dataset(data).read_profiles()
    # 7.5 GiB each on a 16 GiB device: the raw peaks of two fit (15 GiB), their limits (2 x 8.75 GiB) do not.
    profiles["f_device_mem_bytes"] = 16.0 * 2**30
    profiles["f_mem_rss_growth_bytes"] = 7.5 * 2**30
    shutil.rmtree(data / "profiles")
    Dataset(data).write_profiles(profiles)
    plan = json.loads(emitted(tmp_path, model, "plan", "--gpus", "5", data=data))
    assert all(len(p["jobs"]) == 1 for p in plan["placements"]) and len(plan["waiting"]) == 3
    assert any("36 more workload pair(s) may not share" in n for n in plan["notes"])
    # Without any memory measurement the limits are unknown: the table may pair, a deployed plan may not.
    profiles[["f_mem_rss_growth_bytes", "f_param_bytes"]] = np.nan
    shutil.rmtree(data / "profiles")
    Dataset(data).write_profiles(profiles)
    plan = json.loads(emitted(tmp_path, model, "plan", "--gpus", "5", data=data))
    assert all(len(p["jobs"]) == 1 for p in plan["placements"])
    assert any("pairs with an unknown limit may not share" in n for n in plan["notes"])
    q = tmp_path / "queue.csv"
    capsys.readouterr()
    assert run_cli(["recommend", "-m", str(model), "-d", str(data), "-q", str(q), "--gpus", "5", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert any(len(p["jobs"]) == 2 for p in table["placements"])


# ---- bad input: one line, exit 2 -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fmt", "cluster", "queue", "expected"),
    [
        ("slurm", "gpu\ng0\ng1\n", DEMO_QUEUE, "slurm: GPU 'g"),
        ("hami", "gpu,node\ng0,\ng1,n1\n", DEMO_QUEUE, "hami: GPU 'g0' ("),
        ("plan", None, "job_id,workload\nj1,bert\nj2,vgg99\n", "no profile on device"),
        ("nope", None, DEMO_QUEUE, "unknown emitter 'nope'; known emitters: hami, k8s-dra, plan, ray, slurm"),
    ],
    ids=["cluster-without-node-column", "cluster-gpu-without-node", "job-without-profile", "unknown-format"],
)
def test_bad_input_is_one_line_and_exit_2(fmt, cluster, queue, expected, tmp_path, model, capsys):
    q = tmp_path / "queue.csv"
    q.write_text(queue)
    where = ["--gpus", "2"]
    if cluster is not None:
        (tmp_path / "cluster.csv").write_text(cluster)
        where = ["--cluster", str(tmp_path / "cluster.csv")]
    out = tmp_path / "out"
    argv = ["recommend", "-m", str(model), "-d", "reference", "-q", str(q), *where, "--emit", fmt, "-o", str(out)]
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err
    if cluster is not None:
        assert "has no node" in err and "add a 'node' column to the cluster CSV" in err
    assert not out.exists()


def test_option_misuse_is_exit_2(tmp_path, model, capsys):
    q = tmp_path / "queue.csv"
    q.write_text(DEMO_QUEUE)
    base = ["recommend", "-m", str(model), "-d", "reference", "-q", str(q), "--gpus", "2"]
    assert run_cli([*base, "--out", str(tmp_path / "x")]) == 2
    assert "give --emit FORMAT" in capsys.readouterr().err
    assert run_cli([*base, "--emit", "plan", "--json"]) == 2
    assert "not both" in capsys.readouterr().err
    assert run_cli([*base, "--emit", "plan", "--sharing", "mig"]) == 2
    assert "--sharing must be one of ['auto', 'timeslice', 'mps']" in capsys.readouterr().err


# ---- Ray ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ray_plan_runs_each_pair_on_one_gpu(tmp_path, model):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'sharewise[ray]')")
    text = emitted(tmp_path, model, "ray", "--gpus", "5", "--sharing", "mps")
    script = tmp_path / "plan_ray.py"
    script.write_text(text)
    ns = runpy.run_path(str(script), run_name="sharewise_plan")

    def where(job_id, workload):  # defined here so Ray ships it by value to its workers
        import os

        import ray

        return {
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "group": ray.get_runtime_context().get_placement_group_id(),
            "threads": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        }

    ray.init(num_gpus=5, num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        refs = ns["submit"](where, cpus_per_job=0)
        got = dict(zip(refs, ray.get(list(refs.values()), timeout=120), strict=True))
    finally:
        ray.shutdown()
    # Every placed job ran (a pair over the SLO at p90 leaves a job waiting, not placed).
    assert sorted(got) == sorted(j["job_id"] for p in ns["PLACEMENTS"] for j in p["jobs"])
    assert len(got) >= 6 and any(len(p["jobs"]) == 2 for p in ns["PLACEMENTS"])
    seen = set()
    for p in ns["PLACEMENTS"]:
        places = {(tuple(got[j["job_id"]]["gpu_ids"]), got[j["job_id"]]["group"]) for j in p["jobs"]}
        assert len(places) == 1  # both jobs of a shared GPU: the same GPU id, the same placement group
        ((gpu_ids, group),) = places
        assert len(gpu_ids) == len(p["gpus"]) and group is not None and gpu_ids not in seen
        seen.add(gpu_ids)
        for j in p["jobs"]:
            assert got[j["job_id"]]["threads"] == j["env"].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
