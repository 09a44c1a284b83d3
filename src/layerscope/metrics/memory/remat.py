"""What ``torch.compile`` saves for the backward: a min-cut over the forward's op graph,
after AOTAutograd's partitioner (``torch._functorch.partitioners``,
``min_cut_rematerialization_partition``, torch's defaults).

Eager autograd keeps every tensor an op saves. The partitioner instead chooses the
cheapest set of tensors from which everything the backward reads can be made again by
cheap ops (pointwise ops, views, reductions, casts), and recomputes the rest in the
backward. The rule here, on the storages of one analysed forward:

- a node per storage an op made, or read without any recorded op making it (the
  model's inputs, parameters, buffers: "primal"); saving a node costs the partitioner's
  weight: its bytes times 1.1 per op between it and the backward (``dist_from_bw``,
  at least 1, at most 100: nearer the backward is cheaper), twice that when every
  forward op that reads it is recomputable (a fused kernel would not otherwise write
  it); parameters and buffers cost nothing;
- what the backward reads: every storage eager autograd saved;
- a node cannot be made again (it must be saved if anything the backward reads depends
  on it) when it is a primal, the output of an op that is not recomputable (matmuls,
  attention, convolutions, random ops, anything outside ``recomputable``), a
  reduction's output under a quarter of its inputs' bytes (normalisation statistics),
  or a saved storage that a non-recomputable op read or made (its backward reads it in
  a kernel no fusion reaches: "materialized in backward"), or the output of an op that
  reads a tensor far from its other readers (after a fusible chain from an earlier
  reader has reached a non-fusible op: ``_used_far_apart``; a residual add after the
  attention is one);
- repeated calls with the same arguments are one node (``opgraph``: the joint graph's
  common subexpression elimination);
- the saved set is a minimum vertex cut between those and what the backward reads
  (``min_cut``: max-flow, each node split in two with its cost between the halves).

Left out, as the module's approximations: the partitioner's ban at the end of long
fusible chains, the decompositions Inductor makes before partitioning (an op is classed
as the analysis sees it), and in-place ops (a storage is one node whatever writes it).
``bench/compile_saved.py`` compares the rule with what ``torch.compile`` really saves."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: ops the partitioner recomputes, as the analysis sees them before decomposition (a
#: pointwise-tagged op is recomputable too: ``is_recomputable``); normalisations and
#: softmax count because Inductor decomposes them into recomputable ops
RECOMPUTABLE = frozenset({
    "sum", "mean", "amax", "amin", "var", "var_mean", "std", "argmax", "any",
    "_to_copy", "to", "clone", "copy", "type_as", "contiguous", "full_like", "zeros_like",
    "ones_like", "empty_like", "full", "zeros", "ones", "empty", "arange", "scalar_tensor",
    "new_zeros", "new_ones", "new_empty", "triu", "tril", "index", "gather", "where",
    "maximum", "minimum", "lift_fresh_copy", "_softmax", "_log_softmax", "softmax",
    "log_softmax", "native_layer_norm", "native_group_norm", "rms_norm", "_fused_rms_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit_no_training",
    "silu", "gelu", "relu", "expand", "view", "_unsafe_view", "reshape", "slice", "select",
    "t", "permute", "transpose", "unsqueeze", "squeeze", "alias", "split", "as_strided",
    "broadcast_tensors", "detach",
})  # fmt: skip


def op_name(func: str) -> str:
    """``aten.mm.default`` -> ``mm``."""
    parts = func.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else func


def is_recomputable(func: str, pointwise: bool) -> bool:
    """Whether the partitioner may recompute an op's outputs in the backward."""
    return pointwise or op_name(func) in RECOMPUTABLE


@dataclass(frozen=True)
class OpCall:
    """One forward op: the storages it read and the new ones it made (indices into the
    graph's ``nbytes``), and whether the partitioner may recompute it."""

    reads: tuple[int, ...]
    makes: tuple[int, ...]
    recomputable: bool


def compiled_saves(
    nbytes: Sequence[int],
    ops: Sequence[OpCall],
    saved: Iterable[int],
    free: Iterable[int] = (),
) -> set[int]:
    """The storages the partitioner saves (module doc): ``nbytes`` per storage, the
    forward's ``ops`` in order, the storages eager autograd ``saved`` and the ``free``
    ones (parameters and buffers: saving them costs nothing)."""
    n = len(nbytes)
    saved = set(saved)
    free = set(free)
    maker, readers = _index(ops)
    # read only by recomputable ops: no forward kernel would write it, and no backward
    # kernel outside a fusion reads it
    fused_only = {s for s in range(n) if all(ops[k].recomputable for k in readers.get(s, ()))}
    fixed = set()  # must be saved if anything saved depends on it
    for s in range(n):
        made = maker.get(s)
        if made is None or not ops[made].recomputable:
            fixed.add(s)
        elif 4 * nbytes[s] < sum(nbytes[r] for r in ops[made].reads):
            fixed.add(s)  # a reduction's small output
        elif s in saved and s not in fused_only:
            fixed.add(s)  # materialized in backward
    for k in _used_far_apart(ops, maker, readers):
        fixed.update(ops[k].makes)
    dist = _distance_from_backward(n, ops, readers, saved)
    cost = []
    for s in range(n):
        weight = int(nbytes[s] * 1.1 ** max(min(dist[s], 100), 1))
        if s in free:
            cost.append(0)
        elif s in maker and s in fused_only:
            cost.append(2 * weight)  # not written by the forward otherwise
        else:
            cost.append(weight)
    edges = [(r, m) for op in ops for r in op.reads for m in op.makes if r != m]
    return min_cut(cost, edges, fixed, saved)


