"""Device-independent counts of one training step: FLOPs, aten ops by category, parameter/activation bytes.

The categories themselves (which op is GEMM, elementwise, ...) are the op taxonomy in ``taxonomy.py``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sharewise.profiler.taxonomy import CATEGORIES, VIEW, op_category

if TYPE_CHECKING:
    from sharewise.profiler.workloads.base import Workload

# -- FLOP formulas for the gaps of torch.utils.flop_counter ------------------------------------------


def _prod(xs: Any) -> int:
    return int(math.prod(int(x) for x in xs))


def _rnn_matmul_flops(input_shape: Any, weight_shapes: Any) -> int:
    """FLOPs of the matrix products of one recurrent layer pass over a whole sequence.

    Every token (time step x batch row) multiplies its input by ``W_ih`` (``G*H x I``) and its previous
    hidden state by ``W_hh`` (``G*H x H``), and ``W_hr`` when there is a projection: 2 FLOPs per weight
    element per token, i.e. ``2 * tokens * G*H * (I + H)``. The gate nonlinearities are elementwise and,
    as in torch's counter, not counted.
    """
    tokens = _prod(input_shape[:-1])
    matrices = sum(_prod(s) for s in weight_shapes if s is not None and len(s) == 2)
    return 2 * tokens * matrices


def _mkldnn_rnn_layer_flop(input_shape, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
    # aten::mkldnn_rnn_layer is what nn.LSTM runs per layer and direction on CPU; torch counts 0 for it.
    return _rnn_matmul_flops(input_shape, [w_ih, w_hh])


def _mkldnn_rnn_layer_backward_flop(input_shape, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
    # The oneDNN backward always computes grad_input, grad_hidden (same matmul count as the forward) and
    # the weight gradients (again the same count): 2x the forward.
    return 2 * _rnn_matmul_flops(input_shape, [w_ih, w_hh])


def _cudnn_rnn_flop(input_shape, weight_shapes, *args, out_shape=None, **kwargs) -> int:
    # aten::_cudnn_rnn runs all layers and directions in one call; its weight list holds each layer's
    # matrices. Layers above the first see the same number of tokens, so the count is a sum over matrices.
    return _rnn_matmul_flops(input_shape, list(weight_shapes))


def _cudnn_rnn_backward_flop(input_shape, weight_shapes, *args, out_shape=None, **kwargs) -> int:
    # output_mask = (grad_input, grad_hx, grad_cx, grad_weight): the data gradients cost one forward's
    # matmuls, the weight gradients another.
    mask = args[-1] if args and isinstance(args[-1], (list, tuple)) else (True, True, True, True)
    forward = _rnn_matmul_flops(input_shape, list(weight_shapes))
    return forward * (int(any(mask[:3])) + int(bool(mask[3])))


def _conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    groups,
    output_mask,
    out_shape=None,
    **kwargs,
) -> int:
    """Convolution backward FLOPs that respect ``groups``.

    torch's ``conv_backward_flop`` computes the weight gradient as a convolution over all input channels
    of all groups, so for ``groups=g`` it counts ``g`` times too much: a depthwise conv with 32 channels
    gets a backward of 33x its forward instead of 2x. The grad-input part is right and reused.
    """
    from torch.utils.flop_counter import conv_flop_count

    def t(shape):
        return [shape[1], shape[0], *list(shape[2:])]

    groups = max(int(groups), 1)
    flops = 0
    if output_mask[0]:
        flops += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:
        if transposed:
            full = conv_flop_count(t(grad_out_shape), t(x_shape), t(out_shape[1]), transposed=False)
        else:
            full = conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False)
        flops += full // groups
    return flops


def _sdpa_cpu_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    # CPU's fused attention (aten::_scaled_dot_product_flash_attention_for_cpu) has no formula in torch,
    # which counts its CUDA siblings: reuse theirs so CPU and GPU agree.
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_cpu_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                            **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def flop_formulas() -> dict[Any, Any]:
    """Return the custom FLOP formulas handed to ``FlopCounterMode(custom_mapping=...)``.

    Scoped to our counters on purpose: ``register_flop_formula`` would change torch's global registry for
    every other user in the process (and raises on a second registration).
    """
    import torch

    aten = torch.ops.aten
    return {
        aten.mkldnn_rnn_layer: _mkldnn_rnn_layer_flop,
        aten.mkldnn_rnn_layer_backward: _mkldnn_rnn_layer_backward_flop,
        aten._cudnn_rnn: _cudnn_rnn_flop,
        aten._cudnn_rnn_backward: _cudnn_rnn_backward_flop,
        aten.convolution_backward: _conv_backward_flop,
        aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flop,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward_flop,
    }


def make_flop_counter():
    """Return a silent ``FlopCounterMode`` with sharewise's fixes: LSTM (CPU and cuDNN), grouped conv
    backward, CPU fused attention.

    Examples
    --------
    >>> import torch
    >>> with make_flop_counter() as counter:
    ...     _ = torch.ones(2, 3) @ torch.ones(3, 4)
    >>> counter.get_total_flops()
    48
    """
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=flop_formulas())


# -- one counted step ---------------------------------------------------------------------------------


@dataclass
class StepCounts:
    """What one ``workload.step()`` does, independent of how fast a device does it.

    Example::

        StepCounts(flops=2_359_296, op_counts={"gemm_conv": 6, "elementwise": 4, ...},
                   op_names={"aten::addmm": 2, ...}, param_bytes=10_536, activation_bytes=5_120,
                   bytes_estimate=41_848, device="meta")
    """

    flops: int
    op_counts: dict[str, int]
    op_names: dict[str, int]
    param_bytes: int
    activation_bytes: int
    device: str
    flops_by_op: dict[str, int] = field(default_factory=dict)

    @property
    def bytes_estimate(self) -> int:
        """Bytes a step moves at least: parameters read in forward and backward and gradients written
        (3x), activations written in forward and read in backward (2x)."""
        return 3 * self.param_bytes + 2 * self.activation_bytes

    @property
    def ops(self) -> int:
        """Aten ops that do work (views excluded)."""
        return sum(self.op_counts.values())


def _op_recorder(counts: Counter, in_optimizer: list[bool]):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _OpRecorder(TorchDispatchMode):
        """Counts every aten op dispatched during the step, by name."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            if name.startswith("aten::"):
                if in_optimizer[0] and op_category(name) != VIEW:
                    # Optimizer arithmetic (add_, mul_, lerp_ without foreach) is still the optimizer.
                    counts["optimizer::" + name] += 1
                else:
                    counts[name] += 1
            return func(*args, **(kwargs or {}))

    return _OpRecorder()


