"""Feature extraction of a solo profile: FLOP fixes, op categories, trace features, memory, cache."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from sharewise.errors import SchemaError
from sharewise.profiler.features import (
    FeatureCache,
    FeatureKey,
    assert_finite,
    default_cache_root,
    solo_features,
)
from sharewise.profiler.flops import count_step, make_flop_counter, static_features
from sharewise.profiler.memory import MemoryTracker
from sharewise.profiler.taxonomy import CATEGORIES, VIEW, kernel_category, op_category
from sharewise.profiler.trace import (
    WINDOW_NAME,
    collect_events,
    event_category,
    events_from_profiler,
    profiler_events,
    trace_features,
    window_seconds,
)
from sharewise.profiler.workloads import load_workload_class
from sharewise.profiler.workloads.base import Workload

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machine's cores are shared: OpenMP workers spinning against other processes make a
    # tiny step take hundreds of milliseconds. Restored afterwards for other test modules.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- tiny literal workloads (the registry is not used on purpose: these tests pin the feature code) -------


class TinyMLP(Workload):
    name = "tiny_mlp"
    family = "mlp"
    default_batch_size = 8
    sizes = ("tiny",)

    def build(self, device):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(self.batch_size, 32, device=device)
        self.y = torch.randint(0, 10, (self.batch_size,), device=device)

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.optimizer.step()


class TinyCNN(Workload):
    """Conv, then a depthwise conv (groups = channels), batch norm, pooling, linear head."""

    name = "tiny_cnn"
    family = "cnn"
    default_batch_size = 2
    sizes = ("tiny",)

    def build(self, device):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, groups=16),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 4),
        ).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.x = torch.randn(self.batch_size, 3, 16, 16, device=device)
        self.y = torch.randint(0, 4, (self.batch_size,), device=device)

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.optimizer.step()


LSTM_B, LSTM_T, LSTM_I, LSTM_H, LSTM_LAYERS = 4, 6, 8, 16, 2


class TinyLSTM(Workload):
    name = "tiny_lstm"
    family = "rnn"
    default_batch_size = LSTM_B
    sizes = ("tiny",)

    def build(self, device):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = nn.LSTM(LSTM_I, LSTM_H, num_layers=LSTM_LAYERS, batch_first=True).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.x = torch.randn(self.batch_size, LSTM_T, LSTM_I, device=device)

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        out, _ = self.model(self.x)
        out.square().mean().backward()
        self.optimizer.step()


class NoMeta(TinyMLP):
    """Reads a scalar every step, which the meta device cannot do: counts must fall back to the device."""

    name = "no_meta"

    def step(self):
        super().step()
        self.last_loss = float(self.model[0].weight.sum().item())


def _lstm_forward_flops(batch: int, steps: int, inp: int, hidden: int, layers: int) -> int:
    # Per layer and time step: 2 * B * (I + H) * 4H (four gates, input and hidden matmuls).
    total = 0
    for layer in range(layers):
        layer_in = inp if layer == 0 else hidden
        total += steps * 2 * batch * (layer_in + hidden) * 4 * hidden
    return total


def _built(cls, device="cpu"):
    w = cls(size="tiny")
    w.build(device)
    return w


# -- FLOP counting fixes ----------------------------------------------------------------------------------


def test_lstm_forward_flops_match_formula_on_cpu():
    lstm = nn.LSTM(LSTM_I, LSTM_H, num_layers=LSTM_LAYERS, batch_first=True)
    x = torch.randn(LSTM_B, LSTM_T, LSTM_I)
    with FlopCounterMode(display=False) as plain:
        lstm(x)
    with make_flop_counter() as fixed:
        lstm(x)
    expected = _lstm_forward_flops(LSTM_B, LSTM_T, LSTM_I, LSTM_H, LSTM_LAYERS)
    # torch alone sees aten::mkldnn_rnn_layer on CPU and has no formula for it.
    assert plain.get_total_flops() == 0
    assert fixed.get_total_flops() > 0
    assert fixed.get_total_flops() == pytest.approx(expected, rel=0.05)


def test_lstm_step_flops_on_cpu_and_meta_agree():
    expected_fwd = _lstm_forward_flops(LSTM_B, LSTM_T, LSTM_I, LSTM_H, LSTM_LAYERS)
    cpu = count_step(_built(TinyLSTM, "cpu"))
    meta = count_step(_built(TinyLSTM, "meta"))
    # Forward + backward, backward about twice the forward (the first layer's input gradient and the zero
    # initial state's gradient are skipped on meta, which decomposes the LSTM into matmuls).
    assert cpu.flops == pytest.approx(3 * expected_fwd, rel=0.05)
    assert meta.flops == pytest.approx(3 * expected_fwd, rel=0.10)
    assert "aten.mkldnn_rnn_layer" in cpu.flops_by_op


@pytest.mark.parametrize("groups", [16, 4])
def test_grouped_conv_backward_is_twice_forward(groups):
    conv = nn.Conv2d(16, 16, 3, padding=1, groups=groups)
    x = torch.randn(2, 16, 12, 12, requires_grad=True)
    with make_flop_counter() as counter:
        conv(x)
    forward = counter.get_total_flops()
    with make_flop_counter() as counter:
        conv(x).sum().backward()
    backward = counter.get_total_flops() - forward
    assert forward == 2 * 2 * 144 * 16 * (16 // groups) * 9
    assert backward == pytest.approx(2 * forward, rel=0.01)
    # torch's own formula counts the weight gradient once per group: (1 + groups) x forward.
    with FlopCounterMode(display=False) as plain:
        conv(x).sum().backward()
    assert plain.get_total_flops() - forward == pytest.approx((1 + groups) * forward, rel=0.01)


def test_grouped_conv_backward_weight_only_and_transposed():
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    x = torch.randn(2, 8, 10, 10)  # no input gradient: only grad_weight is asked for
    with make_flop_counter() as counter:
        conv(x)
    forward = counter.get_total_flops()
    with make_flop_counter() as counter:
        conv(x).sum().backward()
    assert counter.get_total_flops() - forward == pytest.approx(forward, rel=0.01)

    deconv = nn.ConvTranspose2d(8, 8, 3, groups=4)
    xt = torch.randn(2, 8, 6, 6, requires_grad=True)
    with make_flop_counter() as counter:
        deconv(xt)
    forward = counter.get_total_flops()
    with make_flop_counter() as counter:
        deconv(xt).sum().backward()
    assert counter.get_total_flops() - forward == pytest.approx(2 * forward, rel=0.01)


def test_cpu_fused_attention_is_counted():
    b, h, length, d = 2, 4, 16, 8
    q = torch.randn(b, h, length, d, requires_grad=True)
    with FlopCounterMode(display=False) as plain:
        nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
    with make_flop_counter() as fixed:
        nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()
    forward = 2 * 2 * b * h * length * length * d  # QK^T and PV
    assert plain.get_total_flops() == 0  # aten::_scaled_dot_product_flash_attention_for_cpu
    assert fixed.get_total_flops() == forward + 5 * forward // 2  # torch's CUDA backward formula: 2.5x


def test_ungrouped_conv_counts_unchanged():
    conv = nn.Conv2d(3, 8, 3)
    x = torch.randn(2, 3, 10, 10, requires_grad=True)
    with FlopCounterMode(display=False) as plain:
        conv(x).sum().backward()
    with make_flop_counter() as fixed:
        conv(x).sum().backward()
    assert fixed.get_total_flops() == plain.get_total_flops()


# -- op categories and static features -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, category",
    [
        ("aten::addmm", "gemm_conv"),
        ("aten.mm.default", "gemm_conv"),
        ("aten::convolution_backward", "gemm_conv"),
        ("aten::mkldnn_rnn_layer_backward", "gemm_conv"),
        ("aten::_scaled_dot_product_flash_attention", "gemm_conv"),
        ("aten::relu_", "elementwise"),
        ("aten.threshold_backward.default", "elementwise"),
        ("aten::_log_softmax_backward_data", "reduction"),
        ("aten::nll_loss_forward", "reduction"),
        ("aten::cross_entropy_loss", "reduction"),
        ("aten::max_pool2d_with_indices", "reduction"),
        ("aten::native_batch_norm_backward", "normalization"),
        ("aten::native_layer_norm", "normalization"),
        ("aten::embedding_dense_backward", "embedding"),
        ("aten::copy_", "data_movement"),
        ("aten::cat", "data_movement"),
        ("aten::select_backward", "data_movement"),
        ("aten::_foreach_add_", "optimizer"),
        ("aten::_fused_adamw_", "optimizer"),
        ("aten::view", VIEW),
        ("aten::t", VIEW),
        ("aten::empty_strided", VIEW),
        ("aten::some_new_op", "other"),
    ],
)
def test_op_category(name, category):
    assert op_category(name) == category


@pytest.mark.parametrize(
    "name, category",
    [
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "gemm_conv"),
        ("ampere_sgemm_128x64_nn", "gemm_conv"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>", "gemm_conv"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", "normalization"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", "elementwise"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel>", "data_movement"),
        ("Memcpy HtoD (Pageable -> Device)", "data_movement"),
        ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
        ("my_custom_kernel", "other"),
    ],
)
def test_kernel_category(name, category):
    assert kernel_category(name) == category


def test_static_features_of_mlp_on_meta_equal_cpu():
    meta = count_step(_built(TinyMLP, "meta"), warmup_steps=1)
    cpu = count_step(_built(TinyMLP, "cpu"), warmup_steps=1)
    assert meta.flops == cpu.flops == 2 * 8 * (32 * 64 + 64 * 10) * 3 - 2 * 8 * 32 * 64
    assert meta.op_counts == cpu.op_counts
    assert meta.param_bytes == cpu.param_bytes == 4 * (32 * 64 + 64 + 64 * 10 + 10)
    assert meta.activation_bytes == cpu.activation_bytes > 0

    feats = static_features(_built(TinyMLP, "meta"), meta)
    assert feats["f_opcount_gemm_conv"] == 5  # 2 addmm forward, 3 mm backward (no grad for the input)
    assert feats["f_opcount_optimizer"] > 0
    assert feats["f_flops_per_step"] == meta.flops
    assert feats["f_batch_size"] == 8.0
    assert feats["f_arith_intensity"] == pytest.approx(
        meta.flops / (3 * meta.param_bytes + 2 * meta.activation_bytes)
    )
    assert sum(feats[f"f_opshare_{c}"] for c in CATEGORIES) == pytest.approx(1.0)
    assert sum(feats[f"f_opcount_{c}"] for c in CATEGORIES) == feats["f_ops_per_step_static"]
    assert_finite(feats, "mlp static")


def test_static_features_of_cnn_count_conv_and_normalization():
    counts = count_step(_built(TinyCNN, "meta"), warmup_steps=1)
    assert counts.op_counts["gemm_conv"] >= 4  # 2 convs + linear, forward and backward
    assert counts.op_counts["normalization"] >= 2
    assert counts.op_counts["reduction"] >= 1
    # torch's counter adds (groups - 1) x forward to the depthwise conv's backward; ours does not.
    plain_workload = _built(TinyCNN, "meta")
    plain_workload.step()
    with FlopCounterMode(display=False) as plain:
        plain_workload.step()
    depthwise_fwd = 2 * 2 * (16 * 16) * 16 * 1 * 9
    assert plain.get_total_flops() - counts.flops == 15 * depthwise_fwd


# -- trace features --------------------------------------------------------------------------------------


def _ev(name, start, dur, *, device="cpu", kernel=True, **extra):
    return {"name": name, "device": device, "start_us": start, "dur_us": dur, "is_kernel": kernel, **extra}


def test_trace_features_literal_cpu():
    events = [
        _ev(WINDOW_NAME, 0.0, 1000.0, kernel=False),
        _ev("aten::addmm", 100.0, 200.0),  # [100, 300]
        _ev("aten::relu", 250.0, 100.0),  # [250, 350]: overlaps, union [100, 350] = 250
        _ev("aten::sum", 500.0, 50.0),  # [500, 550]
        _ev("aten::add_", 700.0, 50.0, scope="optimizer"),  # [700, 750]
        _ev("aten::view", 800.0, 10.0, kernel=False),  # not a kernel
        _ev("sgemm", 0.0, 900.0, device="cuda"),  # another device: ignored
    ]
    wall_s = window_seconds(events)
    assert wall_s == pytest.approx(0.001)
    f = trace_features(events, wall_s, 2, "cpu")
    # durations sorted [50, 50, 100, 200]; p95 at rank 3 * 0.95 = 2.85: 100 + 0.85 * 100
    expected = {
        "f_kernels_per_step": 2.0,
        "f_launch_rate": 4000.0,
        "f_busy_frac": 0.35,
        "f_kernel_mean_us": 100.0,
        "f_kernel_p95_us": 185.0,
        "f_kernel_p99_us": 197.0,
        "f_timeshare_gemm_conv": 0.5,
        "f_timeshare_elementwise": 0.25,
        "f_timeshare_reduction": 0.125,
        "f_timeshare_normalization": 0.0,
        "f_timeshare_embedding": 0.0,
        "f_timeshare_data_movement": 0.0,
        "f_timeshare_optimizer": 0.125,
        "f_timeshare_other": 0.0,
    }
    assert f.keys() == expected.keys()
    for k, v in expected.items():
        assert f[k] == pytest.approx(v), k


def test_trace_features_literal_cuda_maps_kernels_to_launching_ops():
    events = [
        _ev(WINDOW_NAME, 0.0, 1000.0, kernel=False),
        _ev("ampere_sgemm_128x64_nn", 0.0, 300.0, device="cuda", op="aten::mm"),
        _ev("void at::native::vectorized_elementwise_kernel<4, FillFunctor>", 300.0, 100.0, device="cuda"),
        _ev("Memcpy HtoD (Pageable -> Device)", 450.0, 100.0, device="cuda"),
        _ev("multi_tensor_apply_kernel", 500.0, 100.0, device="cuda", op="aten::_foreach_add_"),
        # The launching op names no category ("other"): the kernel name decides.
        _ev("void at::native::reduce_kernel<512>", 800.0, 100.0, device="cuda", op="myns::custom"),
        _ev("aten::mm", 0.0, 20.0),  # a CPU op in a CUDA trace is no kernel
    ]
    f = trace_features(events, 0.001, 1, "cuda")
    # union: [0, 400] + [450, 600] + [800, 900] = 650 us; durations [100, 100, 100, 100, 300]
    assert f["f_kernels_per_step"] == 5.0
    assert f["f_launch_rate"] == pytest.approx(5000.0)
    assert f["f_busy_frac"] == pytest.approx(0.65)
    assert f["f_kernel_mean_us"] == pytest.approx(140.0)
    assert f["f_kernel_p95_us"] == pytest.approx(260.0)
    assert f["f_kernel_p99_us"] == pytest.approx(292.0)
    assert f["f_timeshare_gemm_conv"] == pytest.approx(3 / 7)
    for cat in ("elementwise", "data_movement", "optimizer", "reduction"):
        assert f[f"f_timeshare_{cat}"] == pytest.approx(1 / 7), cat
    assert event_category(events[1]) == "gemm_conv"


def test_trace_features_without_kernels_and_busy_clipped():
    f = trace_features([_ev(WINDOW_NAME, 0.0, 10.0, kernel=False)], 1e-5, 1, "cpu")
    assert f["f_kernels_per_step"] == 0.0 and f["f_busy_frac"] == 0.0
    assert all(f[f"f_timeshare_{c}"] == 0.0 for c in CATEGORIES)
    # A kernel longer than the stated wall time (clock skew) cannot make the device more than busy.
    f = trace_features([_ev("aten::mm", 0.0, 50.0)], 1e-5, 1, "cpu")
    assert f["f_busy_frac"] == 1.0


@pytest.mark.parametrize(
    "wall_s, steps, kind, match",
    [(0.0, 1, "cpu", "wall_s"), (1.0, 0, "cpu", "steps"), (1.0, 1, "tpu", "device_kind")],
)
def test_trace_features_rejects_bad_arguments(wall_s, steps, kind, match):
    with pytest.raises(ValueError, match=match):
        trace_features([], wall_s, steps, kind)


def test_trace_features_on_saved_cpu_trace():
    saved = json.loads((DATA / "trace_cpu_mlp.json").read_text(encoding="utf-8"))
    events = saved["events"]
    assert saved["wall_s"] == pytest.approx(window_seconds(events), rel=1e-6)
    f = trace_features(events, saved["wall_s"], saved["steps"], saved["device_kind"])
    assert f == pytest.approx(saved["expected"])
    kernels = [e for e in events if e["is_kernel"]]
    assert f["f_kernels_per_step"] == len(kernels) / saved["steps"]
    assert 0.0 < f["f_busy_frac"] <= 1.0
    assert sum(f[f"f_timeshare_{c}"] for c in CATEGORIES) == pytest.approx(1.0)
    assert f["f_timeshare_gemm_conv"] > 0 and f["f_timeshare_optimizer"] > 0
    assert f["f_kernel_mean_us"] <= f["f_kernel_p99_us"] or f["f_kernel_p95_us"] <= f["f_kernel_p99_us"]
    assert not any(op_category(e["name"]) == VIEW for e in kernels)


def test_collect_events_on_cpu_keeps_top_level_ops_only():
    w = _built(TinyMLP)
    w.step()
    events = collect_events(w, 2, "cpu")
    assert sum(e["name"] == WINDOW_NAME for e in events) == 1
    kernels = [e for e in events if e["is_kernel"]]
    names = {e["name"] for e in kernels}
    # aten::linear is top level; its aten::addmm child is inside it and not counted again.
    assert "aten::linear" in names and "aten::addmm" not in names
    assert all(e["device"] == "cpu" and e["name"].startswith("aten::") for e in kernels)
    assert any(e.get("scope") == "optimizer" for e in kernels)
    begin = next(e for e in events if e["name"] == WINDOW_NAME)["start_us"]
    assert all(e["start_us"] >= begin for e in events)


@pytest.mark.parametrize("workload", ["tiny_mlp", "lstm_lm"])
def test_profiler_events_match_torchs_event_list(workload):
    """The lean reading of the raw profiler results gives exactly what torch's ``prof.events()`` gives."""
    from torch.profiler import ProfilerActivity, profile, record_function

    if workload == "tiny_mlp":
        w = _built(TinyMLP)
    else:
        w = load_workload_class(workload)(size="small")
        w.build("cpu")
    for _ in range(2):
        w.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        w.step()
        with record_function(WINDOW_NAME):
            for _ in range(2):
                w.step()
    lean = profiler_events(prof)
    assert events_from_profiler(lean, "cpu") == events_from_profiler(list(prof.events()), "cpu")
    nested = [e for e in lean if e.cpu_parent is not None]
    assert nested and all(
        e.cpu_parent.time_range.start <= e.time_range.start and e.time_range.end <= e.cpu_parent.time_range.end
        for e in nested
    )