def _index(ops: Sequence[OpCall]) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Per node, the op (an index into ``ops``) that made it and the ops that read it,
    in order."""
    maker: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for k, op in enumerate(ops):
        for s in op.makes:
            maker.setdefault(s, k)
        for s in op.reads:
            readers.setdefault(s, []).append(k)
    return maker, readers


def _used_far_apart(
    ops: Sequence[OpCall], maker: dict[int, int], readers: dict[int, list[int]]
) -> set[int]:
    """The ops (indices into ``ops``) the partitioner will not recompute because they
    read a tensor that an earlier reader's fusible chain has already carried into a
    non-fusible op (``ban_recompute_used_far_apart``: recomputed, they could not fuse
    with its other uses; a residual add after the attention is one). Per tensor made by
    a recomputable op and read by several ops: walk forward from its readers in op order
    along fusible steps (both ops recomputable) to the first step that is not, at most
    to the last reader; the recomputable readers after that step are banned. ``maker``
    and ``readers``: each node's op and reading ops, as indices."""
    banned: set[int] = set()
    for s, users in readers.items():
        made = maker.get(s)
        if len(users) < 2 or made is None or not ops[made].recomputable:
            continue
        last = users[-1]
        heap = [(k, True) for k in users]
        heapq.heapify(heap)
        first, seen = last, set()
        while heap:
            k, fusible = heapq.heappop(heap)
            if not fusible:
                first = k
                break
            if k in seen:
                continue
            seen.add(k)
            step = ops[k].recomputable
            for m in ops[k].makes:
                for j in readers.get(m, ()):
                    if j <= last:
                        heapq.heappush(heap, (j, step and ops[j].recomputable))
        banned.update(k for k in users if k > first and ops[k].recomputable)
    return banned


def _distance_from_backward(
    n: int, ops: Sequence[OpCall], readers: dict[int, list[int]], saved: set[int]
) -> list[int]:
    """Per node, the ops between it and the backward: 1 for what the backward reads,
    else one more than the nearest of the nodes made from it (the partitioner's
    ``dist_from_bw``; 10 ** 9 when nothing the backward reads comes from it)."""
    far = 10**9
    dist = [far] * n
    for s in reversed(range(n)):
        if s in saved:
            dist[s] = 1
            continue
        for k in readers.get(s, ()):
            for m in ops[k].makes:
                if dist[m] < far and dist[m] + 1 < dist[s]:
                    dist[s] = dist[m] + 1
    return dist


def min_cut(
    cost: Sequence[int], edges: Sequence[tuple[int, int]], fixed: set[int], needed: set[int]
) -> set[int]:
    """The nodes of a minimum-cost vertex cut separating ``fixed`` nodes (which cannot
    be made again) from the ``needed`` ones, along ``edges`` (data flow ``a -> b``):
    the nodes to save so that every needed node is saved or made from saved nodes
    (module doc). Dinic's max-flow on the split graph."""
    n = len(cost)
    inf = sum(cost) + 1
    source, sink = 2 * n, 2 * n + 1
    flow = _Flow(2 * n + 2)
    for v in range(n):
        flow.add(2 * v, 2 * v + 1, cost[v])  # in -> out: saving v
        if v in fixed:
            flow.add(source, 2 * v, inf)
        if v in needed:
            flow.add(2 * v + 1, sink, inf)
    for a, b in edges:
        flow.add(2 * a + 1, 2 * b, inf)
    flow.max_flow(source, sink)
    reach = flow.reachable(source)
    return {v for v in range(n) if reach[2 * v] and not reach[2 * v + 1]}


class _Flow:
    """A flow network as adjacency lists of edge indices (Dinic)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.head: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[int] = []

    def add(self, a: int, b: int, cap: int) -> None:
        self.head[a].append(len(self.to))
        self.to.append(b)
        self.cap.append(cap)
        self.head[b].append(len(self.to))
        self.to.append(a)
        self.cap.append(0)

    def _levels(self, s: int, t: int) -> list[int] | None:
        level = [-1] * self.n
        level[s] = 0
        queue = deque([s])
        while queue:
            v = queue.popleft()
            for e in self.head[v]:
                if self.cap[e] > 0 and level[self.to[e]] < 0:
                    level[self.to[e]] = level[v] + 1
                    queue.append(self.to[e])
        return level if level[t] >= 0 else None

    def max_flow(self, s: int, t: int) -> int:
        total = 0
        while (level := self._levels(s, t)) is not None:
            it = [0] * self.n
            while pushed := self._push(s, t, level, it):
                total += pushed
        return total

    def _push(self, s: int, t: int, level: list[int], it: list[int]) -> int:
        """One augmenting path along ``level`` (iterative), its flow (0: none left)."""
        path: list[int] = []  # edge indices from s
        v = s
        while v != t:
            edges = self.head[v]
            while it[v] < len(edges):
                e = edges[it[v]]
                w = self.to[e]
                if self.cap[e] > 0 and level[w] == level[v] + 1:
                    break
                it[v] += 1
            else:
                if v == s:
                    return 0
                level[v] = -1  # dead end
                e = path.pop()
                v = self.to[e ^ 1]
                it[v] += 1
                continue
            path.append(e)
            v = self.to[e]
        pushed = min(self.cap[e] for e in path)
        for e in path:
            self.cap[e] -= pushed
            self.cap[e ^ 1] += pushed
        return pushed

    def reachable(self, s: int) -> list[bool]:
        seen = [False] * self.n
        seen[s] = True
        stack = [s]
        while stack:
            v = stack.pop()
            for e in self.head[v]:
                if self.cap[e] > 0 and not seen[self.to[e]]:
                    seen[self.to[e]] = True
                    stack.append(self.to[e])
        return seen
