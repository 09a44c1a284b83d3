"""The timeline of one representative repeat: when each module call started and ended
(forward), each stretch of backward work (backward) and each op (``ops=True``).

Every timer turns each timed repeat into a ``RepeatSpans`` (ns from the start of its
instrumented run, taken from the stamps it logs anyway: nothing is added inside the timed
windows); at the end of the pass ``build_trace`` keeps the repeat whose whole run took the
median time and writes it as compact JSON, ``Profile.timing["trace"]``
(format in ``docs/timing.md``). Spans are raw: the calibrated instrumentation cost that is
taken off the per-module statistics is not taken off them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.index import ModuleIndex

#: (tree node, start ns, end ns), relative to the start of the run.
NodeSpan: TypeAlias = tuple[int, float, float]
#: (op row path, start ns, end ns), relative to the start of the run.
OpSpan: TypeAlias = tuple[str, float, float]


@dataclass
class RepeatSpans:
    """One timed repeat's timeline, in ns from the start of its instrumented run.

    ``forward``: one span per module call, in entry order (a caller before the calls it
    makes). ``backward``: stretches of backward work each attributed to one module (its
    *self* time; ``nest_backward`` makes the inclusive spans), in time order. ``ops``: op
    rows' spans (``ops=True``). ``end``: when the run ended, its whole-model time.
    """

    forward: list[NodeSpan] = field(default_factory=list)
    backward: list[NodeSpan] = field(default_factory=list)
    ops: list[OpSpan] = field(default_factory=list)
    end: float = 0.0


def forward_spans(
    index: ModuleIndex, codes: Sequence[int], stamps: Sequence[float], origin: float
) -> list[NodeSpan]:
    """One span per call from an enter/exit log (the hooks timer's), in entry order."""
    spans: list[NodeSpan] = []
    open_at: list[int] = []
    running: list[int] = []
    for code, t in zip(codes, stamps, strict=True):
        if code >= 0:
            node = index.resolve(code, running)
            running.append(node)
            open_at.append(len(spans))
            spans.append((node, t - origin, t - origin))
        elif open_at:
            k = open_at.pop()
            running.pop()
            node, start, _ = spans[k]
            spans[k] = (node, start, t - origin)
    return spans


def backward_intervals(
    start: float,
    end: float,
    owners: Sequence[int],
    stamps: Sequence[float],
    origin: float,
    root: int = 0,
) -> list[NodeSpan]:
    """The backward's self stretches from per-node start stamps (as ``replay_backward``
    charges them): before the first node to the root, then each node until the next."""
    out: list[NodeSpan] = []
    prev_t, prev_owner = start, root
    for owner, t in zip(owners, stamps, strict=True):
        out.append((prev_owner, prev_t - origin, t - origin))
        prev_t, prev_owner = t, owner
    out.append((prev_owner, prev_t - origin, end - origin))
    return out


def logged_backward(
    stamper: Stamper,
    start: Any,
    end: Any,
    log: Sequence[tuple[int, Any]],
    origin: float,
    root: int = 0,
) -> tuple[list[NodeSpan], float]:
    """``backward_intervals`` of one repeat's backward log of ``(owner, stamp)`` pairs,
    stamps read through ``stamper``, and the repeat's end relative to ``origin``."""
    end_ns = stamper.ns(end)
    stretches = backward_intervals(
        stamper.ns(start),
        end_ns,
        [owner for owner, _ in log],
        [stamper.ns(stamp) for _, stamp in log],
        origin,
        root,
    )
    return stretches, end_ns - origin


def nest_backward(
    index: ModuleIndex, called: Sequence[bool], stretches: Iterable[NodeSpan]
) -> list[NodeSpan]:
    """Inclusive backward spans from self stretches, like a flame graph's stack merge.

    A module's span covers a run of consecutive stretches owned by it or by modules below
    it (ancestors that never ran in the forward, such as a ``ModuleList``, are skipped);
    a stretch owned elsewhere ends it. So a module's backward may be several spans, each
    child span lies inside its parent's, and the spans of one module never overlap.
    """
    chains: dict[int, list[int]] = {}

    def chain_of(owner: int) -> list[int]:
        chain = chains.get(owner)
        if chain is None:
            chain = [owner]
            p = index.parent[owner]
            while p >= 0:
                if called[p] or p == index.root:
                    chain.append(p)
                p = index.parent[p]
            if chain[-1] != index.root:
                chain.append(index.root)
            chain.reverse()
            chains[owner] = chain
        return chain

    out: list[list[Any]] = []
    stack: list[int] = []  # positions in out of the open spans, root first
    prev_end = 0.0
    for owner, start, end in stretches:
        chain = chain_of(owner)
        k = 0
        while k < len(stack) and k < len(chain) and out[stack[k]][0] == chain[k]:
            k += 1
        for pos in stack[k:]:
            out[pos][2] = prev_end
        del stack[k:]
        for node in chain[k:]:
            stack.append(len(out))
            out.append([node, start, end])
        prev_end = end
    for pos in stack:
        out[pos][2] = prev_end
    return [(int(n), float(s), float(e)) for n, s, e in out]


def _seconds(ns: float) -> float:
    """ns to seconds, rounded to the ns (short JSON; rounding keeps the order of values)."""
    return round(ns * 1e-9, 9)


def median_repeat(repeats: Sequence[RepeatSpans]) -> int:
    """The repeat whose whole run took the median time (the lower median when even)."""
    order = sorted(range(len(repeats)), key=lambda r: (repeats[r].end, r))
    return order[(len(order) - 1) // 2]


def build_trace(
    index: ModuleIndex, repeats: Sequence[RepeatSpans], clock: str
) -> dict[str, Any] | None:
    """``Profile.timing["trace"]``: the median repeat's spans as plain JSON.

    ``paths`` is a table of the module (and op row) paths the spans use; every span is a
    row ``[path index, n, start, end]``: seconds from the start of the run, ``n`` the
    call number (forward, ops) or the span number (backward) of that path in this repeat.
    """
    if not repeats:
        return None
    k = median_repeat(repeats)
    rep = repeats[k]
    paths: list[str] = []
    where: dict[str, int] = {}

    def rows(spans: Iterable[tuple[str, float, float]]) -> list[list[Any]]:
        counts: dict[int, int] = {}
        out: list[list[Any]] = []
        for path, start, end in spans:
            i = where.get(path)
            if i is None:
                i = where[path] = len(paths)
                paths.append(path)
            n = counts.get(i, 0)
            counts[i] = n + 1
            out.append([i, n, _seconds(start), _seconds(max(end, start))])
        return out

    called = [False] * len(index)
    for node, _, _ in rep.forward:
        called[node] = True
    # Every timer logs calls in entry order: start order, and a caller before its callees
    # even where a coarse clock gives both the same start (kept as logged, not re-sorted).
    forward = rows((index.paths[n], s, e) for n, s, e in rep.forward)
    backward = rows(
        (index.paths[n], s, e) for n, s, e in nest_backward(index, called, rep.backward)
    )
    ops = rows(rep.ops)
    return {
        "repeat": k,
        "repeats": len(repeats),
        "duration": _seconds(rep.end),
        "clock": clock,
        "paths": paths,
        "forward": forward,
        "backward": backward,
        "ops": ops,
    }
