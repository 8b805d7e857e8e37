"""A training command as a workload, without running one: the spec grammar, its name in every table, the
job's environment, the in-job step hook and its FLOP count (in this process), and `show`'s notes.

The runs of real commands (launch, profiles, pairs, failures) are in ``test_command_runs.py``.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pandas as pd
import pytest

from sharewise.command_spec import CommandSpecError, is_command_spec, parse_command, recorded_name, recorded_names
from sharewise.errors import ConfigError, TraceError


# -- the spec ---------------------------------------------------------------------------------------------------
def test_a_spec_gives_name_argv_options_and_environment():
    c = parse_command("mytrain=cmd:--cwd exp/run1 --batch-size=64 SEED=1 'MSG=a b' python train.py --lr '1e-3' \"x y\"")
    assert c.name == "mytrain"
    assert c.argv == ("python", "train.py", "--lr", "1e-3", "x y")
    assert c.cwd == "exp/run1" and c.batch_size == 64 and c.progress_regex is None
    assert c.environ == {"SEED": "1", "MSG": "a b"}
    assert c.spec.startswith("mytrain=cmd:--cwd")
    # Words after the program are the program's, even when they look like options or assignments.
    assert parse_command("t=cmd:python t.py --cwd x A=1").argv == ("python", "t.py", "--cwd", "x", "A=1")
    # '--' ends sharewise's options, for a program whose name starts with '--'.
    assert parse_command("t=cmd:--batch-size 2 -- --odd-program").argv == ("--odd-program",)


@pytest.mark.parametrize(
    "spec, name",
    [
        ("cmd:python train.py", "train"),
        ("cmd:python path/to/my-train.py --x 1", "my-train"),
        ("cmd:python -m pkg.trainer --epochs 3", "trainer"),
        ("cmd:./run_job --fast", "run_job"),
        ("  spaced=cmd:python a.py", "spaced"),
    ],
)
def test_the_recorded_name_comes_from_the_spec_alone(spec, name):
    from sharewise.profiler.workloads import workload_name

    assert parse_command(spec).name == name
    # No file is opened or imported: train.py does not exist here.
    assert workload_name(spec) == name == recorded_name(spec)


def test_what_is_and_is_not_a_command():
    assert is_command_spec("a=cmd:python a.py") and is_command_spec("cmd:x")
    for spec in ("resnet18", "net.py:Net[input=3x32x32]", "pkg.mod:Cls", "", None, 3, "a b=cmd:x"):
        assert not is_command_spec(spec)
    assert recorded_names(["ncf", "a=cmd:python a.py", "a=cmd:python a.py"]) == ["ncf", "a", "a"]


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("x=cmd:", "names no program"),
        ("x=cmd:--batch-size 8", "names no program"),
        ("x=cmd:--gpus 2 python a.py", "unknown option '--gpus'"),
        ("x=cmd:--cwd", "needs a value"),
        ("x=cmd:--batch-size 0 python a.py", "--batch-size must be a whole number >= 1"),
        ("x=cmd:--progress-regex '(' python a.py", "is not a regular expression"),
        ("x=cmd:python a.py 'unclosed", "No closing quotation"),
        ("x=cmd:CUDA_VISIBLE_DEVICES=1 python a.py", "CUDA_VISIBLE_DEVICES is set by sharewise"),
        ("x=cmd:SHAREWISE_MAX_STEPS=3 python a.py", "SHAREWISE_MAX_STEPS is set by sharewise"),
        ("-bad=cmd:python a.py", "must be 1-64 letters"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec, needle):
    with pytest.raises(CommandSpecError) as exc:
        parse_command(spec)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_command_may_not_take_a_built_in_name_when_measured():
    from sharewise.profiler.workloads import resolve_specs

    with pytest.raises(ConfigError, match="built-in workload's name"):
        resolve_specs(["ncf=cmd:python ncf.py"])
    assert resolve_specs(["ncf", "mine=cmd:python a.py"]) == [("ncf", "ncf"), ("mine=cmd:python a.py", "mine")]


def test_a_script_named_as_a_workload_gets_the_command_form_in_the_error():
    from sharewise.errors import UnknownWorkloadError
    from sharewise.profiler.workloads import load_workload_class

    for spec in ("train.py", "python train.py --bs 8"):
        with pytest.raises(UnknownWorkloadError, match=r"'train=cmd:python train\.py"):
            load_workload_class(spec)


def test_comma_lists_keep_a_command_whole():
    from sharewise.cli.common import split_list

    assert split_list(["ncf,a=cmd:python a.py --layers 1,2", "b=cmd:python b.py", "x,y"]) == [
        "ncf", "a=cmd:python a.py --layers 1,2", "b=cmd:python b.py", "x", "y",
    ]
    assert split_list(["cmd:python t.py,z=cmd:python z.py --k 1,2"]) == ["cmd:python t.py", "z=cmd:python z.py --k 1,2"]


# -- the job's environment --------------------------------------------------------------------------------------
def test_the_job_environment_layers_thread_settings_device_spec_and_protocol(tmp_path):
    from sharewise.profiler import progress
    from sharewise.profiler.commands import HOOK_DIR, LIB_DIR, job_environment

    c = parse_command("t=cmd:OMP_NUM_THREADS=7 SEED=3 python t.py")
    base = {"PATH": "/bin", "PYTHONPATH": "/user/lib", "SHAREWISE_MAX_STEPS": "99", "OMP_NUM_THREADS": "64"}
    env = job_environment(c, progress_path=tmp_path / "p", cores=(1,), threads=1, cuda_devices="3",
                          extra_env={"CUDA_MPS_PIPE_DIRECTORY": "/mps"}, base=base)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["MKL_NUM_THREADS"] == "1" and env["SHAREWISE_CORES"] == "1"
    assert env["OMP_NUM_THREADS"] == "7", "the spec's own choice wins over sharewise's thread default"
    assert env["SEED"] == "3" and env["CUDA_VISIBLE_DEVICES"] == "3" and env["CUDA_MPS_PIPE_DIRECTORY"] == "/mps"
    assert env[progress.ENV_PATH] == str(tmp_path / "p") and env[progress.ENV_START_STEP] == "0"
    assert progress.ENV_MAX_STEPS not in env, "an inherited step limit must not reach a job that was given none"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(HOOK_DIR), "/user/lib"]
    assert env["SHAREWISE_LIB"] == str(LIB_DIR) and (LIB_DIR / "sharewise" / "__init__.py").is_file()
    assert env["SHAREWISE_PIN_CORES"] == "1" and env["SHAREWISE_JOB_TOKEN"]
    again = job_environment(c, progress_path=tmp_path / "p", max_steps=5, start_step=2, base=base)
    assert (again[progress.ENV_MAX_STEPS], again[progress.ENV_START_STEP]) == ("5", "2")
    assert again["SHAREWISE_JOB_TOKEN"] != env["SHAREWISE_JOB_TOKEN"], "each launch is its own claim on the count"
    assert "SHAREWISE_PIN_CORES" not in again
    with pytest.raises(ConfigError):
        job_environment(c, progress_path=tmp_path / "p", max_steps=0, base=base)
    observed = {**base, "SHAREWISE_OBSERVE_PORT": "9478", "SHAREWISE_OBSERVE_NAME": "theirs"}
    env = job_environment(c, progress_path=tmp_path / "p", base=observed)
    assert not any(k.startswith("SHAREWISE_OBSERVE_") for k in env), "an exported observe port must not reach a job"


def test_a_missing_working_directory_or_program_is_a_named_error(tmp_path):
    from sharewise.profiler.commands import CommandStartError, launch

    with pytest.raises(CommandStartError, match="working directory .* does not exist"):
        launch(parse_command("t=cmd:--cwd nowhere python t.py"), progress_path=tmp_path / "p", cwd_base=tmp_path)
    with pytest.raises(CommandStartError, match="cannot start 'no-such-program-xyz'"):
        launch(parse_command("t=cmd:no-such-program-xyz"), progress_path=tmp_path / "p")


# -- the step hook, in this process -----------------------------------------------------------------------------
class _Opt:
    """Stands in for an optimizer: the hook only keeps it (weakly) and compares identities."""

    param_groups: list = []


def _hook(tmp_path, **extra):
    from sharewise.profiler import progress
    from sharewise.profiler.stephook import StepHook

    env = {progress.ENV_PATH: str(tmp_path / "progress"), "SHAREWISE_JOB_TOKEN": "t1", **extra}
    return StepHook(env)


def test_the_hook_counts_the_first_optimizer_and_explicit_calls(tmp_path):
    from sharewise.profiler.progress import read_progress
    from sharewise.profiler.stephook import AUDIT_EVENT

    hook = _hook(tmp_path, SHAREWISE_START_STEP="10")
    generator, critic = _Opt(), _Opt()
    for _ in range(3):  # a GAN: two optimizers step per iteration; one iteration is one step
        hook.on_optimizer_step(generator, (), {})
        hook.on_optimizer_step(critic, (), {})
    hook.on_audit("open", ("f", "r"))  # other audit events are not steps
    hook.on_audit(AUDIT_EVENT, ())
    assert [s for s, _ in read_progress(tmp_path / "progress")] == [11, 12, 13, 14]
    assert (tmp_path / "progress.owner").read_text() == f"t1 {os.getpid()}"


def test_the_hook_stops_the_job_at_max_steps(tmp_path):
    hook = _hook(tmp_path, SHAREWISE_MAX_STEPS="2")
    assert hook.step() == 1
    with pytest.raises(SystemExit) as exc:
        hook.step()
    assert exc.value.code == 0


def test_one_process_owns_the_count_per_launch(tmp_path):
    (tmp_path / "progress.owner").write_text("t1 1")  # another process of this launch claimed it
    assert _hook(tmp_path).step() is None
    (tmp_path / "progress.owner").write_text("old-launch 1")  # a previous start of the job: taken over
    assert _hook(tmp_path).step() == 1


def test_a_hook_asked_for_features_reports_them_from_the_running_steps(tmp_path):
    torch = pytest.importorskip("torch")
    from sharewise.profiler.stephook import StepHook

    features = tmp_path / "hook.json"
    hook = StepHook({"SHAREWISE_PROGRESS": str(tmp_path / "p"), "SHAREWISE_FEATURES": str(features),
                     "SHAREWISE_JOB_TOKEN": "t"})
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    for i in range(8):
        if i == 2:
            features.with_name("hook.json.request").write_text(json.dumps({"trace_steps": 2}))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        hook.on_optimizer_step(opt, (), {})
    report = json.loads(features.read_text())
    assert report["info"]["counts"] == "optimizer" and report["info"]["device"] == "cpu"
    f = report["features"]
    # One step: the forward product 2*8*16*4 FLOPs (the bias add is not counted), and in backward only the
    # weight gradient's product, 2*8*16*4 again (the input needs no gradient).
    assert f["f_flops_per_step"] == 2 * (2 * 8 * 16 * 4)
    assert f["f_param_bytes"] == (16 * 4 + 4) * 4
    assert f["f_kernels_per_step"] > 0 and 0 < f["f_busy_frac"] <= 1 and f["f_step_time_ms"] > 0
    assert all(math.isfinite(v) for v in f.values())


def _train_step(model, opt, x):
    def step():
        opt.zero_grad()
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        out.float().pow(2).mean().backward()
        opt.step()

    return step


@pytest.mark.parametrize("which", ["cnn", "transformer", "lstm", "conv_transpose_groups"])
def test_flops_from_the_profiler_match_the_workloads_counter(which):
    torch = pytest.importorskip("torch")
    nn = torch.nn
    from sharewise.profiler.flops import make_flop_counter
    from sharewise.profiler.recorded_flops import profiled_flops

    torch.manual_seed(0)
    if which == "cnn":
        model, x = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(8 * 8 * 8, 10)), torch.randn(4, 3, 16, 16)
    elif which == "transformer":
        layer = nn.TransformerEncoderLayer(32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        model, x = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), torch.randn(2, 10, 32)
    elif which == "lstm":
        model, x = nn.LSTM(12, 16, batch_first=True), torch.randn(3, 7, 12)
    else:
        model, x = nn.Sequential(nn.Conv2d(4, 8, 3, groups=2, dilation=2), nn.ConvTranspose2d(8, 4, 3, stride=2,
                                                                                           output_padding=1)), \
            torch.randn(2, 4, 12, 12)
    step = _train_step(model, torch.optim.Adam(model.parameters()), x)
    step()
    with torch.profiler.profile(record_shapes=True) as prof:
        step()
    with make_flop_counter() as counter:
        step()
    assert counter.get_total_flops() > 0
    assert profiled_flops(prof) == counter.get_total_flops()


def test_conv_output_shape_by_hand():
    from sharewise.profiler.recorded_flops import conv_output_shape

    # (16 + 2*1 - 1*(3-1) - 1) // 2 + 1 = 8
    assert conv_output_shape([(4, 3, 16, 16), (8, 3, 3, 3), None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1]) == (
        4, 8, 8, 8)
    # transposed: (5-1)*2 - 0 + 1*(3-1) + 1 + 1 = 12 per side; out channels = w[1] * groups
    assert conv_output_shape([(1, 8, 5, 5), (8, 2, 3, 3), None, [2], [0], [1], True, [1], 2]) == (1, 4, 12, 12)


# -- names in traces, queues and plans --------------------------------------------------------------------------
def test_a_trace_replays_a_command_under_its_name_and_keeps_the_spec(tmp_path):
    from sharewise.datasets.traces import load_trace
    from sharewise.datasets.traces.generic import write_generic_csv

    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,arrival_s,duration_s,gpus,workload\n"
        'j1,0,100,1,"mytrain=cmd:python train.py --layers 1,2 --msg ""hi"""\n'
        "j2,5,50,1,ncf\n"
    )
    trace = load_trace(path)
    assert list(trace.workload) == ["mytrain", "ncf"]
    assert list(trace.spec) == ['mytrain=cmd:python train.py --layers 1,2 --msg "hi"', "ncf"]
    assert parse_command(trace.spec[0]).argv[-2:] == ("--msg", "hi")
    assert list(trace.subset(np.array([1])).spec) == ["ncf"]
    again = load_trace(write_generic_csv(trace, tmp_path / "again.csv"))
    assert list(again.spec) == list(trace.spec) and list(again.workload) == list(trace.workload)
    assert load_trace(tmp_path / "again.csv").spec is not None
    plain = tmp_path / "plain.csv"
    plain.write_text("job_id,arrival_s,duration_s,gpus,workload\nj1,0,1,1,ncf\n")
    assert load_trace(plain).spec is None


