"""Bytes moved: what each aten op reads and writes, per module and phase.

The convention (``docs/roofline.md``): an op reads each distinct tensor argument once and
writes each tensor it returns once; a tensor's bytes are those of the elements it can
reach (``element_size × Π sizes`` over the dimensions with a non-zero stride, so an
``expand``-ed argument counts its underlying elements once). Aliasing follows the op's
schema:

- a *view* (every tensor it returns aliases an argument without writing it: ``view``,
  ``t``, ``expand``, ``slice``, ``permute``, ...; and ``_unsafe_view``, whose schema
  does not say so) moves nothing: 0 bytes; nor does an allocation (``empty``,
  ``empty_like``, ``empty_strided``, ``new_empty``): memory is reserved, not written;
  nor does a metadata query (``prim::device``, ``sym_size``);
  ``ones_like``, ``zeros_like``, ``new_zeros``, ... write their result but read only
  their argument's shape;
- an argument the op writes in place counts as written, and also as read unless the op
  only overwrites it (``copy_``, ``fill_``, ``zero_``, the random fills, ``out=``
  arguments); a returned alias of it is not written twice;
- a fused kernel (``addmm``, ``convolution``, ``native_layer_norm``, the flash and
  memory-efficient attention kernels) counts what it reads and writes as one op: its
  intermediates never reach memory. Unfused, each op's reads and writes count;
- a gather (``embedding``, ``index_select``, ``gather``, ``index``, ``take``) reads from
  its source only as many bytes as it returns (at most the whole source), and its
  indices; ``index_copy_`` writes only the source's elements into its argument;
- a list of tensors (``cat``, ``stack``) is read tensor by tensor;
- FSDP2's ``fsdp::all_gather_copy_in`` reads the rank's shards and writes them into its
  slice of the all-gather buffer (``all_gather_input_numel`` elements of the buffer's
  dtype); the buffer it is handed and returns is otherwise untouched. Its other ops
  (``split_with_sizes_copy``, ``chunk_cat``, ``copy_``) follow their schemas: they read
  their inputs and write their ``out=`` tensors.

Sums go to ``bytes_accessed`` (forward) and ``backward_bytes_accessed`` (backward) of the
module the dispatch mode names, like FLOPs. Device-side caches, re-reads a kernel makes
because its tiles do not fit, and the memory traffic of ops layerscope cannot see (a
custom kernel called outside the dispatcher) are not counted: this is the minimum a
kernel must move, the traffic a roofline model assumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch._ops import OpOverload

import layerscope.metricspec as ms
from layerscope.collect.observer import Observer
from layerscope.metrics.flops.zero import METADATA
from layerscope.profile import Node, Profile

FORWARD_KEY = ms.BYTES_ACCESSED
BACKWARD_KEY = ms.BACKWARD_BYTES_ACCESSED

#: In-place ops that overwrite their argument without reading it.
_OVERWRITE = frozenset(
    {
        "copy_",
        "fill_",
        "zero_",
        "uniform_",
        "normal_",
        "random_",
        "bernoulli_",
        "exponential_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "set_",
        "resize_",
        "index_put_",  # writes only the indexed elements: counted as the values written
    }
)

#: Ops that read only the shape, dtype and device of their tensor arguments.
_SHAPE_ONLY = frozenset(
    {
        "ones_like",
        "zeros_like",
        "full_like",
        "rand_like",
        "randn_like",
        "randint_like",
        "new_zeros",
        "new_ones",
        "new_full",
    }
)
#: Ops that allocate without writing, and ops that read a tensor's metadata only (a
#: FakeTensorMode asks ``prim::device`` of every argument of every op).
_ALLOCATE = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
)
_METADATA = frozenset({"device", "layout", "dim", "numel", "storage_offset", *METADATA})
#: Views whose schema returns a new tensor: ``_unsafe_view`` (how a matmul's 2-D result
#: is reshaped back to its input's batch dimensions) aliases its argument.
_UNANNOTATED_VIEWS = frozenset({"_unsafe_view"})

#: Ops that gather elements of their first argument: they read from it only what they
#: return (an embedding lookup reads its rows, not the whole table).
_GATHER = frozenset({"embedding", "index_select", "gather", "index", "take"})

_READ, _WRITE, _READ_WRITE = 0, 1, 2


def _all_gather_copy_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    """``fsdp::all_gather_copy_in(inputs, output, split_sizes, input_numel, rank)``: reads
    the inputs, writes ``input_numel`` elements of ``output``."""
    names = ("all_gather_inputs", "all_gather_output", "inp_split_sizes", "all_gather_input_numel")
    got = [args[i] if i < len(args) else kwargs.get(name) for i, name in enumerate(names)]
    inputs, output, _, numel = got
    read = sum(tensor_bytes(t) for t in inputs or () if isinstance(t, Tensor))
    size = output.element_size() if isinstance(output, Tensor) else 0
    return read, int(numel or 0) * size


def _index_copy_(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    """``self.index_copy_(dim, index, source)``: reads the index and the source, writes
    the source's elements into ``self`` (a static KV cache's update), not all of it."""
    names = ("self", "dim", "index", "source")
    got = [args[i] if i < len(args) else kwargs.get(name) for i, name in enumerate(names)]
    index, source = got[2], got[3]
    read = sum(tensor_bytes(t) for t in (index, source) if isinstance(t, Tensor))
    return read, tensor_bytes(source) if isinstance(source, Tensor) else 0


#: Ops whose schema does not say what they touch: qualified name -> (args, kwargs) ->
#: (bytes read, bytes written).
_SPECIAL: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], tuple[int, int]]] = {
    "fsdp::all_gather_copy_in": _all_gather_copy_in,
    "aten::index_copy_": _index_copy_,
}


class _Plan:
    """What an op's schema says about its arguments and returns, resolved once."""

    __slots__ = ("args", "func", "gather", "is_view", "reads_only", "special", "write_returns")

    def __init__(self, func: OpOverload) -> None:
        self.func = func  # kept alive: plans are looked up by id(func)
        schema = func._schema
        name = schema.name.split("::")[-1]
        returns = [r for r in schema.returns if "Tensor" in str(r.type)]
        self.is_view = (
            name in _ALLOCATE
            or name in _METADATA
            or name in _UNANNOTATED_VIEWS
            or (
                bool(returns)
                and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
            )
        )
        # returns that are new tensors (an in-place op's returned alias is its argument)
        self.write_returns = [
            i
            for i, r in enumerate(schema.returns)
            if r.alias_info is None and "Tensor" in str(r.type)
        ]
        overwrite = name in _OVERWRITE
        self.args: list[tuple[int, str, int]] = []  # (position, name, how it is used)
        lists = False
        for i, a in enumerate(schema.arguments):
            kind = str(a.type)
            if "Tensor" not in kind or name in _SHAPE_ONLY:
                continue
            lists = lists or "[]" in kind or "List[" in kind  # Tensor[] is List[Tensor]
            if a.alias_info is not None and a.alias_info.is_write:
                pure = overwrite or a.is_out or (a.kwarg_only and a.name.startswith("out"))
                self.args.append((i, a.name, _WRITE if pure else _READ_WRITE))
            else:
                self.args.append((i, a.name, _READ))
        self.gather = name in _GATHER
        self.special = _SPECIAL.get(schema.name)
        #: at most two tensor arguments, both only read, and one new tensor returned
        self.reads_only = (
            not self.gather
            and len(self.args) <= 2
            and not lists
            and all(how == _READ for _, _, how in self.args)
            and self.write_returns == [0]
            and len(schema.returns) == 1
        )