def _storage_key(t: Any) -> int:
    # The StorageImpl address: shared by all views of one storage, and valid on the meta device where
    # data_ptr() is 0 for every tensor.
    return t.untyped_storage()._cdata


def _storage_nbytes(t: Any) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
        return int(t.numel() * t.element_size())


def _parameters(model: Any) -> list[Any]:
    # A model is usually one nn.Module (an nn.ModuleDict for a GAN); a plain list or dict of modules
    # is accepted too.
    if hasattr(model, "parameters"):
        return list(model.parameters())
    items = model.values() if isinstance(model, dict) else model if isinstance(model, (list, tuple)) else []
    return [p for m in items if hasattr(m, "parameters") for p in m.parameters()]


def count_step(workload: Workload, *, warmup_steps: int = 0) -> StepCounts:
    """Count one ``workload.step()`` (forward, backward, optimizer step) on the device it was built on.

    Runs on ``torch.device("meta")`` (shapes only, no compute) as on a real device. FLOPs come from
    ``torch.utils.flop_counter.FlopCounterMode`` with sharewise's fixes (``make_flop_counter``); ops from a
    dispatch mode that sees each aten op as autograd and the optimizer call it; activation bytes are the
    storages saved for backward (``saved_tensors_hooks``), each storage once, parameters excluded.

    Parameters
    ----------
    workload : Workload
        A built workload (``build(device)`` called). The step mutates it like any other step.
    warmup_steps : int
        Uncounted steps first, for a fresh instance: the first optimizer step also creates its state
        (``zeros_like`` per parameter for Adam), which later steps do not repeat.

    Returns
    -------
    StepCounts
        For example ``StepCounts(flops=35840, op_counts={"gemm_conv": 6, ...}, param_bytes=10536, ...)``.
    """
    import torch

    if workload.model is None:
        raise ValueError(
            f"workload {workload.name!r}: count_step needs a built workload (model is None); "
            "call build(device) first"
        )
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    for _ in range(warmup_steps):
        workload.step()
    params = _parameters(workload.model)
    param_storages: dict[int, int] = {}
    for p in params:
        param_storages.setdefault(_storage_key(p), _storage_nbytes(p))
    param_bytes = sum(param_storages.values())

    saved: dict[int, Any] = {}

    def pack(t):
        if isinstance(t, torch.Tensor):
            key = _storage_key(t)
            if key not in param_storages and key not in saved:
                # Holding the storage keeps its address from being reused by a later tensor in this step.
                saved[key] = t.untyped_storage()
        return t

    in_optimizer = [False]

    def pre_hook(*_a, **_k):
        in_optimizer[0] = True

    def post_hook(*_a, **_k):
        in_optimizer[0] = False

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    names: Counter = Counter()
    counter = make_flop_counter()
    handles = [register_optimizer_step_pre_hook(pre_hook), register_optimizer_step_post_hook(post_hook)]
    try:
        # Order matters: the recorder is entered last, so it sees the ops as the program calls them,
        # before FlopCounterMode decomposes the ones it has no formula for.
        with counter, _op_recorder(names, in_optimizer), torch.autograd.graph.saved_tensors_hooks(
            pack, lambda t: t
        ):
            workload.step()
    finally:
        for h in handles:
            h.remove()

    activation_bytes = sum(int(s.nbytes()) for s in saved.values())
    saved.clear()
    op_counts = {c: 0 for c in CATEGORIES}
    op_names: dict[str, int] = {}
    for name, n in names.items():
        if name.startswith("optimizer::"):
            cat = "optimizer"
            name = name[len("optimizer::") :]
        else:
            cat = op_category(name)
        op_names[name] = op_names.get(name, 0) + n
        if cat != VIEW:
            op_counts[cat] += n
    flops_by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return StepCounts(
        flops=int(counter.get_total_flops()),
        op_counts=op_counts,
        op_names=dict(sorted(op_names.items())),
        param_bytes=int(param_bytes),
        activation_bytes=int(activation_bytes),
        device=str(workload.device if workload.device is not None else "unknown"),
        flops_by_op=flops_by_op,
    )


