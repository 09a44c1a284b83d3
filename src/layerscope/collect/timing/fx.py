"""``timer="fx"``: time every node of a ``torch.fx`` trace of the model (``profile_fx`` runs it).

``torch.fx.symbolic_trace`` turns the model into a graph of calls: ``call_module`` for
leaf modules (``nn.Conv2d``, ``nn.Linear``, ...), ``call_function`` / ``call_method`` for
functional code (``x + y``, ``torch.flatten``, ``x.view``), ``get_attr`` for parameters used
directly. A ``torch.fx.Interpreter`` subclass runs the graph node by node and stamps each
call, after its arguments were fetched (the interpreter's own bookkeeping stays outside).

Every node maps back to the module path it belongs to: a ``call_module`` node to its
target, any other node to the innermost module of ``node.meta["nn_module_stack"]`` (the
tracer's scope), or the root. A module's inclusive time is the sum of its nodes', over
its calls (the tracer numbers repeat calls ``path@1``); its self time is what its own
code did: the residual ``add`` of a block, the ``flatten`` of the root. With ``ops=True``
the functional nodes also become op rows: ``layer1.0/add`` of type ``fx::add``.

Models that cannot be traced (data-dependent control flow, ``len()`` of a tensor,
unsupported Python) raise ``UntraceableModelError`` naming the reason; the default timer
(``timer="hooks"``) needs no trace.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch import nn

from layerscope.collect.timing.backward import BackwardTimer, replay_backward_log
from layerscope.collect.timing.clock import Stamper
from layerscope.collect.timing.context import PassContext
from layerscope.collect.timing.forward import ForwardRepeat
from layerscope.collect.timing.index import ModuleIndex
from layerscope.collect.timing.result import (
    OpSamples,
    TimingResult,
    add_repeat,
)
from layerscope.collect.timing.spans import RepeatSpans, logged_backward
from layerscope.errors import InvalidInputError, LayerscopeError
from layerscope.metricspec import BACKWARD_TIME, FORWARD_TIME
from layerscope.torchapi import get_sequence_nr

__all__ = ["UntraceableModelError", "trace"]

_TIMED_OPS = ("call_module", "call_function", "call_method", "get_attr")


class UntraceableModelError(InvalidInputError):
    """``torch.fx`` cannot trace this model; the message names the reason and the way out."""


def _advice() -> str:
    return (
        "Per-module times need no trace: use the default timer "
        "(timer='hooks', or omit --timer), which times every nn.Module call with hooks."
    )


def trace(model: nn.Module) -> torch.fx.GraphModule:
    """``symbolic_trace(model)``, with a clear error when the model cannot be traced."""
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = ""
        if isinstance(e, torch.fx.proxy.TraceError) or "control flow" in str(e):
            hint = (
                " (its forward branches or loops on tensor values, which a symbolic trace "
                "cannot follow)"
            )
        raise UntraceableModelError(
            f"torch.fx cannot trace {type(model).__name__}{hint}: {type(e).__name__}: {reason}. "
            + _advice()
        ) from e


def _target_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target.rsplit(".", 1)[-1]
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) else type(target).__name__


class FxMap:
    """Where each timed graph node belongs: module chain, innermost module, op row."""

    def __init__(self, gm: torch.fx.GraphModule, index: ModuleIndex) -> None:
        self.nodes: list[torch.fx.Node] = [n for n in gm.graph.nodes if n.op in _TIMED_OPS]
        self.position = {n: i for i, n in enumerate(self.nodes)}
        self.chains: list[list[int]] = []
        #: per graph node, the module calls it runs in (below the root): (node, call key)
        self.scopes: list[list[tuple[int, str]]] = []
        self.owner: list[int] = []
        self.op_row: list[bool] = []
        call_keys: dict[int, set[str]] = {index.root: {""}}
        for n in self.nodes:
            stack = n.meta.get("nn_module_stack") or {}
            chain: list[int] = [index.root]
            scopes: list[tuple[int, str]] = []
            for key, value in stack.items():
                path = value[0] if isinstance(value, tuple) else str(value)
                i = index.by_path.get(path)
                if i is not None and i != chain[-1]:
                    chain.append(i)
                    scopes.append((i, str(key)))
                    call_keys.setdefault(i, set()).add(str(key))
            if n.op == "call_module":
                i = index.by_path.get(str(n.target))
                if i is not None and i != chain[-1]:
                    chain.append(i)
                    scopes.append((i, f"{n.target}#{n.name}"))
                    call_keys.setdefault(i, set()).add(f"{n.target}#{n.name}")
            self.chains.append(chain)
            self.scopes.append(scopes)
            self.owner.append(chain[-1])
            self.op_row.append(n.op in ("call_function", "call_method"))
        #: calls per forward of each module: distinct scope keys (``path``, ``path@1``, ...)
        self.calls = {i: len(keys) for i, keys in call_keys.items()}


class TimingInterpreter(torch.fx.Interpreter):
    """Runs a GraphModule node by node, appending ``(position, start, end[, seq])``."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        position: dict[torch.fx.Node, int],
        stamp: Callable[[], Any],
        record_seq: bool,
    ) -> None:
        super().__init__(gm)
        self.position = position
        self.stamp = stamp
        self.record_seq = record_seq
        self.log: list[tuple[int, Any, Any, int]] = []

    def run_node(self, n: torch.fx.Node) -> Any:
        i = self.position.get(n)
        if i is None:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        fn = getattr(self, n.op)
        seq = get_sequence_nr() if self.record_seq else 0
        stamp = self.stamp
        t0 = stamp()
        out = fn(n.target, args, kwargs)
        t1 = stamp()
        self.log.append((i, t0, t1, seq))
        return out


