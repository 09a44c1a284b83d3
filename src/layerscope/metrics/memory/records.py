"""Storage records: which storages were saved for backward, by whom, and which module
calls they entered or left (``profile.memory["storages"]``).

The memory observer reports every save (``saved``), every module call's arguments
(``inputs``) and outputs (``outputs``). A storage gets a row when it is saved or is an
argument of a module call; storages that are only outputs are not kept (an output that
is later saved or passed on gets its row then, with the calls it left). Identity is the
storage's Python object, held weakly (``storages.py``): a storage freed and another one
made at the same address are two rows.

The table (``to_dict``), documented in ``docs/memory.md``::

    {"paths": [module path, ...],
     "rows": [[bytes, [saved by ...], [input of ...], [output of ...], param], ...],
     "dropped": whether the table was dropped (over ``MAX_ROWS`` rows; then "paths"
                and "rows" are empty)}

- ``bytes``: the storage's ``nbytes`` (a saved view keeps its whole storage alive);
- ``saved by``: indices into ``paths`` of the modules whose forward ops saved it, in the
  order they first did; the first is the one whose ``activation_bytes`` it counts in
  (none for a storage only passed to modules, never saved);
- ``input of`` / ``output of``: the modules among whose call arguments (positional or
  keyword) / outputs a tensor on it was, each once;
- ``param``: a parameter's or buffer's storage (a saved ``W.t()``): never an activation.

Asked for (``record_ops()``, as a plan with ``checkpoint="op"`` does), the table also
has ``"ops"``: ``[[path index, op, bytes, flops], ...]``, each forward call of an op of
``RECORDED_OPS`` (the ops a selective-checkpointing policy saves: torchtitan's) in
call order, with its innermost module, the bytes of the storages its outputs made and
its FLOPs (layerscope's formulas, as the module's: a causal attention's half; 0 for an
op without one), and
``"op_rows"``: per call, the rows of its outputs' storages (none for a storage that got
no row: freed unsaved, never passed to a module). Asked for with
a policy (``record_ops(policy)``: a function as torch's
``create_selective_checkpoint_contexts`` takes), the calls of every op the policy saves
instead (``MUST_SAVE`` or ``PREFER_SAVE``, or True; it is called after each forward op
but ``SAC_IGNORED_OPS``, as torch calls it), and ``"policy"``: its name.

A tensor without a storage (sparse, some subclasses) that is saved gets a row of its own
bytes with no input or output modules. Only the forward pass is recorded: the module
calls a checkpoint's recomputation runs in the backward are not (nor what they save, as
for ``activation_bytes``). ``layerscope.analysis.whatif`` computes from the
table what checkpointing a module would save.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor, nn

from layerscope.collect.signature import iter_tensors
from layerscope.metrics.memory.opgraph import OpGraph, graph_asked
from layerscope.metrics.memory.storages import StorageTable, storage_of
from layerscope.profile import Node
from layerscope.torchapi import current_autograd_node

#: The ops whose calls ``record_ops()`` records: torchtitan's ``_op_sac_save_list``
#: (torchtitan/distributed/activation_checkpoint.py and its models' parallelize.py) as
#: aten ops: matmuls and every SDPA kernel; ``max`` (float8's scales).
RECORDED_OPS = frozenset({
    "aten.mm.default", "aten.max.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten._scaled_dot_product_attention_math.default",
    "aten._scaled_dot_product_fused_attention_overrideable.default",
})  # fmt: skip
#: None: no op records; True: ``RECORDED_OPS``'; a policy: the calls it saves
_RECORD_OPS: ContextVar[Any] = ContextVar("layerscope_record_ops", default=None)


@contextmanager
def record_ops(policy: Callable[..., Any] | None = None) -> Iterator[None]:
    """Storage tables made inside also record the calls of ``RECORDED_OPS``, or of the
    ops ``policy`` saves (module doc)."""
    token = _RECORD_OPS.set(True if policy is None else policy)
    try:
        yield
    finally:
        _RECORD_OPS.reset(token)


#: Most rows one profile keeps; past it the table is dropped (a notice says so), since a
#: partial table would give wrong what-if figures. A 70B-parameter transformer's layers
#: save some 20 storages each: a few thousand rows.
MAX_ROWS = 200_000


def policy_saves(policy: Callable[..., Any], func: Any, args: Any, kwargs: Any, out: Any) -> bool:
    """Whether a selective-checkpointing ``policy`` saves this call's outputs: it is
    called as torch calls it (after the op, with ``is_recompute`` False and the output),
    but not for ``SAC_IGNORED_OPS``; ``MUST_SAVE``, ``PREFER_SAVE`` and True save."""
    ignored, saving, context = _checkpoint_api()
    if func in ignored:
        return False
    decision = policy(context(out), func, *args, **(kwargs or {}))
    if isinstance(decision, bool):
        return decision
    return decision in saving


@functools.cache
def _checkpoint_api() -> tuple[Any, tuple[Any, ...], Callable[[Any], Any]]:
    """torch's ignored ops, the policies that save, and a context for an op's output
    (a torch whose ``SelectiveCheckpointContext`` takes no ``op_output``: without it)."""
    from torch.utils.checkpoint import (
        SAC_IGNORED_OPS,
        CheckpointPolicy,
        SelectiveCheckpointContext,
    )

    saving = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
    try:
        SelectiveCheckpointContext(is_recompute=False, op_output=None)
    except TypeError:
        return SAC_IGNORED_OPS, saving, lambda out: SelectiveCheckpointContext(is_recompute=False)
    return (
        SAC_IGNORED_OPS,
        saving,
        lambda out: SelectiveCheckpointContext(is_recompute=False, op_output=out),
    )


def policy_name(policy: Callable[..., Any]) -> str:
    """A policy's name for documents: its function's qualified name."""
    inner = getattr(policy, "func", policy)  # functools.partial
    return str(getattr(inner, "__qualname__", None) or type(inner).__name__)


#: Tensor types whose storage is their own (not a subclass's stand-in), and whose
#: ``detach`` can run below Python dispatch.
PLAIN_TENSORS = frozenset({Tensor, nn.Parameter})


def held_part(t: Tensor) -> Tensor:
    """What this rank holds of ``t``: a DTensor's local shard (whose storage the ops of a
    ``dtensor="local"`` analysis and the saves use; the DTensor's own is a logical-size
    stand-in), any other tensor itself."""
    return t if type(t) in PLAIN_TENSORS else getattr(t, "_local_tensor", t)


class _Row:
    __slots__ = ("inputs", "nbytes", "outputs", "param", "savers")

    def __init__(self, nbytes: int, param: bool) -> None:
        self.nbytes = nbytes
        self.param = param
        self.savers: list[int] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []


class StorageRecords:
    """The rows of one session (module doc); ``to_dict`` makes the table."""

    def __init__(self, table: StorageTable) -> None:
        self._table = table  # which storages are parameters' and buffers'
        self._rows: list[_Row] = []
        self._paths: dict[str, int] = {}
        # id(storage) -> (weak reference, its row); an entry goes when the storage dies
        self._live: dict[int, tuple[weakref.ref[torch.UntypedStorage], _Row]] = {}
        # id(storage) -> path indices of the calls it left, while it has no row
        self._pending: dict[int, tuple[weakref.ref[torch.UntypedStorage], list[int]]] = {}
        self.dropped = False
        #: the recorded op calls (module doc), None when not asked; the policy saving them
        asked = _RECORD_OPS.get()
        self.ops: list[list[Any]] | None = None if asked is None else []
        # per recorded op, the rows of its outputs' storages (made later for a storage
        # that gets its row after the op: ``_op_pending``, id(storage) -> op indices)
        self._op_rows: list[list[_Row]] = []
        self._op_pending: dict[int, tuple[weakref.ref[torch.UntypedStorage], list[int]]] = {}
        self.policy: Callable[..., Any] | None = None if asked is True else asked
        #: the forward's op graph (``opgraph``), when ``record_graph()`` asks for it
        self.graph = OpGraph(table) if graph_asked() else None

    def op(
        self, func: Any, node: Node, args: Any, kwargs: Any, out: Any, made: int, backward: bool
    ) -> None:
        """A call of ``func`` in ``node`` whose outputs made ``made`` bytes of new storage:
        recorded when asked, in the forward, for ``RECORDED_OPS`` or what the policy saves
        (and in the op graph when it is asked for)."""
        if backward:
            return
        if self.graph is not None:
            self.graph.op(func, self._index(node), args, kwargs, out)
        if self.ops is None:
            return
        if self.policy is None:
            if str(func) not in RECORDED_OPS:
                return
        elif not policy_saves(self.policy, func, args, kwargs, out):
            return
        from layerscope.metrics.flops import op_cost

        cost = op_cost(func, args, kwargs or {}, out)
        self.ops.append([self._index(node), str(func), made, cost.flops if cost else 0])
        self._op_rows.append([])
        for t in [out] if isinstance(out, Tensor) else iter_tensors(out):
            s = storage_of(held_part(t))
            if s is None:
                continue
            found = self._live_row(s)
            if found is not None:
                self._op_rows[-1].append(found)
            else:
                self._waiting(self._op_pending, s).append(len(self.ops) - 1)

    def _live_row(self, s: torch.UntypedStorage) -> _Row | None:
        """The row of ``s`` if it has one (None: none yet, or the id is another's now)."""
        found = self._live.get(id(s))
        return found[1] if found is not None and found[0]() is s else None

    def _waiting(self, table: dict[int, Any], s: torch.UntypedStorage) -> list[int]:
        """What waits in ``table`` (``_pending``'s module calls, ``_op_pending``'s op
        calls) for ``s`` to get a row: its list, made now if it has none."""
        key = id(s)
        pending = table.get(key)
        if pending is None or pending[0]() is not s:
            pending = table[key] = (weakref.ref(s, self._forget(key)), [])
        waiting: list[int] = pending[1]
        return waiting

    @staticmethod
    def _claimed(table: dict[int, Any], s: torch.UntypedStorage) -> list[int]:
        """What waited in ``table`` for ``s``'s row, taken out of it (none: [])."""
        pending = table.pop(id(s), None)
        return pending[1] if pending is not None and pending[0]() is s else []

    def _index(self, node: Node) -> int:
        i = self._paths.get(node.path)
        if i is None:
            i = self._paths[node.path] = len(self._paths)
        return i

    def _forget(self, key: int) -> Any:
        def died(_: object) -> None:
            self._live.pop(key, None)
            self._pending.pop(key, None)
            self._op_pending.pop(key, None)

        return died

    def _new(self, nbytes: int, param: bool) -> _Row | None:
        if len(self._rows) >= MAX_ROWS:
            self.dropped = True
            return None
        row = _Row(nbytes, param)
        self._rows.append(row)
        return row

    def _row(self, s: torch.UntypedStorage) -> _Row | None:
        """The row of a live storage, made now if it has none (None past ``MAX_ROWS``)."""
        found = self._live_row(s)
        ref = self._table.get(s)
        param = ref is not None and ref.param
        if found is not None:
            found.param |= param
            return found
        row = self._new(s.nbytes(), param)
        if row is None:
            return None
        row.outputs = self._claimed(self._pending, s)
        for op in self._claimed(self._op_pending, s):
            if row not in self._op_rows[op]:
                self._op_rows[op].append(row)
        key = id(s)
        self._live[key] = (weakref.ref(s, self._forget(key)), row)
        return row

    def saved(self, t: Tensor, node: Node) -> None:
        """A tensor saved for backward by ``node``'s forward."""
        s = storage_of(t)
        row = self._new(t.numel() * t.element_size(), False) if s is None else self._row(s)
        if row is not None:
            i = self._index(node)
            if i not in row.savers:
                row.savers.append(i)
            if self.graph is not None:
                self.graph.saved(t, i)

    def inputs(self, node: Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call of ``node`` with these arguments (not kept for a call the backward
        runs: a checkpoint's recomputation)."""
        if current_autograd_node() is not None:
            return
        i: int | None = None
        for t in (*iter_tensors(args), *iter_tensors(kwargs)):
            s = storage_of(held_part(t))
            if s is None:
                continue
            row = self._row(s)
            if row is None:
                return
            i = self._index(node) if i is None else i
            if i not in row.inputs:
                row.inputs.append(i)

    def outputs(self, node: Node, output: Any) -> None:
        """A call of ``node`` that returned ``output`` (not in the backward, as ``inputs``)."""
        if current_autograd_node() is not None:
            return
        tensors = [output] if isinstance(output, Tensor) else iter_tensors(output)
        for t in tensors:
            s = storage_of(held_part(t))
            if s is None:
                continue
            i = self._index(node)
            found = self._live_row(s)
            into = found.outputs if found is not None else self._waiting(self._pending, s)
            if i not in into:
                into.append(i)

    def to_dict(self) -> dict[str, Any]:
        """The table (module doc): ``paths``, ``rows`` and ``dropped``."""
        self._live.clear()  # no callbacks once the session is over
        self._pending.clear()
        self._op_pending.clear()
        if self.dropped:
            return {"paths": [], "rows": [], "dropped": True}
        rows = [[r.nbytes, r.savers, r.inputs, r.outputs, r.param] for r in self._rows]
        out = {"paths": list(self._paths), "rows": rows, "dropped": False}
        if self.ops is not None:
            at = {id(r): i for i, r in enumerate(self._rows)}
            out["ops"] = self.ops
            out["op_rows"] = [[at[id(r)] for r in rows] for rows in self._op_rows]
        if self.policy is not None:
            out["policy"] = policy_name(self.policy)
        if self.graph is not None:
            out["compiled"] = self.graph.compiled()
            self.graph = None
        return out

    def notice(self) -> str | None:
        """What a dropped table means, for the profile's notices; None when it is whole."""
        if not self.dropped:
            return None
        return (
            f"memory['storages'] not kept: over {MAX_ROWS:,} storages were saved or passed "
            "to modules; what-if figures need the whole table"
        )
