"""Invariants of every registered workload, and loading user workloads from files and modules."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from sharewise.errors import UnknownWorkloadError, WorkloadContractError
from sharewise.profiler.workloads import REGISTRY, load_workload_class, workload_names

NAMES = workload_names()

# The zoo promised to users (and to grouped evaluation): name -> family.
EXPECTED_FAMILIES = {
    "resnet18": "resnet", "resnet50": "resnet", "resnet50_infer": "resnet", "vgg16": "vgg",
    "mobilenet_v2": "mobilenet", "bert": "bert", "bert_infer": "bert", "gpt2": "gpt",
    "transformer": "transformer", "lstm_lm": "lstm", "ncf": "recommendation", "dcgan": "gan",
    "cyclegan": "gan", "a3c": "rl", "ppo": "rl", "pointnet": "pointnet",
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny steps are dispatch-bound; one thread is as fast and leaves the other cores to other jobs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _holds_device_state(value) -> bool:
    kinds = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, kinds) for v in value)
    return isinstance(value, kinds)


# --- the registry ---------------------------------------------------------------------------------


def test_registry_holds_the_promised_zoo():
    assert {name: load_workload_class(name).family for name in EXPECTED_FAMILIES} == EXPECTED_FAMILIES
    classes = [load_workload_class(name) for name in NAMES]
    assert len({cls.family for cls in classes}) >= 8
    assert sum(cls.kind == "train" for cls in classes) >= 12


@pytest.mark.parametrize("name", NAMES)
def test_class_attributes_and_describe(name):
    cls = load_workload_class(name)
    assert cls.name == name, f"REGISTRY key {name!r} maps to a class named {cls.name!r}"
    assert cls.kind in ("train", "infer")
    assert isinstance(cls.default_batch_size, int) and cls.default_batch_size >= 1
    assert cls.description and "\n" not in cls.description
    assert set(cls.sizes) == {"tiny", "small", "full"}
    described = cls(size="tiny").describe()
    assert described["name"] == name
    assert described["family"] == cls.family
    assert described["default_batch_size"] == cls.default_batch_size
    assert described["kind"] == cls.kind


# --- running the built-ins ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_tiny_steps_on_cpu_then_close(name):
    w = load_workload_class(name)(size="tiny")
    w.build("cpu")
    before = {p: p.detach().clone() for p in w.model.parameters()}
    w.step()
    w.step()
    assert w.last_output is not None and torch.isfinite(w.last_output).all()
    params = dict(w.model.named_parameters())
    assert all(torch.isfinite(p).all() for p in params.values())
    moved = {p for p in params.values() if not torch.equal(before[p], p.detach())}
    if w.kind == "train":
        # Every parameter must be reached by backward; one without a gradient is dead weight in the model.
        no_grad = [n for n, p in params.items() if p.grad is None]
        assert not no_grad, f"{name}: parameters that step() never differentiates: {no_grad}"
        # Every network must be updated (a GAN half whose optimizer never steps would pass the check
        # above). Single tensors may legitimately stay put: a norm's bias whose gradient is exactly zero
        # because the next normalization removes any constant shift.
        for part, module in w.model.named_children():
            tensors = list(module.parameters())
            n_moved = sum(p in moved for p in tensors)
            assert n_moved >= 0.9 * len(tensors), f"{name}: {part} barely updated ({n_moved}/{len(tensors)})"
    else:
        assert w.optimizer is None
        assert not moved
    w.close()
    assert w.model is None
    leftovers = [attr for attr, value in vars(w).items() if _holds_device_state(value)]
    assert not leftovers, f"{name}: close() left tensors or modules in {leftovers}"
    w.close()


@pytest.mark.parametrize("name", NAMES)
def test_full_size_steps_on_meta_device(name):
    # FLOP and op counting of the published configurations runs on meta tensors: no memory, no compute.
    w = load_workload_class(name)(size="full")
    w.build("meta")
    w.step()
    assert w.last_output.device.type == "meta"
    assert all(p.device.type == "meta" for p in w.model.parameters())
    w.close()


@pytest.mark.parametrize("name", NAMES)
def test_explicit_batch_size_wins_over_the_size(name):
    cls = load_workload_class(name)
    assert cls(size="full").batch_size == cls.default_batch_size
    w = cls(batch_size=3, size="tiny")
    assert w.batch_size == 3
    w.build("cpu")
    w.step()
    w.close()


@pytest.mark.parametrize("kwargs", [{"size": "huge"}, {"size": "Tiny"}, {"batch_size": 0}, {"batch_size": -4},
                                    {"batch_size": 2.5}, {"batch_size": "8"}])
def test_invalid_size_or_batch_size_is_a_value_error(kwargs):
    cls = load_workload_class("resnet18")
    with pytest.raises(ValueError, match="resnet18"):
        cls(**kwargs)


# --- user workloads -------------------------------------------------------------------------------

USER_WORKLOAD = textwrap.dedent(
    '''
    """A user's own workload, as a user would write it."""
    import torch
    from sharewise.profiler.workloads.base import Workload


    class TinyRegression(Workload):
        name = "tiny_regression"
        family = "mlp"
        default_batch_size = 4

        def build(self, device):
            self.device = torch.device(device)
            self.model = torch.nn.Linear(3, 1).to(self.device)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            self.x = torch.randn(self.batch_size, 3, device=self.device)

        def step(self):
            self.optimizer.zero_grad(set_to_none=True)
            self.model(self.x).pow(2).mean().backward()
            self.optimizer.step()


    class NoStep:
        def build(self, device):
            pass

        def close(self):
            pass


    NOT_A_CLASS = 3
    '''
)


def _write(path, text=USER_WORKLOAD):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_user_workload_from_a_file(tmp_path):
    path = _write(tmp_path / "jobs" / "my_workload.py")
    cls = load_workload_class(f"{path}:TinyRegression")
    w = cls(batch_size=2)
    w.build("cpu")
    w.step()
    w.close()
    assert w.model is None and w.x is None


def test_user_workload_from_a_module(tmp_path, monkeypatch):
    _write(tmp_path / "sharewise_test_userpkg" / "__init__.py", "")
    _write(tmp_path / "sharewise_test_userpkg" / "jobs.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = load_workload_class("sharewise_test_userpkg.jobs:TinyRegression")
    assert cls.name == "tiny_regression"


def test_missing_file_says_which_path(tmp_path):
    missing = tmp_path / "nowhere.py"
    with pytest.raises(UnknownWorkloadError, match="not found") as exc:
        load_workload_class(f"{missing}:TinyRegression")
    assert str(missing) in str(exc.value)


def test_missing_class_lists_the_classes_there(tmp_path):
    path = _write(tmp_path / "my_workload.py")
    with pytest.raises(UnknownWorkloadError, match="no class 'Tiny'") as exc:
        load_workload_class(f"{path}:Tiny")
    assert "TinyRegression" in str(exc.value)


def test_class_without_step_breaks_the_contract(tmp_path):
    path = _write(tmp_path / "my_workload.py")
    with pytest.raises(WorkloadContractError, match=r"NoStep lacks method\(s\) step") as exc:
        load_workload_class(f"{path}:NoStep")
    assert "build(device), step() and close()" in str(exc.value)


def test_attribute_that_is_not_a_class_breaks_the_contract(tmp_path):
    path = _write(tmp_path / "my_workload.py")
    with pytest.raises(WorkloadContractError, match="expected a class, got int"):
        load_workload_class(f"{path}:NOT_A_CLASS")


def test_file_that_fails_to_import_reports_the_error(tmp_path):
    path = _write(tmp_path / "broken.py", "raise RuntimeError('no GPU here')\n")
    with pytest.raises(WorkloadContractError, match="RuntimeError: no GPU here"):
        load_workload_class(f"{path}:Anything")


def test_unimportable_module_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownWorkloadError, match="cannot import module 'sharewise_no_such_pkg") as exc:
        load_workload_class("sharewise_no_such_pkg.jobs:Job")
    assert "PYTHONPATH" in str(exc.value)


def test_unknown_builtin_lists_every_known_name():
    with pytest.raises(UnknownWorkloadError, match="unknown workload 'resnet1000'") as exc:
        load_workload_class("resnet1000")
    message = str(exc.value)
    assert all(name in message for name in REGISTRY)
    assert "path/to/file.py:ClassName" in message


# --- a user's own model without a wrapper (plain classes, torch.nn.Module) -------------------------

OWN_MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "own_models.py"


def test_plain_class_with_no_constructor_arguments_is_a_workload():
    cls = load_workload_class(f"{OWN_MODELS}:MyConvNet")
    w = cls()  # what the worker calls: cls(batch_size=None, size=...)
    assert cls.name == "MyConvNet" and w.batch_size == 1 and cls.family == "user"
    w.build("cpu")
    w.step()
    assert isinstance(w.model, torch.nn.Module)  # its ``model`` attribute: features count its parameters
    w.close()
    assert w.inner.model is None  # its own close() ran
    assert cls(size="tiny", batch_size=1).batch_size == 1  # a size or its own batch size is harmless


def test_plain_class_refuses_a_batch_size_it_cannot_take():
    cls = load_workload_class(f"{OWN_MODELS}:MyConvNet")
    with pytest.raises(WorkloadContractError, match=r"MyConvNet\(\) takes no batch_size, so batch size 8"):
        cls(batch_size=8)


def test_a_constructor_with_other_arguments_gets_one_line_naming_the_expected_signature():
    with pytest.raises(WorkloadContractError) as exc:
        load_workload_class(f"{OWN_MODELS}:NeedsWidth")
    message = str(exc.value)
    assert "\n" not in message and "NeedsWidth(width)" in message and "it needs width" in message
    assert "__init__(self) or __init__(self, batch_size=None, size='small')" in message


def test_cli_names_the_expected_signature_in_one_line(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "sharewise", "profile", f"{OWN_MODELS}:NeedsWidth", "--out", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=120,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert "__init__(self, batch_size=None, size='small')" in lines[0]


@pytest.mark.parametrize(
    "spec, kind, loss_shape",
    [
        ("TinyNet", "train", ()),  # input read off its Conv2d: 3 channels, 32x32; cross entropy on 2-D scores
        ("TinyNet[input=3x8x8;loss=mse;optimizer=adam;lr=0.001]", "train", ()),
        ("TokenNet", "train", ()),  # an Embedding first: 16 token ids below its 50 rows
        ("TokenNet[input=12:int64:50,mode=infer]", "infer", (32, 12, 50)),
    ],
)
def test_a_torch_module_is_trained_on_a_described_synthetic_batch(spec, kind, loss_shape):
    cls = load_workload_class(f"{OWN_MODELS}:{spec}")
    assert cls.kind == kind and cls.default_batch_size == 32
    w = cls(batch_size=None)
    w.build("cpu")
    before = [p.detach().clone() for p in w.model.parameters()]
    w.step()
    w.step()
    assert tuple(w.last_output.shape) == loss_shape and torch.isfinite(w.last_output).all()
    moved = any(not torch.equal(b, p) for b, p in zip(before, w.model.parameters(), strict=True))
    assert moved == (kind == "train")
    w.close()
    assert w.model is None and w.inputs_ == []
    meta = cls(batch_size=4)
    meta.build("meta")  # FLOP counting builds the same description on the meta device
    meta.step()
    meta.close()


@pytest.mark.parametrize(
    "spec, text",
    [
        ("NoClue", "cannot tell the input of NoClue"),
        ("TinyNet[input=3x]", "is not SHAPE[:DTYPE[:HIGH]]"),
        ("TinyNet[input=3x8x8:int8]", "dtypes: float32"),
        ("TinyNet[loss=hinge]", "loss must be one of"),
        ("TinyNet[width=3]", "is not one of input=..."),
        ("MyConvNet[input=3x8x8]", "a batch description [...] is for torch.nn.Module classes"),
    ],
)
def test_a_batch_description_that_cannot_work_says_why(spec, text):
    with pytest.raises(WorkloadContractError) as exc:
        cls = load_workload_class(f"{OWN_MODELS}:{spec}")
        cls().build("cpu")
    assert text in str(exc.value)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["MyConvNet", "TinyNet[input=3x16x16]"])
def test_own_models_profile_in_a_worker_with_features(spec):
    from sharewise.profiler.api import profile_one
    from sharewise.profiler.config import RunConfig

    config = RunConfig(window_s=0.2, repeats=1, probe=False, idle_wait_s=0.5, timeout_s=120)
    row = profile_one(f"{OWN_MODELS}:{spec}", config, use_cache=False)
    assert row["workload"] == spec.split("[")[0] and row["family"] == "user" and row["throughput"] > 0
    assert row["f_flops_per_step"] > 0 and row["f_param_bytes"] > 0