def test_a_bad_command_in_a_trace_names_its_line(tmp_path):
    from sharewise.datasets.traces import load_trace

    path = tmp_path / "t.csv"
    path.write_text("job_id,arrival_s,duration_s,gpus,workload\nj1,0,1,1,ncf\nj2,1,1,1,x=cmd:python 'a.py\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: column 'workload': .*No closing quotation"):
        load_trace(path)


def test_recommend_takes_a_queued_command_and_the_plan_carries_its_spec(tmp_path):
    pytest.importorskip("xgboost")
    from sharewise.app.recommend import RecommendConfig, deploy, recommend
    from sharewise.datasets.store import Dataset, open_dataset
    from sharewise.predictor import train_model

    ref = open_dataset("reference", profiles=True, pairs=True)
    profiles, pairs = ref.read_profiles(), ref.read_pairs()
    mine = profiles[profiles["workload"] == "resnet18"].assign(workload="mytrain", spec="mytrain=cmd:python t.py")
    data = Dataset(tmp_path / "data")
    data.write_profiles(pd.concat([profiles, mine], ignore_index=True))
    data.write_pairs(pairs)
    model = tmp_path / "model.json"
    train_model(profiles, pairs, n_estimators=15, max_depth=3).save(model)
    spec = "mytrain=cmd:python train.py --layers 1,2"
    queue = tmp_path / "queue.csv"
    pd.DataFrame({"job_id": ["q1", "q2"], "workload": [spec, "ncf"]}).to_csv(queue, index=False)
    assert f'"{spec}"' in queue.read_text(), "pandas quotes the comma as any CSV writer does"
    config = RecommendConfig(model=str(model), data=str(tmp_path / "data"), queue=str(queue), gpus=2)
    plan = recommend(config)
    jobs = {j: (w, s) for p in plan.placements for j, w, s in zip(p["jobs"], p["workloads"], p["specs"], strict=True)}
    assert jobs == {"q1": ("mytrain", spec), "q2": ("ncf", "ncf")}
    neutral = deploy(config, "plan").deploy.to_json()
    entries = {j["job_id"]: j for p in neutral["placements"] for j in p["jobs"]}
    assert entries["q1"]["spec"] == spec and entries["q1"]["workload"] == "mytrain" and "spec" not in entries["q2"]