def tensor_bytes(t: Tensor) -> int:
    """Bytes of the elements ``t`` can reach (stride-0 dimensions count once); a jagged
    nested tensor's are its values buffer's (its sizes and strides are symbolic)."""
    if t.is_nested:
        values = getattr(t, "_values", None)
        if isinstance(values, Tensor):
            return tensor_bytes(values)
    try:
        if t.is_contiguous():
            return int(t.nbytes)
        n = 1
        for size, stride in zip(t.shape, t.stride(), strict=True):
            if size == 0:
                return 0
            if stride != 0:
                n *= size
        return n * t.element_size()
    except (RuntimeError, NotImplementedError):  # sparse, nested: no strides
        return t.numel() * t.element_size()


def op_bytes(
    plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
) -> tuple[int, int]:
    """(bytes read, bytes written) by one call of an op."""
    if plan.is_view:
        return 0, 0
    n = len(args)
    if plan.reads_only and isinstance(out, Tensor):  # f(a[, b]) -> a new tensor: most ops
        read = 0
        first: Any = None
        for i, name, _ in plan.args:
            value = args[i] if i < n else kwargs.get(name)
            if isinstance(value, Tensor) and value is not first:  # x * x reads x once
                read += tensor_bytes(value)
                first = value
        return read, tensor_bytes(out)
    return _mixed_bytes(plan, args, kwargs, out)