def static_features(workload: Workload, counts: StepCounts | None = None) -> dict[str, float]:
    """Return the device-independent features of one step of a built workload.

    Parameters
    ----------
    workload : Workload
        A built workload; counted with ``count_step`` unless ``counts`` is given.
    counts : StepCounts, optional
        Counts already made (on another instance, e.g. on the meta device).

    Returns
    -------
    dict
        Float features, for example::

            {"f_flops_per_step": 35840.0, "f_param_bytes": 10536.0, "f_activation_bytes": 5120.0,
             "f_arith_intensity": 0.85, "f_batch_size": 8.0, "f_ops_per_step_static": 31.0,
             "f_opcount_gemm_conv": 6.0, ..., "f_opshare_gemm_conv": 0.19, ...}
    """
    if counts is None:
        counts = count_step(workload)
    total_ops = counts.ops
    denom = counts.bytes_estimate
    features: dict[str, float] = {
        "f_flops_per_step": float(counts.flops),
        "f_param_bytes": float(counts.param_bytes),
        "f_activation_bytes": float(counts.activation_bytes),
        "f_arith_intensity": float(counts.flops) / denom if denom > 0 else 0.0,
        "f_batch_size": float(workload.batch_size),
        "f_ops_per_step_static": float(total_ops),
    }
    for cat in CATEGORIES:
        features[f"f_opcount_{cat}"] = float(counts.op_counts.get(cat, 0))
    for cat in CATEGORIES:
        features[f"f_opshare_{cat}"] = counts.op_counts.get(cat, 0) / total_ops if total_ops else 0.0
    return features
