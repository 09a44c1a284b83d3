"""Ops that do no arithmetic: views, copies, creation, RNG draws, indexing, selection.

They cost 0 and are never reported as unsupported. Data movement (``cat``, ``clone``,
``_to_copy``, padding, gathers and scatters without a reduction) and pure selection
(``where``, ``masked_fill``, ``tril``) are free by the FLOP convention; random number
generation (``bernoulli_``, ``normal_``) is not arithmetic on the tensor's values. The
arithmetic relatives of these ops (``scatter_add``, ``index_add``, ``index_put`` with
``accumulate=True``, ``embedding_dense_backward``) have formulas in ``reductions``.
Collectives and point-to-point ops of ``torch.distributed`` (the ``c10d``,
``_c10d_functional`` and ``_c10d_functional_autograd`` namespaces: ``allreduce_``,
``broadcast_``, ``all_gather_into_tensor``, ``wait_tensor``, ...) move data between ranks:
their bytes are ``metrics.comm``'s ``comm_bytes``, their FLOPs 0. FSDP2's copies into and
out of its communication buffers (``fsdp::all_gather_copy_in``, ``fsdp::chunk_cat``, ...)
are copies too.
"""

from __future__ import annotations

import torch
from torch._ops import OpOverloadPacket

from layerscope.metrics.flops.registry import (
    ZERO_COST_NAMES,
    ZERO_COST_NAMESPACES,
    aten_ops,
    register_zero_cost,
)

VIEWS = (
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "view_as",
    "expand",
    "expand_as",
    "permute",
    "transpose",
    "transpose_",
    "swapaxes",
    "swapaxes_",
    "swapdims",
    "swapdims_",
    "movedim",
    "t",
    "t_",
    "numpy_T",
    "mT",
    "mH",
    "adjoint",
    "slice",
    "select",
    "narrow",
    "squeeze",
    "squeeze_",
    "unsqueeze",
    "unsqueeze_",
    "flatten",
    "unflatten",
    "unbind",
    "split",
    "split_with_sizes",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "tensor_split",
    "chunk",
    "unsafe_chunk",
    "as_strided",
    "as_strided_",
    "diagonal",
    "alias",
    "detach",
    "detach_",
    "lift",
    "lift_fresh",
    "lift_fresh_copy",
    "view_as_real",
    "view_as_complex",
    "unfold",
    "real",
    "imag",
    "conj",
    "_conj",
    "resolve_conj",
    "resolve_neg",
    "_neg_view",
    "positive",
    "_nested_view_from_buffer",
    "_nested_view_from_jagged",
    "_nested_get_values",
    "_nested_get_offsets",
    "_nested_get_lengths",
    "_nested_get_jagged_dummy",
    "_nested_tensor_from_tensor_list",
    "nested_to_padded_tensor",
    "_indices",
    "_values",
    "indices",
    "values",
    "crow_indices",
    "col_indices",
    "ccol_indices",
    "row_indices",
    "coalesce",
    "_coalesced_",
    "_coalesced",
)

#: ``view_copy``-style functional variants of the views above.
VIEW_COPIES = tuple(f"{name}_copy" for name in VIEWS)

#: Ops that read a tensor's metadata only (sizes, strides, contiguity; a nested tensor's
#: component sizes, strides and offsets, a jagged one's cached bounds): they compute
#: nothing and move no bytes (``metrics.bytes`` reads this list too).
METADATA = (
    "is_same_size",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "sym_is_contiguous",
    "is_contiguous",
    "is_strides_like_format",
    "is_non_overlapping_and_dense",
    "_nested_tensor_size",
    "_nested_tensor_strides",
    "_nested_tensor_storage_offsets",
    "_nested_get_max_seqlen",
    "_nested_get_min_seqlen",
    "_nested_get_ragged_idx",
    "size",
    "stride",
)

COPIES = (
    "clone",
    "copy",
    "copy_",
    "_copy_from",
    "_copy_from_and_resize",
    "_to_copy",
    "to",
    "_to_dense",
    "to_dense",
    "to_sparse",
    "_to_sparse",
    "contiguous",
    "cat",
    "_cat",
    "concat",
    "concatenate",
    "stack",
    "_stack",
    "hstack",
    "vstack",
    "dstack",
    "column_stack",
    "repeat",
    "repeat_interleave",
    "tile",
    "roll",
    "flip",
    "fliplr",
    "flipud",
    "rot90",
    "constant_pad_nd",
    "pad",
    "_pad_enum",
    "reflection_pad1d",
    "reflection_pad2d",
    "reflection_pad3d",
    "replication_pad1d",
    "replication_pad2d",
    "replication_pad3d",
    "_pad_circular",
    "pixel_shuffle",
    "pixel_unshuffle",
    "channel_shuffle",
    "native_channel_shuffle",
    "im2col",
    "tril",
    "tril_",
    "triu",
    "triu_",
    "where",
    "masked_fill",
    "masked_fill_",
    "masked_select",
    "masked_scatter",
    "masked_scatter_",
    "index",
    "_unsafe_index",
    "index_select",
    "index_fill",
    "index_fill_",
    "index_copy",
    "index_copy_",
    "gather",
    "take",
    "take_along_dim",
    "scatter",
    "scatter_",
    "slice_scatter",
    "select_scatter",
    "diagonal_scatter",
    "as_strided_scatter",
    "slice_backward",
    "select_backward",
    "diagonal_backward",
    "as_strided_backward",
    "_unsafe_masked_index",
    "nonzero",
    "nonzero_static",
    "argwhere",
    "embedding",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d",
    "max_unpool2d",
    "max_unpool3d",
    "narrow_copy",
    "block_diag",
    "diag_embed",
    "diag",
    "trace_backward",
    "triu_indices",
    "tril_indices",
    "one_hot",
    "_pack_padded_sequence",
    "_pad_packed_sequence",
    "_pack_padded_sequence_backward",
    "_fused_sdp_choice",
    "_cudnn_rnn_flatten_weight",
    "_local_scalar_dense",
    "item",
    "_assert_async",
    "_assert_scalar",
    "_functional_assert_async",
    "_functional_assert_scalar",
    "_assert_tensor_metadata",
    # linalg's check of its info tensor (raises on a singular input): no arithmetic
    "_linalg_check_errors",
    "sym_constrain_range",
    "sym_constrain_range_for_size",
    "_functional_sym_constrain_range",
    "_functional_sym_constrain_range_for_size",
    "_print",
    "record_stream",
    "is_nonzero",
    "resize_",
    "resize_as_",
    "_resize_output_",
    "set_",
    "set",
    "resize",
    "resize_as",
    "_resize_output",
    "_make_dep_token",
    "_lazy_clone",
    "_reshape_copy",
    "_pin_memory",
    "slice_inverse",
    "matrix_H",
    "complex",
    "int_repr",
    "_coalesce",
    "copy_sparse_to_sparse_",
    "_convert_indices_from_coo_to_csr",
    "_convert_indices_from_csr_to_coo",
    "masked_scatter_backward",
    "to_padded_tensor",
    "_nested_tensor_from_mask",
    "_nested_tensor_from_mask_left_aligned",
    "_nested_from_padded",
    "_nested_from_padded_and_nested_example",
    "_new_zeros_with_same_feature_meta",
    "_foreach_copy_",
    "_foreach_copy",
    "_foreach_zero_",
    "_foreach_zero",
)