def _ordered_inputs(
    gm: torch.fx.GraphModule, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """The call's arguments in placeholder order (an Interpreter takes positional only)."""
    if not kwargs:
        return args
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise InvalidInputError(
            f"the inputs do not match {type(model).__name__}.forward: {e}"
        ) from e
    bound.apply_defaults()
    names = [str(n.target) for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(bound.arguments[name.lstrip("*")] for name in names)


def _noop(x: Any) -> Any:
    return x


def calibrate_interpreter(stamp: Callable[[], Any], k: int = 32, trials: int = 15) -> float:
    """Cost (ns) a stamp pair puts inside each node's window: the smallest median window
    of ``k`` no-op ``call_function`` nodes."""
    graph = torch.fx.Graph()
    value: Any = graph.placeholder("x")
    for _ in range(k):
        value = graph.call_function(_noop, (value,))
    graph.output(value)
    gm = torch.fx.GraphModule(nn.Module(), graph)
    position = {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "call_function")}
    interp = TimingInterpreter(gm, position, stamp, record_seq=False)
    best = float("inf")
    for _ in range(trials):
        interp.log.clear()
        interp.run(0)
        interp.env.clear()
        windows = sorted(float(t1) - float(t0) for _, t0, t1, _ in interp.log)
        best = min(best, windows[len(windows) // 2])
    return max(best, 0.0) if best != float("inf") else 0.0


def fx_runs(ctx: PassContext, result: TimingResult) -> None:
    """The instrumented runs of ``timer="fx"``: trace, calibrate, warm run, repeats."""
    options, index, stamper = ctx.options, ctx.index, ctx.stamper
    gm = trace(ctx.model)
    fmap = FxMap(gm, index)
    inputs = _ordered_inputs(gm, ctx.model, ctx.args, ctx.kwargs)
    inner = 0.0
    if options.correct_overhead and not stamper.events:
        inner = calibrate_interpreter(stamper.clock)
    ctx.overhead["fx_node_inner"] = inner
    interp = TimingInterpreter(gm, fmap.position, stamper.record, options.backward)
    back = BackwardTimer(index, stamper)
    warm = 1 if options.warmup > 0 else 0
    rows: dict[int, OpSamples] = {}
    interpreted: list[float] = []
    for r in range(warm + options.repeats):
        if r >= warm:
            ctx.bare_run(record=True)  # interleaved: load drift hits both alike
        ctx.clear_grads()
        stamper.begin()
        log, t_start, t_end, (b_start, b_end, b_log) = _run_once(ctx, interp, back, fmap, inputs, r)
        stamper.end()
        if r >= warm:
            windows = [max(stamper.ns(t1) - stamper.ns(t0) - inner, 0.0) for _, t0, t1, _ in log]
            interpreted.append(stamper.ns(t_end) - stamper.ns(t_start))
            fwd = _module_totals(index, fmap, log, windows)
            bwd_self = None
            if options.backward:
                bwd_self = replay_backward_log(
                    len(index), stamper, b_start, b_end, b_log, ctx.overhead
                )
            add_repeat(result, index, fwd, bwd_self, FORWARD_TIME, BACKWARD_TIME)
            if options.ops:
                _add_rows(result, rows, index, fmap, log, windows)
            t0 = stamper.ns(t_start)
            spans = _spans(index, fmap, log, stamper, t0, stamper.ns(t_end) - t0, options.ops)
            if options.backward:
                spans.backward, spans.end = logged_backward(
                    stamper, b_start, b_end, b_log, t0, index.root
                )
            result.spans.append(spans)
        used = [s for _, t0, t1, _ in log for s in (t0, t1)] + [s for _, s in b_log]
        used += [t_start, t_end]
        if b_start is not None:
            used += [b_start, b_end]
        stamper.recycle(used)
        ctx.progress.advance()
    result.whole["interpreted_forward"] = interpreted


def _run_once(
    ctx: PassContext,
    interp: TimingInterpreter,
    back: BackwardTimer,
    fmap: FxMap,
    inputs: tuple[Any, ...],
    r: int,
) -> tuple[list[tuple[int, Any, Any, int]], Any, Any, tuple[Any, Any, list[tuple[int, Any]]]]:
    """One instrumented run: the interpreter's log, the forward's start and end stamps,
    and the backward's (start, end, log) when timed."""
    options, stamper = ctx.options, ctx.stamper
    interp.log.clear()
    backward: tuple[Any, Any, list[tuple[int, Any]]] = (None, None, [])
    try:
        t_start = stamper.record()
        with options.grad_context():
            out = interp.run(*inputs)
        t_end = stamper.record()
        # The interpreter's env still holds the output (and so the autograd graph):
        # drop it now, or the next bare run cannot reuse that memory and page-faults.
        interp.env.clear()
        log = list(interp.log)
        if options.backward:
            seqs, owners = _steps(fmap, log)
            backward = back.run(ctx.loss(out), seqs, owners)
    except LayerscopeError:
        raise
    except Exception as e:
        if r == 0:
            raise UntraceableModelError(
                f"the fx trace of {type(ctx.model).__name__} traced but fails to run "
                f"({type(e).__name__}: {e}); the trace may have frozen a shape or a "
                "branch. " + _advice()
            ) from e
        raise ctx.model_error(e) from e
    return log, t_start, t_end, backward


def _steps(fmap: FxMap, log: Sequence[tuple[int, Any, Any, int]]) -> tuple[list[int], list[int]]:
    """Backward ownership: autograd nodes created from a graph node's sequence number on
    belong to that node's innermost module."""
    seqs: list[int] = []
    owners: list[int] = []
    for i, _, _, seq in log:
        if seqs and seqs[-1] == seq:
            owners[-1] = fmap.owner[i]
        else:
            seqs.append(seq)
            owners.append(fmap.owner[i])
    if seqs:  # whatever is created after the graph (the loss) belongs to the root
        seqs.append(get_sequence_nr())
        owners.append(0)
    return seqs, owners


def _spans(
    index: ModuleIndex,
    fmap: FxMap,
    log: Sequence[tuple[int, Any, Any, int]],
    stamper: Stamper,
    origin: float,
    end: float,
    ops: bool,
) -> RepeatSpans:
    """One run's spans (ns from ``origin``, the start of ``interp.run``): the root from
    start to end of the run, every other module call from its first graph node's start to
    its last node's end, and with ``ops`` every functional node (its op row's span)."""
    out = RepeatSpans(end=end)
    calls: dict[tuple[int, str], list[float]] = {}
    for i, t0, t1, _ in log:
        start, stop = stamper.ns(t0) - origin, stamper.ns(t1) - origin
        for scope in fmap.scopes[i]:
            span = calls.get(scope)
            if span is None:
                calls[scope] = [start, stop]
            else:
                span[0] = min(span[0], start)
                span[1] = max(span[1], stop)
        if ops and fmap.op_row[i]:
            path = f"{index.paths[fmap.owner[i]]}/{fmap.nodes[i].name}"
            out.ops.append((path, start, stop))
    out.forward.append((index.root, 0.0, end))
    out.forward.extend((node, s, e) for (node, _), (s, e) in calls.items())
    return out


def _module_totals(
    index: ModuleIndex,
    fmap: FxMap,
    log: Sequence[tuple[int, Any, Any, int]],
    windows: Sequence[float],
) -> ForwardRepeat:
    n = len(index)
    fwd = ForwardRepeat([0] * n, [0.0] * n, [0.0] * n)
    for (i, _, _, _), w in zip(log, windows, strict=True):
        for m in fmap.chains[i]:
            fwd.inclusive[m] += w
        fwd.exclusive[fmap.owner[i]] += w
    for m, calls in fmap.calls.items():
        fwd.calls[m] = calls
    return fwd


def _add_rows(
    result: TimingResult,
    rows: dict[int, OpSamples],
    index: ModuleIndex,
    fmap: FxMap,
    log: Sequence[tuple[int, Any, Any, int]],
    windows: Sequence[float],
) -> None:
    for (i, _, _, _), w in zip(log, windows, strict=True):
        if not fmap.op_row[i]:
            continue
        row = rows.get(i)
        if row is None:
            node = fmap.nodes[i]
            parent = index.paths[fmap.owner[i]]
            row = rows[i] = OpSamples(
                path=f"{parent}/{node.name}",
                calls=1,
                parent=parent,
                name=node.name,
                type=f"fx::{_target_name(node)}",
            )
            result.ops.append(row)
        row.add(FORWARD_TIME, w, w)
