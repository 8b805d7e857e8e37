"""FLOPs of a training command's step, counted from what ``torch.profiler`` recorded inside the job: the op
names, input shapes and scalar arguments, run through sharewise's FLOP formulas (those that count a built-in
workload's step, ``flops.make_flop_counter``). Used by the step hook (``stephook``), which cannot wrap a
user's step in ``FlopCounterMode``.
"""

from __future__ import annotations

from typing import Any

#: Ops whose FLOP formula needs the output shape, which the profiler does not record: it is computed.
_CONV_OPS = ("convolution", "_convolution")
_CONV_BACKWARD = "convolution_backward"
#: Argument kinds the profiler records that are not tensors (their value, when recorded, is passed as it is).
_NOT_TENSORS = frozenset({"Scalar", "ScalarList", "String", "TensorList", "GenericList", ""})


def profiled_flops(prof: Any) -> float:
    """FLOPs of the ops a finished ``torch.profiler.profile(record_shapes=True)`` recorded.

    The formulas are those ``flops.make_flop_counter`` counts a built-in workload's step with (torch's
    FLOP registry plus sharewise's fixes), applied to each op's recorded input shapes and scalar arguments.
    As in ``FlopCounterMode``, an op inside a counted op (``aten::_convolution`` inside
    ``aten::convolution``) is not counted again. An op whose arguments the formula cannot use falls back
    to the profiler's own FLOP count of that op (0 for most).
    """
    import torch
    from torch.autograd import DeviceType

    from sharewise.profiler.flops import make_flop_counter

    registry = make_flop_counter().flop_registry
    aten = torch.ops.aten
    found = []
    for k in prof.profiler.kineto_results.events():
        name = k.name()
        if k.device_type() != DeviceType.CPU or not name.startswith("aten::"):
            continue
        packet = getattr(aten, name[6:], None)
        if packet is not None and packet in registry:
            found.append((k.start_thread_id(), k.start_ns(), k.end_ns(), name[6:], packet, k))
    found.sort(key=lambda f: (f[0], f[1], -f[2]))
    total = 0
    outer: tuple[int, int] | None = None  # (thread, end) of the last counted op
    for thread, _start, end, op, packet, k in found:
        if outer is not None and outer[0] == thread and end <= outer[1]:
            continue
        outer = (thread, end)
        total += _op_flops(registry[packet], packet, op, k)
    return float(total)


def _op_flops(formula, packet: Any, op: str, event: Any) -> int:
    shapes, kinds = event.shapes(), event.dtypes()
    values = event.concrete_inputs() if hasattr(event, "concrete_inputs") else [None] * len(shapes)
    recorded: list[Any] = []
    for shape, kind, value in zip(shapes, kinds, values, strict=False):
        if value is not None:
            recorded.append(value)
        elif kind in _NOT_TENSORS:
            recorded.append(None)
        else:
            recorded.append(tuple(int(d) for d in shape))
    try:
        args, kwargs = dispatch_arguments(packet, event, recorded)
        out = output_shapes(op, recorded)
        return int(formula(*args, **kwargs, out_val=out))
    except Exception:  # a layout the formula does not expect
        return int(event.flops() or 0)


def dispatch_arguments(packet: Any, event: Any, recorded: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The arguments as ``FlopCounterMode`` sees them: kwarg-only ones as keywords, and trailing positional
    ones left out where they hold their default (the profiler records every argument of the schema)."""
    overload = getattr(event, "overload_name", lambda: "")() or "default"
    schema = getattr(packet, overload)._schema
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    defaults: list[bool] = []
    for arg, value in zip(schema.arguments, recorded, strict=False):
        if arg.kwarg_only:
            kwargs[arg.name] = value
            continue
        args.append(value)
        defaults.append(arg.has_default_value() and _same(value, arg.default_value))
    while defaults and defaults[-1]:
        defaults.pop()
        args.pop()
    return args, kwargs


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)):
        return list(value) == list(default)
    return value is default or (value == default and type(value) is type(default))


def output_shapes(op: str, recorded: list[Any]) -> Any:
    """The output shape(s) a FLOP formula of ``op`` reads, from its recorded arguments (None when unused)."""
    if op in _CONV_OPS:
        return conv_output_shape(recorded)
    if op == _CONV_BACKWARD:  # (grad_output, input, weight, ...) -> grad_input, grad_weight, grad_bias
        return (recorded[1], recorded[2], (recorded[2][0],))
    return None


def conv_output_shape(args: list[Any]) -> tuple[int, ...]:
    """Output shape of ``aten::convolution(input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups, ...)`` from its argument shapes and values (the profiler records no outputs).

    >>> conv_output_shape([(4, 3, 16, 16), (8, 3, 3, 3), (8,), [1, 1], [0, 0], [1, 1], False, [0, 0], 1])
    (4, 8, 14, 14)
    """
    x, w, _bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]

    def at(seq, i):
        return int(seq[i] if len(seq) > i else seq[0])

    spatial = []
    for i, n in enumerate(x[2:]):
        k = w[2 + i]
        if transposed:
            spatial.append((n - 1) * at(stride, i) - 2 * at(padding, i) + at(dilation, i) * (k - 1)
                           + at(output_padding, i) + 1)
        else:
            spatial.append((n + 2 * at(padding, i) - at(dilation, i) * (k - 1) - 1) // at(stride, i) + 1)
    channels = w[1] * int(groups) if transposed else w[0]
    return (x[0], channels, *spatial)
