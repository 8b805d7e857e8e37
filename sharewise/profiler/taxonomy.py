"""The op taxonomy: the category of every aten op and CUDA kernel (GEMM/conv, elementwise, reduction...).

One categorizer for the static counts (``flops.count_step``, dispatch-mode op names such as
``"aten.addmm.default"``) and the measured trace (``trace.trace_features``, profiler names such as
``"aten::addmm"`` and kernel names); pure Python, no torch.
"""

from __future__ import annotations

import re

#: Op categories, in the order features are emitted. Every aten op and CUDA kernel maps to one of them,
#: except the metadata-only ops of ``VIEW`` (see ``op_category``).
CATEGORIES: tuple[str, ...] = (
    "gemm_conv",
    "elementwise",
    "reduction",
    "normalization",
    "embedding",
    "data_movement",
    "optimizer",
    "other",
)

#: Category of ops that only change tensor metadata or allocate without writing (``view``, ``t``,
#: ``expand``, ``empty``...). They launch no kernel, so they are left out of op counts, kernel counts
#: and time shares: counting them would drown the ops that do work (a ``linear`` alone dispatches
#: ``t``, ``transpose`` and ``as_strided``).
VIEW = "view"

_VIEW_OPS = frozenset(
    """
    view _unsafe_view view_as reshape _reshape_alias t transpose permute expand expand_as squeeze unsqueeze
    select slice as_strided detach alias unbind split split_with_sizes unsafe_split unsafe_split_with_sizes
    chunk unsafe_chunk narrow diagonal unfold movedim moveaxis numpy_T lift_fresh resolve_conj resolve_neg
    empty empty_like empty_strided new_empty new_empty_strided _nested_view_from_buffer set resize
    is_same_size _has_compatible_shallow_copy_type real imag view_as_real view_as_complex conj flatten
    unflatten contiguous_ detach_ requires_grad_ _version
    """.split()
)

_GEMM_OPS = frozenset(
    """
    mm addmm bmm baddbmm addbmm matmul linear mv addmv dot vdot einsum tensordot bilinear _scaled_mm
    _addmm_activation mkldnn_linear _mkldnn_linear _int_mm _weight_int8pack_mm lstm gru rnn_tanh rnn_relu
    lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell cudnn_convolution_relu cudnn_convolution_add_relu
    """.split()
)
_GEMM_PREFIXES = (
    "conv",
    "_conv",
    "cudnn_conv",
    "miopen_conv",
    "miopen_depthwise",
    "mkldnn_conv",
    "slow_conv",
    "thnn_conv",
    "_slow_conv",
    "_nnpack",
    "mkldnn_rnn",
    "_cudnn_rnn",
    "miopen_rnn",
    "_thnn_fused_lstm",
    "_thnn_fused_gru",
    "scaled_dot_product",
    "_scaled_dot_product",
    "_flash_attention",
    "_efficient_attention",
    "_fused_sdp",
    "_convolution",
    "_cudnn_attention",
    "flex_attention",
)

_NORM_SUBSTRINGS = ("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm")

_REDUCTION_OPS = frozenset(
    """
    sum nansum mean nanmean prod max min amax amin aminmax argmax argmin norm linalg_vector_norm
    frobenius_norm std var std_mean var_mean cumsum cumprod logsumexp logcumsumexp any all topk sort
    argsort median nanmedian mode kthvalue count_nonzero kl_div dist cdist _cdist_forward trace
    """.split()
)
_REDUCTION_SUBSTRINGS = ("softmax", "loss", "pool", "cross_entropy", "nll_", "_cdist")

_DATA_MOVEMENT_OPS = frozenset(
    """
    copy _copy_from _copy_from_and_resize _to_copy to clone contiguous cat _cat stack hstack vstack index
    index_select index_put _index_put_impl gather scatter scatter_add scatter_reduce masked_select
    masked_scatter take put repeat repeat_interleave flip roll constant_pad_nd pad _local_scalar_dense item
    narrow_copy slice_scatter select_scatter diagonal_scatter as_strided_scatter _unsafe_index nonzero
    unfold_backward col2im im2col pin_memory _pin_memory index_add index_copy index_fill tile
    _unsafe_index_put embedding_renorm _to_dense to_dense to_sparse _foreach_copy
    """.split()
)
_DATA_MOVEMENT_SUFFIXES = ("_copy", "_pad1d", "_pad2d", "_pad3d", "_scatter")

_ELEMENTWISE_OPS = frozenset(
    """
    add sub rsub mul div true_divide floor_divide remainder fmod neg abs sign sgn exp exp2 expm1 log log2
    log10 log1p pow sqrt rsqrt reciprocal sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh
    sigmoid logit erf erfc erfinv relu relu6 gelu silu mish elu selu celu leaky_relu rrelu hardtanh
    hardsigmoid hardswish softplus softshrink hardshrink threshold prelu _prelu_kernel glu clamp clamp_min
    clamp_max clip where masked_fill fill zero zeros zeros_like ones ones_like full full_like new_zeros
    new_ones new_full scalar_tensor arange linspace logspace eye tril triu eq ne lt le gt ge logical_and
    logical_or logical_not logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not isnan isinf isfinite
    nan_to_num floor ceil round trunc frac maximum minimum fmax fmin lerp addcmul addcdiv square
    normal uniform bernoulli native_dropout dropout random randint randn rand randperm exponential
    _masked_scale _fused_dropout feature_dropout alpha_dropout lgamma digamma polygamma xlogy
    heaviside copysign hypot nextafter _softmax_backward_data_elementwise upsample_nearest2d
    upsample_bilinear2d upsample_nearest1d upsample_linear1d upsample_bicubic2d upsample_nearest3d
    upsample_trilinear3d _upsample_nearest_exact2d _upsample_bilinear2d_aa grid_sampler_2d
    grid_sampler_3d affine_grid_generator _fused_moving_avg_obs_fq_helper
    """.split()
)


