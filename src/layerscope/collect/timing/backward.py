"""Backward timing: which module owns each autograd node (by sequence number), a pre-hook
per node that stamps its start, and the replay of those stamps into self times.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import Tensor
from torch.utils.hooks import RemovableHandle

from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.forward import Entry
from layerscope.collect.timing.index import ModuleIndex
from layerscope.torchapi import NO_SEQUENCE


def grad_steps(index: ModuleIndex, entries: Sequence[Entry]) -> tuple[list[int], list[int]]:
    """The ownership step function: from ``seqs[i]`` on, new autograd nodes belong to
    ``owners[i]`` (a node index), built from a forward log with sequence numbers."""
    seqs: list[int] = []
    owners: list[int] = []
    running: list[int] = []
    for code, _, seq in entries:
        if code >= 0:
            node = index.resolve(code, running)
            running.append(node)
            owner = node
        else:
            if running:
                running.pop()
            owner = running[-1] if running else index.root
        if seqs and seqs[-1] == seq:
            owners[-1] = owner
        else:
            seqs.append(seq)
            owners.append(owner)
    return seqs, owners


def owner_of(seqs: Sequence[int], owners: Sequence[int], seq: int, root: int = 0) -> int:
    i = bisect_right(seqs, seq) - 1
    return root if i < 0 or seq == NO_SEQUENCE else owners[i]


class BackwardTimer:
    """Times one ``loss.backward()`` per autograd node and attributes it to modules.

    Each node of the graph gets a pre-hook that stamps (owner, time) as the node starts;
    the interval until the next stamp is the owner's. AccumulateGrad nodes (no sequence
    number) belong to the module of the node that feeds them. Hooks live on this one
    graph only and are removed right after the backward.
    """

    def __init__(self, index: ModuleIndex, stamper: Stamper) -> None:
        self.index = index
        self.stamper = stamper
        self.log: list[tuple[int, Any]] = []

    def run(
        self, loss: Tensor, seqs: Sequence[int], owners: Sequence[int]
    ) -> tuple[Any, Any, list[tuple[int, Any]]]:
        root = self.index.root
        handles: list[RemovableHandle] = []
        append = self.log.append
        stamp = self.stamper.record

        def make(owner: int) -> Callable[[Any], None]:
            def hook(grad_outputs: Any) -> None:
                append((owner, stamp()))

            return hook

        try:
            fn = loss.grad_fn
            if fn is not None:
                seen = {fn}
                todo: list[tuple[Any, int]] = [(fn, root)]
                while todo:
                    gnode, consumer = todo.pop()
                    seq = gnode._sequence_nr()
                    owner = consumer if seq == NO_SEQUENCE else owner_of(seqs, owners, seq, root)
                    handles.append(gnode.register_prehook(make(owner)))
                    for nxt, _ in gnode.next_functions:
                        if nxt is not None and nxt not in seen:
                            seen.add(nxt)
                            todo.append((nxt, owner))
            self.log.clear()
            start = stamp()
            loss.backward()  # type: ignore[no-untyped-call]
            end = stamp()
        finally:
            for h in handles:
                h.remove()
        entries = list(self.log)
        self.log.clear()
        return start, end, entries


def replay_backward(
    n: int,
    start: float,
    end: float,
    owners: Sequence[int],
    stamps: Sequence[float],
    hook: float = 0.0,
    clock_read: float = 0.0,
    root: int = 0,
) -> list[float]:
    """Self backward totals per node: each interval between stamps goes to the owner of
    the node that started it (the first, before any node started, to the root). One
    hook's cost is taken off every interval after a hook, one clock read off the first."""
    out = [0.0] * n
    prev_t, prev_owner, cost = start, root, clock_read
    for owner, t in zip(owners, stamps, strict=True):
        out[prev_owner] += max(t - prev_t - cost, 0.0)
        prev_t, prev_owner, cost = t, owner, hook
    out[prev_owner] += max(end - prev_t - cost, 0.0)
    return out


def replay_backward_log(
    n: int,
    stamper: Stamper,
    start: Any,
    end: Any,
    log: Sequence[tuple[int, Any]],
    overhead: Mapping[str, float],
) -> list[float]:
    """``replay_backward`` over a ``BackwardTimer`` log of (owner, stamp) pairs, with the
    pass's calibrated hook and clock-read costs taken off."""
    return replay_backward(
        n,
        stamper.ns(start),
        stamper.ns(end),
        [owner for owner, _ in log],
        [stamper.ns(stamp) for _, stamp in log],
        overhead.get("backward_hook", 0.0),
        overhead.get("clock_read", 0.0),
    )