def _mixed_bytes(
    plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
) -> tuple[int, int]:
    """``op_bytes`` of an op that writes an argument, returns several tensors or gathers."""
    if plan.special is not None:
        return plan.special(args, kwargs)
    n = len(args)
    read = written = 0
    seen_read: list[int] = []  # ids; an op has a handful of tensor arguments
    seen_written: list[int] = []
    if plan.gather and args and isinstance(args[0], Tensor) and isinstance(out, Tensor):
        # the source's elements that reach the result, at most the whole source
        read += min(tensor_bytes(args[0]), tensor_bytes(out))
        seen_read.append(id(args[0]))
    for i, name, how in plan.args:
        value = args[i] if i < n else kwargs.get(name)
        if isinstance(value, Tensor):
            tensors: Any = (value,)
        elif isinstance(value, list | tuple):
            tensors = value
        else:
            continue
        for t in tensors:
            if not isinstance(t, Tensor):
                continue
            key = id(t)
            if how != _WRITE and key not in seen_read:
                seen_read.append(key)
                read += tensor_bytes(t)
            if how != _READ and key not in seen_written:
                seen_written.append(key)
                written += tensor_bytes(t)
    if plan.write_returns:
        written += _returned_bytes(plan, out, seen_written)
    return read, written


def _returned_bytes(plan: _Plan, out: Any, seen_written: list[int]) -> int:
    """Bytes of the returned tensors not already counted as written arguments."""
    if isinstance(out, Tensor):
        return tensor_bytes(out) if key_free(out, seen_written) else 0
    written = 0
    outs = out if isinstance(out, tuple | list) else (out,)
    for i in plan.write_returns:
        if i < len(outs):
            value = outs[i]
            tensors = value if isinstance(value, list | tuple) else (value,)
            for t in tensors:
                if isinstance(t, Tensor) and key_free(t, seen_written):
                    written += tensor_bytes(t)
    return written


def key_free(t: Tensor, seen: list[int]) -> bool:
    """Whether ``t`` is not in ``seen`` yet (then it is now)."""
    key = id(t)
    if key in seen:
        return False
    seen.append(key)
    return True


#: Plans by id(op), shared by every counter: an op's schema does not change, and reading
#: it costs more than most ops' bytes. A plan keeps its op alive, so its id stays its own.
_PLANS: dict[int, _Plan] = {}


class ByteCounter(Observer):
    """Accumulates each op's bytes read + written into the self metrics of its node."""

    def __init__(self) -> None:
        self.saw_backward = False

    def on_op(
        self,
        func: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        node: Node,
        backward: bool,
    ) -> None:
        plan = _PLANS.get(id(func))
        if plan is None:
            plan = _PLANS[id(func)] = _Plan(func)
        if backward:
            self.saw_backward = True
        if plan.is_view:
            return
        read, written = op_bytes(plan, args, kwargs, out)
        key = BACKWARD_KEY if backward else FORWARD_KEY
        m = node.self_metrics
        m[key] = m.get(key, 0) + read + written

    def finish(self, profile: Profile) -> None:
        """Give every node the measured keys (0 where no op ran), so totals roll up."""
        keys = (FORWARD_KEY, BACKWARD_KEY) if self.saw_backward else (FORWARD_KEY,)
        for node in profile.root.walk():
            for key in keys:
                node.self_metrics.setdefault(key, 0)


__all__ = ["BACKWARD_KEY", "FORWARD_KEY", "ByteCounter", "op_bytes", "tensor_bytes"]