CREATION = (
    "empty",
    "empty_like",
    "empty_strided",
    "empty_permuted",
    "new_empty",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "new_zeros",
    "ones",
    "ones_like",
    "new_ones",
    "full",
    "full_like",
    "new_full",
    "fill",
    "fill_",
    "zero_",
    "zero",
    "arange",
    "range",
    "linspace",
    "logspace",
    "eye",
    "scalar_tensor",
    "tensor",
    "_efficientzerotensor",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "randint",
    "randint_like",
    "randperm",
    "normal",
    "normal_",
    "normal_functional",
    "uniform",
    "uniform_",
    "bernoulli",
    "bernoulli_",
    "exponential",
    "exponential_",
    "geometric",
    "geometric_",
    "cauchy",
    "cauchy_",
    "log_normal",
    "log_normal_",
    "random",
    "random_",
    "multinomial",
    "poisson",
    "_standard_gamma",
    "_sample_dirichlet",
    "binomial",
    "_philox_normal",
    "_philox_normal_",
    "_fill_mem_eff_dropout_mask_",
    "_sparse_coo_tensor_with_dims_and_tensors",
    "_sparse_coo_tensor_with_dims",
    "sparse_coo_tensor",
    "_sparse_coo_tensor_unsafe",
    "bartlett_window",
    "blackman_window",
    "hamming_window",
    "hann_window",
    "kaiser_window",
    "fft_fftfreq",
    "fft_rfftfreq",
    "_philox_key_split",
    "_philox_key_fold_in",
    "_philox_uniform",
    "_philox_uniform_",
    "sparse_resize_",
    "sparse_resize",
    "sparse_resize_and_clear_",
    "sparse_resize_and_clear",
)


#: Namespaces of torch.distributed's ops: every op in them is zero-cost. The reduction of
#: an all-reduce or reduce-scatter runs inside the communication backend, not as aten ops,
#: and is not counted as FLOPs (its bytes are ``comm_bytes``).
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")


#: FSDP2's own ops (``torch.distributed.fsdp``, defined when it is imported): copies into
#: and out of the all-gather and reduce-scatter buffers. Their bytes are
#: ``metrics.bytes``'s (what they read and write), their FLOPs 0.
FSDP_OPS = (
    "fsdp::all_gather_copy_in",
    "fsdp::split_with_sizes_copy",
    "fsdp::chunk_cat",
    "fsdp::copy_",
)


def collective_ops() -> list[OpOverloadPacket]:
    """The packets of every op this torch build registers in ``COLLECTIVE_NAMESPACES``."""
    found: list[OpOverloadPacket] = []
    prefixes = tuple(f"{ns}::" for ns in COLLECTIVE_NAMESPACES)
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        if not qualified.startswith(prefixes):
            continue
        namespace, _, name = qualified.partition("::")
        try:
            found.append(getattr(getattr(torch.ops, namespace), name))
        except (AttributeError, RuntimeError):
            continue
    return found


def _register() -> None:
    register_zero_cost(*aten_ops(*VIEWS, *VIEW_COPIES, *METADATA, *COPIES, *CREATION))
    register_zero_cost(*collective_ops())
    ZERO_COST_NAMESPACES.update(COLLECTIVE_NAMESPACES)  # and those defined later
    ZERO_COST_NAMES.update(FSDP_OPS)
    # Metadata queries FakeTensorMode and the profiler route through the dispatcher.
    for namespace, names in (
        ("prim", ("device", "layout", "dtype", "is_cuda", "data", "NumToTensor")),
        (
            "profiler",
            (
                "_record_function_enter",
                "_record_function_enter_new",
                "_record_function_exit",
            ),
        ),
    ):
        ns = getattr(torch.ops, namespace)
        for name in names:
            try:
                register_zero_cost(getattr(ns, name))
            except (AttributeError, RuntimeError, TypeError):
                continue


_register()