# -- a command's profile downstream -----------------------------------------------------------------------------
def _command_profile(profiles: pd.DataFrame) -> pd.DataFrame:
    from sharewise.profiler.blackbox import UNMEASURED

    row = profiles[profiles["workload"] == "resnet18"].iloc[[0]].copy()
    row = row.assign(workload="mycnn", family="mycnn", spec="mycnn=cmd:python cnn.py")
    for feature in UNMEASURED:
        row[feature] = np.nan
    return row


def test_the_predictor_accepts_a_command_profile_with_its_nan_features():
    pytest.importorskip("xgboost")
    from sharewise.datasets.store import open_dataset
    from sharewise.predictor import predict_pairs, train_model

    ref = open_dataset("reference", profiles=True, pairs=True)
    profiles, pairs = ref.read_profiles(), ref.read_pairs()
    model = train_model(profiles, pairs, n_estimators=15, max_depth=3)
    with_command = pd.concat([profiles, _command_profile(profiles)], ignore_index=True)
    query = pd.DataFrame({"workload_a": ["mycnn", "mycnn"], "workload_b": ["ncf", "mycnn"]})
    out = predict_pairs(model, with_command, query)
    assert np.isfinite(out[["p10_a", "p50_a", "p90_a", "p50_b"]].to_numpy()).all()