def op_name_base(name: str) -> str:
    """Return the bare op name of an aten op name in any of its spellings.

    ``"aten::add_"``, ``"aten.add_.Tensor"``, ``"add_"`` and ``"aten::add"`` all give ``"add"``; backward
    suffixes stay (``"aten::threshold_backward"`` gives ``"threshold_backward"``).
    """
    if "::" in name:
        name = name.split("::", 1)[1]
    elif name.startswith(("aten.", "prim.")):
        # OpOverload spelling: namespace.op.overload
        name = name.split(".")[1]
    name = name.strip()
    # In-place and out= variants cost the same as the functional op.
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def op_category(name: str) -> str:
    """Return the category of an aten op name: one of ``CATEGORIES``, or ``VIEW`` for metadata-only ops.

    The one categorizer for both the static counts (dispatch-mode op names such as ``"aten.addmm.default"``)
    and the measured trace (profiler names such as ``"aten::addmm"``). Backward ops take the category of
    their forward op (``convolution_backward`` is ``gemm_conv``, ``native_layer_norm_backward`` is
    ``normalization``); optimizer-only ops (``_foreach_*``, ``_fused_adam``) are ``optimizer``.

    Examples
    --------
    >>> op_category("aten::addmm"), op_category("aten.relu_.default"), op_category("aten::t")
    ('gemm_conv', 'elementwise', 'view')
    """
    base = op_name_base(name)
    if not base:
        return "other"
    if base.startswith("_foreach_") or base.startswith(("_fused_adam", "_fused_sgd", "_fused_adagrad")):
        # _foreach_copy_ is also used outside optimizers, but inside them it is their state copy.
        return "optimizer"
    # Strip one backward suffix so a backward op follows its forward op's category.
    fwd = base
    for suffix in ("_backward_data", "_backward_input", "_backward_weight", "_backward_elemt", "_backward"):
        if fwd.endswith(suffix):
            fwd = fwd[: -len(suffix)]
            break
    if base in _VIEW_OPS:
        return VIEW
    if fwd in _VIEW_OPS:
        # select_backward, slice_backward...: allocate zeros and copy the gradient into them.
        return "data_movement"
    if fwd in _GEMM_OPS or fwd.startswith(_GEMM_PREFIXES):
        return "gemm_conv"
    if any(s in fwd for s in _NORM_SUBSTRINGS):
        return "normalization"
    if fwd.startswith(("embedding", "_embedding")):
        return "embedding"
    if fwd in _REDUCTION_OPS or any(s in fwd for s in _REDUCTION_SUBSTRINGS):
        return "reduction"
    if fwd in _DATA_MOVEMENT_OPS or fwd.endswith(_DATA_MOVEMENT_SUFFIXES) or "pad" in fwd.split("_"):
        return "data_movement"
    if fwd in _ELEMENTWISE_OPS or fwd.startswith(("upsample", "_upsample")):
        return "elementwise"
    return "other"


# CUDA kernel names are not aten names (``ampere_sgemm_128x64_nn``,
# ``void at::native::vectorized_elementwise_kernel<...>``). These patterns, tried in order, are the
# fallback when the launching aten op is unknown or uninformative. Copy kernels come before elementwise
# because torch runs them through ``unrolled_elementwise_kernel<direct_copy_kernel...>``.
_KERNEL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("optimizer", re.compile(r"multi_tensor_apply|fused_?adam|fused_?sgd|foreach")),
    (
        "gemm_conv",
        re.compile(
            r"gemm|gemv|cutlass|xmma|wgmma|cublas|conv(?!ert)|winograd|fprop|dgrad|wgrad|"
            r"flash|fmha|attention|sm\d\d_|dot_kernel|lstm|rnn"
        ),
    ),
    ("normalization", re.compile(r"norm|(?:^|[^a-z])bn_")),
    ("embedding", re.compile(r"embedding")),
    ("reduction", re.compile(r"reduce|softmax|nll_loss|cross_entropy|pool|argmax|argmin")),
    (
        "data_movement",
        re.compile(
            r"memcpy|memset|copy|concat|catarray|gather|scatter|index|transpose|permute|"
            r"nchwtonhwc|nhwctonchw|pad"
        ),
    ),
    (
        "elementwise",
        re.compile(r"elementwise|vectorized|unrolled|fill|relu|gelu|silu|sigmoid|tanh|dropout|activation"),
    ),
)


def kernel_category(kernel_name: str) -> str:
    """Return the op category of a CUDA kernel from its name alone (one of ``CATEGORIES``).

    Examples
    --------
    >>> kernel_category("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32")
    'gemm_conv'
    >>> kernel_category("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>")
    'elementwise'
    """
    lowered = kernel_name.lower()
    for category, pattern in _KERNEL_PATTERNS:
        if pattern.search(lowered):
            return category
    return "other"