class _FakeEvent:
    """Stands in for torch's FunctionEvent with the attributes events_from_profiler reads."""

    def __init__(self, name, start, dur, *, cuda=False, id=0, linked=0, parent=None, annotation=False):
        from torch.autograd import DeviceType

        self.name, self.id, self.linked_correlation_id, self.cpu_parent = name, id, linked, parent
        self.is_user_annotation = annotation
        self.device_type = DeviceType.CUDA if cuda else DeviceType.CPU
        self.is_async = False
        self.time_range = type("Interval", (), {"start": start, "elapsed_us": lambda _self: dur})()


def test_events_from_profiler_maps_cuda_kernels_to_launching_ops():
    window = _FakeEvent(WINDOW_NAME, 100.0, 900.0, id=1)
    before = _FakeEvent("aten::mm", 10.0, 5.0, id=2)  # the warm-up step, before the window
    early_kernel = _FakeEvent("ampere_sgemm_early", 12.0, 3.0, cuda=True, linked=2)
    linear = _FakeEvent("aten::linear", 110.0, 50.0, id=3, parent=window)
    addmm = _FakeEvent("aten::addmm", 115.0, 40.0, id=4, parent=linear)
    gemm = _FakeEvent("sm90_xmma_gemm_f32", 130.0, 30.0, cuda=True, linked=4)
    opt = _FakeEvent("Optimizer.step#Adam.step", 300.0, 100.0, id=5, parent=window)
    foreach = _FakeEvent("aten::_foreach_add_", 310.0, 20.0, id=6, parent=opt)
    apply = _FakeEvent("multi_tensor_apply_kernel", 320.0, 10.0, cuda=True, linked=6)
    orphan = _FakeEvent("some_kernel", 500.0, 10.0, cuda=True, linked=99)
    # On CUDA, torch mirrors record_function ranges onto the GPU timeline (seen on an H200, torch 2.11): they
    # are neither a second window nor kernels, with or without the is_user_annotation flag set.
    gpu_window = _FakeEvent(WINDOW_NAME, 101.0, 899.0, cuda=True, annotation=True)
    gpu_opt = _FakeEvent("Optimizer.step#Adam.step", 305.0, 90.0, cuda=True)
    raw = [before, early_kernel, window, gpu_window, linear, addmm, gemm, opt, gpu_opt, foreach, apply, orphan]

    cuda = events_from_profiler(raw, "cuda")
    kernels = [e for e in cuda if e["is_kernel"]]
    assert [e["name"] for e in kernels] == ["sm90_xmma_gemm_f32", "multi_tensor_apply_kernel", "some_kernel"]
    assert kernels[0]["op"] == "aten::addmm" and "scope" not in kernels[0]
    assert kernels[1]["op"] == "aten::_foreach_add_" and kernels[1]["scope"] == "optimizer"
    assert "op" not in kernels[2]
    assert all(e["device"] == "cuda" for e in kernels)

    cpu = events_from_profiler([window, linear, addmm, opt, foreach], "cpu")
    assert [(e["name"], e["is_kernel"]) for e in cpu] == [
        (WINDOW_NAME, False), ("aten::linear", True), ("aten::_foreach_add_", True)
    ]
    assert cpu[2]["scope"] == "optimizer"
    with pytest.raises(RuntimeError, match="expected 1"):
        events_from_profiler([linear], "cpu")