def test_show_says_why_a_command_profile_lacks_features():
    from sharewise.cli.profiler import unmeasured_notes
    from sharewise.datasets.store import open_dataset

    profiles = open_dataset("reference", profiles=True).read_profiles()
    assert unmeasured_notes(profiles) == []
    notes = unmeasured_notes(pd.concat([profiles, _command_profile(profiles)], ignore_index=True))
    assert notes[0].startswith("commands measured as they run (mycnn)")
    assert any("f_activation_bytes" in n and "autograd saves" in n for n in notes)
    assert any("f_opcount_gemm_conv" in n for n in notes)


def test_importing_the_command_api_imports_no_torch():
    import subprocess

    code = ("import sys, sharewise.profiler.commands, sharewise.profiler.blackbox, sharewise.command_spec; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_an_update_the_loss_scaler_skips_is_not_a_step(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from sharewise.profiler.progress import read_progress

    hook = _hook(tmp_path)
    handle = register_optimizer_step_post_hook(hook.on_optimizer_step)
    try:
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
        x = torch.randn(8, 4)
        for scale in (1.0, float("inf"), 1.0):  # the second update's gradients overflow: AMP skips it
            opt.zero_grad()
            scaler.scale(model(x).sum() * scale).backward()
            scaler.step(opt)
            scaler.update()
        # Gradient accumulation: two backward passes, one update, one step.
        opt.zero_grad()
        for _ in range(2):
            scaler.scale(model(x).sum()).backward()
        scaler.step(opt)
        scaler.update()
    finally:
        handle.remove()
    assert [s for s, _ in read_progress(tmp_path / "progress")] == [1, 2, 3]


def test_a_hook_that_cannot_write_reports_nothing_and_never_raises_into_the_step(tmp_path):
    hook = _hook(tmp_path / "no-such-folder")
    assert hook.step() is None and hook.step() is None
