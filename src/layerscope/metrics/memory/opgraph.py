"""The forward's op graph, for what ``torch.compile`` would save (``remat``): asked for
by ``record_graph()`` (a plan with ``compile=True`` analyses its model inside), a
storage table then also has ``"compiled"``: ``[[path index, bytes], ...]``, one per
storage the partitioner's rule saves for the backward (parameters and buffers left
out), with the module it counts in: the first module that saved it, as in ``rows``,
for a storage eager autograd saved too, else the module whose op made it (an input:
whose op first read it).

Nodes are the session's storages (``StorageTable``'s records: a storage freed and
another made at the same address are two nodes) and those it read without knowing them
(the inputs: held until the table is made)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor

from layerscope.collect.signature import iter_tensors
from layerscope.metrics.memory.remat import OpCall, compiled_saves, is_recomputable
from layerscope.metrics.memory.storages import StorageTable, storage_of

_RECORD_GRAPH: ContextVar[bool] = ContextVar("layerscope_record_graph", default=False)


@contextmanager
def record_graph() -> Iterator[None]:
    """Storage tables made inside also have ``"compiled"`` (module doc)."""
    token = _RECORD_GRAPH.set(True)
    try:
        yield
    finally:
        _RECORD_GRAPH.reset(token)


def graph_asked() -> bool:
    return _RECORD_GRAPH.get()


class OpGraph:
    """The forward ops of one session over the storages of its ``StorageTable``."""

    def __init__(self, table: StorageTable) -> None:
        self._table = table
        self._index: dict[int, int] = {}  # id(StorageRef), or id(storage) -> node
        self._held: list[object] = []  # so that their ids stay theirs
        self.nbytes: list[int] = []
        self.free: set[int] = set()
        self.ops: list[OpCall] = []
        self.maker: dict[int, int] = {}  # node -> path index of the op that made it
        self.saver: dict[int, int] = {}  # node -> path index of its first saver
        self.reader: dict[int, int] = {}  # node -> path index of the first op reading it
        self._calls: dict[Any, list[int | None]] = {}  # a call's key -> the nodes it made

    def _node(self, t: Tensor, alias: int | None = None) -> int | None:
        """``t``'s node, made when new (``alias``: that node, for a repeated call's)."""
        s = storage_of(t)
        if s is None:
            return None
        ref = self._table.get(s)
        held: object = s if ref is None else ref  # one made outside the session: held
        i = self._index.get(id(held))
        if i is None:
            self._held.append(held)
            if alias is not None:
                i = self._index[id(held)] = alias
                return i
            i = self._index[id(held)] = len(self.nbytes)
            self.nbytes.append(s.nbytes())
            if ref is not None and ref.param:
                self.free.add(i)
        return i

    def op(self, func: Any, path: int, args: Any, kwargs: Any, out: Any) -> None:
        """A forward call of ``func`` in the module of index ``path``. A call repeated
        with the same arguments (autocast's cast of one input for each linear that reads
        it) makes no new nodes: its outputs are the first call's, as the common
        subexpression elimination AOTAutograd runs before partitioning makes them (not
        for random, in-place or factory ops, whose outputs the graph cannot tell apart
        from later writes)."""
        kwargs = kwargs or {}
        tags = getattr(func, "tags", ())
        random = torch.Tag.nondeterministic_seeded in tags  # never recomputed, nor merged
        outs = [out] if isinstance(out, Tensor) else iter_tensors(out)
        key = None
        found = {id(t): self._node(t) for t in (*iter_tensors(args), *iter_tensors(kwargs))}
        if found and not random and torch.Tag.inplace not in tags:  # factories: never
            key = (str(func), self._key(args, found), self._key(kwargs, found))
            earlier = self._calls.get(key)
            if earlier is not None:
                for t, i in zip(outs, earlier, strict=False):
                    if i is not None:
                        self._node(t, alias=i)
                return
        reads = tuple(dict.fromkeys(i for i in found.values() if i is not None))
        made = [self._node(t) for t in outs]
        if key is not None:
            self._calls[key] = made
        makes = tuple(dict.fromkeys(i for i in made if i is not None and i not in reads))
        for i in makes:
            self.maker.setdefault(i, path)
        for i in reads:
            self.reader.setdefault(i, path)
        recomputable = not random and is_recomputable(str(func), torch.Tag.pointwise in tags)
        self.ops.append(OpCall(reads, makes, recomputable))

    def _key(self, value: Any, found: dict[int, int | None]) -> Any:
        """A call's arguments as a key: tensors by their node (``found``, by id), the rest
        by value."""
        if isinstance(value, Tensor):
            return ("tensor", found[id(value)], tuple(value.shape), str(value.dtype))
        if isinstance(value, tuple | list):
            return tuple(self._key(v, found) for v in value)
        if isinstance(value, dict):
            return tuple((k, self._key(v, found)) for k, v in value.items())
        return repr(value)

    def saved(self, t: Tensor, path: int) -> None:
        """A tensor eager autograd saved, by the module of index ``path``."""
        i = self._node(t)
        if i is not None:
            self.saver.setdefault(i, path)

    def compiled(self) -> list[list[int]]:
        """``[[path index, bytes], ...]``: what the partitioner's rule saves (module doc)."""
        chosen = compiled_saves(self.nbytes, self.ops, self.saver, self.free)
        out = []
        for i in sorted(chosen - self.free):
            path = self.saver.get(i, self.maker.get(i, self.reader.get(i)))
            if path is not None:
                out.append([path, self.nbytes[i]])
        return out