# -- memory ----------------------------------------------------------------------------------------------


def test_memory_tracker_refuses_misuse():
    tracker = MemoryTracker("cpu")
    with pytest.raises(RuntimeError, match="before start"):
        tracker.stop()
    tracker.start()
    with pytest.raises(RuntimeError, match="twice"):
        tracker.start()
    assert set(tracker.stop()) == {"f_mem_rss_growth_bytes"}
    with pytest.raises(RuntimeError, match="before start"):
        tracker.stop()
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        MemoryTracker("meta").start()


def test_memory_tracker_sees_cpu_growth():
    tracker = MemoryTracker("cpu")
    tracker.start()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, written, so its pages are resident
    result = tracker.stop()
    del block
    assert result["f_mem_rss_growth_bytes"] >= 32 * 2**20


# -- solo_features ---------------------------------------------------------------------------------------

TRACE_KEYS = {
    "f_kernels_per_step",
    "f_launch_rate",
    "f_busy_frac",
    "f_kernel_mean_us",
    "f_kernel_p95_us",
    "f_kernel_p99_us",
} | {f"f_timeshare_{c}" for c in CATEGORIES}
STATIC_KEYS = {
    "f_flops_per_step",
    "f_param_bytes",
    "f_activation_bytes",
    "f_arith_intensity",
    "f_batch_size",
    "f_ops_per_step_static",
} | {f"f_opcount_{c}" for c in CATEGORIES} | {f"f_opshare_{c}" for c in CATEGORIES}
CPU_KEYS = STATIC_KEYS | TRACE_KEYS | {"f_step_time_ms", "f_achieved_flop_rate", "f_mem_rss_growth_bytes"}


