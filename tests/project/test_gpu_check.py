"""The GPU check script, dry-run on the CPU: stages, time limits, one archive holding a loadable dataset."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from loadguard import LoadWindow

from sharewise.datasets.store import Dataset
from sharewise.profiler.campaign import all_pairs

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
WORKLOADS = ["a3c", "ncf"]  # the fastest at size tiny: two profiles and three pairs keep the dry run short
# Short windows and few repeats: the dry run checks the plumbing, not the numbers.
DRY_RUN = {
    "DEVICE": "cpu",
    "SIZE": "tiny",
    "WORKLOADS": " ".join(WORKLOADS),
    "MODES": "cpu",
    "WINDOW": "0.2",
    "MIN_STEPS": "3",
    "REPEATS": "2",
    "MAX_REPEATS": "2",
    "PROFILE_REPEATS": "2",
    "CI_TARGET": "50",
    "EXTEND": "0",  # extensions cost time; tests/profiler/test_profiler_campaign.py runs one for real
    "IDLE_WAIT": "0",
    "RUN_TIMEOUT": "60",
    "SMOKE_LIMIT": "60",
    "PROFILE_LIMIT": "120",
    "CPU_LIMIT": "180",
    "TESTS_LIMIT": "45",
    "PHYS_WORKLOADS": "a3c ncf",
    "PHYS_JOBS": "3",
    "PHYS_MIN_S": "1",
    "PHYS_MAX_S": "2",
    "PHYS_CALIBRATE": "0.5",
    "PHYSICAL_LIMIT": "300",
    "PHYS_POLICIES": "exclusive-sjf sharewise",
    "CMD_PARTNER": "ncf",
    "CMD_PROBE": "0",
    "CMD_BATCH": "16",
    "COMMAND_LIMIT": "200",
    "TOTAL_LIMIT": "900",
}
#: What the GPU machine's image holds (and what the script carries there): the dry run refuses every import of
#: sharewise (and of the script) from any other distribution, as that machine would.
IMAGE_PACKAGES = REPO / "scripts" / "gpu_image_packages.txt"
IMAGE_ONLY = REPO / "tests" / "fixtures" / "gpu_image"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the GPU check is a bash script and bash is missing"),
    pytest.mark.skipif(shutil.which("tar") is None, reason="the GPU check packs its output with tar, which is missing"),
    pytest.mark.skipif(shutil.which("timeout") is None, reason="the GPU check limits stages with coreutils timeout"),
]


def run_check(out: Path, cache: Path, stages: str | None = None, packages: Path = IMAGE_PACKAGES,
              **settings: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **DRY_RUN, **settings, "PYTHON": sys.executable, "SHAREWISE_CACHE_DIR": str(cache),
           "SHAREWISE_IMAGE_PACKAGES": str(packages),
           "PYTHONPATH": os.pathsep.join([str(IMAGE_ONLY), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("OUT", None)
    args = ["bash", str(SCRIPT), str(out)] + ([stages] if stages else [])
    began = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    print(f"gpu_check.sh {stages or '(all stages)'}: {time.monotonic() - began:.0f} s wall, exit {proc.returncode}")
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    return proc


def unpack(out: Path, into: Path) -> Path:
    """Check OUT holds exactly the archive; extract it into ``into`` and return the folder it holds."""
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.tgz"], "only the archive may stay in OUT_DIR"
    with tarfile.open(out / "gpu-check.tgz") as tar:
        tar.extractall(into, filter="data")
    return into / "gpu-check"


def _cut_under_load(out: Path, window: LoadWindow, into: Path) -> str | None:
    """Name the stages its time limit cut while others loaded the machine (a stage limit is wall time), else None."""
    if window.problem(BUSY) is None or not (out / "gpu-check.tgz").exists():
        return None
    with tarfile.open(out / "gpu-check.tgz") as tar:
        tar.extractall(into, filter="data")
    summary = (into / "gpu-check" / "summary.txt").read_text().splitlines()
    cut = [line.split()[0] for line in summary if line.split()[1:2] == ["cut"]]
    return f"stage(s) {cut} cut by their time limits while {window.problem(BUSY)}" if cut else None


#: Foreign share of the machine above which a stage cut by its wall-time limit says nothing about the script.
BUSY = 0.5


def test_cpu_dry_run_packs_profiles_and_every_pair(tmp_path):
    out = tmp_path / "out"
    with LoadWindow() as window:
        proc = run_check(out, tmp_path / "cache")
    problem = _cut_under_load(out, window, tmp_path / "peek")
    if problem:
        pytest.skip(f"the dry run's stages have wall-time limits: {problem}; rerun on a quieter machine")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tests skipped: the GPU tests need CUDA and DEVICE=cpu" in proc.stdout
    assert "nvidia-smi skipped (DEVICE=cpu" in proc.stdout
    # The profiles are measured by the first mode's campaign, in the workers its pairs then use (the solo rule).
    assert "profile skipped: 2 profile(s) left to pairs-cpu, whose pairs reuse their workers" in proc.stdout
    # The split stage runs on the CPU too, under the cgroup quota (the CPU's knob), at 70:30 only.
    assert "under the knob 3 ok of 3" in proc.stdout

    work = unpack(out, tmp_path / "x")
    ds = Dataset(work / "dataset")
    profiles = ds.read_profiles()
    assert sorted(profiles["workload"]) == sorted(WORKLOADS)
    assert set(profiles["mode"]) == {"cpu"} and set(profiles["size"]) == {"tiny"}
    assert profiles["f_probe_slowdown"].notna().all(), "the profiles must carry the probe's features"

    pairs = ds.read_pairs()
    expected = {tuple(sorted((WORKLOADS[i], WORKLOADS[j]))) for i, j in all_pairs(WORKLOADS)}
    under = pairs["split_a"].notna()
    assert sorted(pairs.loc[under, "split_a"]) == [70.0] * 3, pairs[["workload_a", "workload_b", "split_a"]]
    for rows in (pairs[~under], pairs[under]):  # the matrix without the knob, and again at 70:30
        got = {tuple(sorted(ab)) for ab in zip(rows["workload_a"], rows["workload_b"], strict=True)}
        assert len(expected) == 3 and got == expected
    assert (pairs["status"] == "ok").all(), pairs[["workload_a", "workload_b", "status", "error"]]
    assert set(pairs["mode"]) == {"cpu"} and set(pairs["isolation"]) == {"warm"}
    # Each row says whether its interval met CI_TARGET; a miss is flagged, never shipped as equal.
    assert set(pairs["precision"]) <= {"met", "missed"} and (pairs["ci_target"] == 0.5).all()

    meta = (work / "meta.txt").read_text()
    for line in (
        "DEVICE=cpu",
        "SIZE=tiny",
        "WORKLOADS=a3c ncf",
        "MODES=cpu",
        "WINDOW=0.2",
        "REPEATS=2",
        "MAX_REPEATS=2",
        "EXTEND=0",
        "limit_cpu=180",
        "nvidia-smi: skipped (DEVICE=cpu)",
        "torch ",
    ):
        assert line in meta, f"meta.txt lacks {line!r}"
    summary = (work / "summary.txt").read_text()
    assert "pairs 3 ok of 3 planned" in summary
    for stage in ("smoke", "pairs-cpu", "physical", "mps-split", "command"):
        assert any(line.split()[:2] == [stage, "ok"] for line in summary.splitlines()), summary
    stages = [line.split()[0] for line in summary.splitlines() if line.split()[1:2] in (["ok"], ["skipped"])]
    # Ordered by value: the measuring stages first, the GPU tests last.
    assert stages == ["smoke", "profile", "pairs-cpu", "physical", "mps-split", "command", "tests"], summary
    assert "2 profiles of 2 workloads" in (work / "show.txt").read_text()
    logs = {p.name for p in (work / "logs").iterdir()}
    assert {"smoke.log", "pairs-cpu.log", "physical.log", "command.log", "plan.log"} <= logs
    # The time plan: first from the last H200 window's costs per step, at the end from this run's own.
    plan = (work / "logs" / "plan.log").read_text()
    assert plan.count("time plan for") == 2 and "the 2026-12-04 H200 window's logs" in plan, plan
    assert f"the run in {out / 'gpu-check'}" in plan and "pairs-cpu" in plan and "TOTAL_LIMIT" in plan, plan

    # The physical stage: every policy ran the trace for real and was compared with its simulation.
    trace = (work / "physical" / "trace.csv").read_text().splitlines()
    assert len(trace) == 1 + 3 and {line.split(",")[2] for line in trace[1:]} <= {"a3c", "ncf"}
    for policy in ("exclusive-sjf", "sharewise"):
        run = json.loads((work / "physical" / "run" / policy / "run.json").read_text())
        assert run["complete"] and {job["status"] for job in run["jobs"]} == {"done"}, run["jobs"]
        assert run.get("comparison"), f"{policy}: no comparison with the simulation (--compare-sim)"
    # The command stage: the script as a command and the same model as a class, the command paired.
    cmd = Dataset(work / "command-dataset")
    assert set(cmd.read_profiles()["workload"]) == {"cnn_cmd", "Net", "ncf"}
    cmd_pairs = cmd.read_pairs()
    assert (cmd_pairs["status"] == "ok").all() and len(cmd_pairs) == 3, cmd_pairs[["workload_a", "workload_b"]]
    assert {"cnn_cmd"} <= set(cmd_pairs["workload_a"]) | set(cmd_pairs["workload_b"])

    # A rerun from the archive (RESUME, as on a fresh GPU machine) resumes: nothing is measured again.
    again_out = tmp_path / "again"
    proc = run_check(again_out, tmp_path / "cache", stages="profile,cpu,physical,command",
                     RESUME=str(out / "gpu-check.tgz"), PLAN="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "physical skipped: finished in an earlier run" in proc.stdout
    assert "command skipped: finished in an earlier run" in proc.stdout
    again = Dataset(unpack(again_out, tmp_path / "y") / "dataset")
    assert len(again.read_profiles(latest=False)) == 2
    assert len(again.read_pairs(latest=False)) == len(ds.read_pairs(latest=False)) == 6  # 3, and 3 at 70:30

    # The physical stage with few pairs, all of one workload: the 2026-12-04 H200 window's failure (5 pairs, all
    # of resnet18: holding each workload out in turn left nothing to train on). Its predictions now widen, saying so.
    few = Dataset(tmp_path / "few")
    few.write_profiles(profiles)
    few.write_pairs(pairs[(pairs["workload_a"] == "a3c") | (pairs["workload_b"] == "a3c")])
    few_out = tmp_path / "few-out"
    proc = run_check(few_out, tmp_path / "cache", stages="physical", SEED=str(few.path), PHYS_WORKLOADS="a3c",
                     PHYS_JOBS="2", PHYS_POLICIES="sharewise", PLAN="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = json.loads((unpack(few_out, tmp_path / "z") / "physical" / "run" / "sharewise" / "run.json").read_text())
    assert run["complete"] and {job["status"] for job in run["jobs"]} == {"done"}, run["jobs"]
    assert any("every measured pair involves workload 'a3c'" in note for note in run["notes"]), run["notes"]


def test_the_plan_alone_measures_nothing_and_plans_what_a_seed_lacks(tmp_path):
    """PLAN=1 on a CPU plans the next H200 window from the shipped rows: the pairs they lack, in both modes."""
    proc = run_check(tmp_path / "out", tmp_path / "cache", SEED="reference-h200", PLAN="1", PLAN_DEVICE="NVIDIA H200",
                     DEVICE="cuda:0", SIZE="full", MODES="timeslice mps",
                     WORKLOADS="resnet18 vgg16 mobilenet_v2 bert transformer lstm_lm ncf dcgan")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (tmp_path / "out").exists(), "a plan touches no output folder"
    assert "time plan for NVIDIA H200" in proc.stdout
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split()}
    assert "18 pairs" in lines["pairs-timeslice"] and "36 pairs" in lines["pairs-mps"], proc.stdout
    assert "0 profiles" in lines["profile"] and "TOTAL_LIMIT" in lines["total"], proc.stdout


def test_the_run_stops_after_a_smoke_stage_whose_cli_cannot_import(tmp_path):
    # An image without typer: `import sharewise.cli` fails there, so every later stage would fail too.
    lacking = tmp_path / "packages.txt"
    lacking.write_text("\n".join(n for n in IMAGE_PACKAGES.read_text().splitlines() if n.strip() != "typer"))
    out = tmp_path / "out"
    # Seeded from a shipped dataset (as a GPU window starts from reference-h200): its rows are in the archive.
    proc = run_check(out, tmp_path / "cache", stages="smoke,profile,cpu", packages=lacking, SEED="reference",
                     PLAN="0")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "import sharewise.cli: FAILED" in proc.stdout + proc.stderr
    assert "profile skipped: the smoke stage ended 'failed'" in proc.stdout
    assert "pairs-cpu skipped: the smoke stage ended 'failed'" in proc.stdout
    work = unpack(out, tmp_path / "x")
    summary = (work / "summary.txt").read_text()
    assert any(line.split()[:2] == ["smoke", "failed"] for line in summary.splitlines()), summary
    assert len(Dataset(work / "dataset").read_pairs()) == len(Dataset("reference").read_pairs()) == 36


def test_a_stage_cut_by_its_limit_does_not_stop_the_next(tmp_path):
    out = tmp_path / "out"
    # Without its pairs stage the profile stage runs `sharewise profile` itself.
    proc = run_check(out, tmp_path / "cache", stages="profile,command", PROFILE_LIMIT="6", COMMAND_LIMIT="6",
                     PLAN="0")
    # A measuring stage cut by its limit is partial data, not a failure.
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (unpack(out, tmp_path / "x") / "summary.txt").read_text()
    outcomes = {line.split()[0]: line.split()[1] for line in summary.splitlines() if line.split()[:1] != ["dataset"]}
    assert outcomes["profile"] == "cut" and outcomes["command"] == "cut", summary