@pytest.mark.parametrize("cls", [TinyMLP, TinyCNN, TinyLSTM])
def test_solo_features_on_cpu(cls):
    w = _built(cls)
    for _ in range(2):
        w.step()
    f = solo_features(w, "cpu", trace_steps=2)
    assert set(f) == CPU_KEYS
    assert all(isinstance(v, float) and math.isfinite(v) for v in f.values())
    assert f["f_flops_per_step"] > 0 and f["f_opcount_gemm_conv"] > 0
    assert f["f_kernels_per_step"] > 0 and f["f_step_time_ms"] > 0


def test_solo_features_falls_back_to_the_device_when_meta_fails():
    w = _built(NoMeta)
    w.step()
    f = solo_features(w, "cpu", trace_steps=1)
    assert f["f_flops_per_step"] == 2 * 8 * (32 * 64 + 64 * 10) * 3 - 2 * 8 * 32 * 64
    assert f["f_opcount_data_movement"] >= 1  # the .item() read, counted on cpu


def test_solo_features_refuses_unbuilt_workload():
    with pytest.raises(ValueError, match="built"):
        solo_features(TinyMLP(size="tiny"), "cpu")


def test_assert_finite_names_the_feature():
    assert_finite({"f_a": 1.0, "f_b": 2}, "ctx")
    with pytest.raises(SchemaError, match="'f_bad'.*nan"):
        assert_finite({"f_a": 1.0, "f_bad": float("nan")}, "workload 'x' on cpu")
    with pytest.raises(SchemaError, match="f_inf"):
        assert_finite({"f_inf": float("inf")}, "ctx")
    with pytest.raises(SchemaError, match="start with 'f_'"):
        assert_finite({"flops": 1.0}, "ctx")
    with pytest.raises(SchemaError, match="must be a float"):
        assert_finite({"f_s": "1"}, "ctx")


# -- cache -----------------------------------------------------------------------------------------------


def _key(**changes):
    base = dict(
        workload="tiny_mlp", spec="tests:TinyMLP", size="tiny", batch_size=8,
        device_name="Test CPU", torch_version="2.13.0",
    )
    base.update(changes)
    return FeatureKey(**base)


def test_cache_round_trip_and_key_separation(tmp_path):
    cache = FeatureCache(tmp_path)
    key = _key()
    assert cache.get(key) is None
    path = cache.put(key, {"f_x": 1.5, "f_y": 2.0})
    assert path.parent == tmp_path and path.name.startswith("tiny_mlp-bs8-")
    assert cache.get(key) == {"f_x": 1.5, "f_y": 2.0}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    for other in (_key(batch_size=16), _key(device_name="Other"), _key(torch_version="2.14.0"),
                  _key(spec="other.py:TinyMLP"), _key(size="small")):
        assert cache.path(other) != path
        assert cache.get(other) is None

    calls = []
    assert cache.get_or_compute(key, lambda: calls.append(1) or {"f_x": 9.0}) == {"f_x": 1.5, "f_y": 2.0}
    assert cache.get_or_compute(_key(batch_size=16), lambda: calls.append(1) or {"f_x": 9.0}) == {"f_x": 9.0}
    assert calls == [1]


def test_cache_accepts_mapping_keys(tmp_path):
    cache = FeatureCache(tmp_path)
    key = {"workload": "tiny_mlp", "spec": "tiny_mlp", "size": "tiny", "batch_size": 8,
           "device_name": "Test CPU", "torch_version": "2.13.0", "mode": "timeslice"}
    cache.put(key, {"f_x": 1.0})
    assert cache.get(dict(key)) == {"f_x": 1.0}
    assert cache.get({**key, "mode": "mps"}) is None
    # The same fields as a FeatureKey name the same file.
    as_key = FeatureKey(**{k: v for k, v in key.items() if k != "mode"})
    assert cache.path({k: v for k, v in key.items() if k != "mode"}) == cache.path(as_key)
    with pytest.raises(ValueError, match="batch_size"):
        cache.get({"workload": "x"})


def test_cache_ignores_corrupt_or_mismatched_files(tmp_path):
    cache = FeatureCache(tmp_path)
    key = _key()
    path = cache.put(key, {"f_x": 1.0})
    path.write_text("{not json", encoding="utf-8")
    assert cache.get(key) is None
    path.write_text(json.dumps({"key": {"workload": "else"}, "features": {"f_x": 1.0}}), encoding="utf-8")
    assert cache.get(key) is None
    with pytest.raises(SchemaError):
        cache.put(key, {"f_x": float("nan")})


def test_cache_key_for_workload_and_default_root(monkeypatch, tmp_path):
    w = TinyMLP(batch_size=4, size="tiny")
    key = FeatureKey.for_workload(w, "tests:TinyMLP", "Test CPU")
    assert (key.workload, key.batch_size, key.size) == ("tiny_mlp", 4, "tiny")
    assert key.torch_version == torch.__version__
    monkeypatch.setenv("SHAREWISE_CACHE_DIR", str(tmp_path))
    assert default_cache_root() == tmp_path / "features"
    assert FeatureCache().root == tmp_path / "features"
    monkeypatch.delenv("SHAREWISE_CACHE_DIR")
    assert default_cache_root() == Path(os.path.expanduser("~")) / ".cache" / "sharewise" / "features"
