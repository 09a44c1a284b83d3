"""From rows to findings: raise mode's immediate check of one call or gradient, and the
end-of-session walk that names the first non-finite call and the origin, per node too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerscope.metrics.numerics.errors import NonFiniteError
from layerscope.metrics.numerics.records import _Call, _event, _GradEvent, _ordered_roles
from layerscope.metrics.numerics.stats import _Stats
from layerscope.metrics.numerics.values import _INF, _NAN, Store, _read_counts
from layerscope.profile import Node, _event_label, describe_nonfinite

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker


# ---- raise mode: one finiteness read per call --------------------------------------
def _raise_forward(
    call: _Call,
    row_loc: Sequence[tuple[Store, int, int]],
    tracker: ScopeTracker | None,
    enclosing: Sequence[_Call],
) -> None:
    """Raise if ``call``'s outputs hold NaN/Inf, naming the origin: ``call`` when its
    inputs were finite, else the innermost of the calls still running around it
    (``enclosing``, outermost first) whose inputs were: its own code made them."""
    counts = _read_counts(row_loc, call.out_rows + call.in_rows)
    outs, ins = counts[: len(call.out_rows)], counts[len(call.out_rows) :]
    nan, inf = sum(c[0] for c in outs), sum(c[1] for c in outs)
    if nan + inf == 0:
        return
    origin = all(a + b == 0 for a, b in ins)
    maker = None if origin else _maker(enclosing, row_loc)
    event = _event(call, "output", call.shapes, call.dtypes, nan, inf)
    if maker is None:
        text, by = describe_nonfinite(event, origin), call
        found = event if origin else None
    else:  # the maker's call never returns: its entry holds what reached the submodule
        text, by = _made_by(maker, event), maker
        found = _event(maker, "output", call.shapes, call.dtypes, nan, inf)
    err = NonFiniteError(
        "layerscope: " + text,
        path=by.node.path,
        call=by.index,
        where="output",
        shapes=call.shapes,
        nan=nan,
        inf=inf,
        origin=origin or maker is not None,
    )
    err.origin_event = found  # the report's origin, which the raise ends before finding
    if tracker is not None:  # name this module, not its parent, in the error
        tracker.mark_error_site(err, call.node)
    raise err


def _maker(enclosing: Sequence[_Call], row_loc: Sequence[tuple[Store, int, int]]) -> _Call | None:
    """The innermost running call whose inputs were all finite, if any: the values its
    submodule received non-finite were made by its own code (or one it called)."""
    for frame in reversed(enclosing):
        if all(a + b == 0 for a, b in _read_counts(row_loc, frame.in_rows)):
            return frame
    return None


def _made_by(maker: _Call, event: dict[str, Any]) -> str:
    """The words of a raise whose values a running module's own code made: that module is
    the origin, and ``event`` is the submodule call where they were seen."""
    node = maker.node
    return (
        f"module {_event_label(node.path, node.type)} call {maker.index}: its own code made "
        "non-finite values from finite inputs (origin); they reached module "
        f"{_event_label(event['path'], event['type'])} call {event['call']}, whose output "
        f"has {event['nan']} NaN, {event['inf']} Inf, shapes {event['shapes']}"
    )


def _raise_backward(event: _GradEvent, row_loc: Sequence[tuple[Store, int, int]]) -> None:
    ((nan, inf),) = _read_counts(row_loc, [event.row])
    if nan + inf == 0:
        return
    ordered = _ordered_roles(event.roles)
    bad_out = {id(c) for c, where in event.roles if where == "grad_output"}
    origin_role = next(
        (r for r in ordered if r[1] == "grad_input" and id(r[0]) not in bad_out), None
    )
    call, where = origin_role if origin_role is not None else ordered[0]
    info = _event(call, where, [event.shape], [event.dtype], nan, inf)
    raise NonFiniteError(
        "layerscope: " + describe_nonfinite(info, origin_role is not None),
        path=call.node.path,
        call=call.index,
        where=where,
        shapes=[event.shape],
        nan=nan,
        inf=inf,
        origin=origin_role is not None,
    )


# ---- results -----------------------------------------------------------------------
def _scan(
    calls: Sequence[_Call],
    grad_events: Sequence[_GradEvent],
    rows: list[list[float]],
    row_loc: Sequence[tuple[Store, int, int]],
    stats: bool,
    grads: bool,
    underflow: bool,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, int, int]:
    """Walk calls and gradients in order, write every node's report, and return the
    first non-finite event, the origin, and the counts of non-finite calls and gradients.
    """

    def counts(row_ids: Sequence[int]) -> tuple[int, int]:
        return (
            sum(int(rows[r][_NAN]) for r in row_ids),
            sum(int(rows[r][_INF]) for r in row_ids),
        )

    first: dict[str, Any] | None = None
    origin: dict[str, Any] | None = None
    bad_calls = 0
    bad_grads = 0
    per_node: dict[int, _NodeReport] = {}
    bad_grad_out: set[int] = set()
    timeline: list[_Call | _GradEvent] = sorted([*calls, *grad_events], key=lambda e: e.seq)
    for item in timeline:
        if isinstance(item, _Call):
            report = per_node.setdefault(id(item.node), _NodeReport(item.node))
            report.checked_calls += 1
            nan, inf = counts(item.out_rows)
            for r in item.out_rows:
                if stats and rows[r][_NAN] + rows[r][_INF] == 0:
                    report.stats.add(row_loc[r][2], rows[r])
            report.nan += nan
            report.inf += inf
            if nan + inf == 0:
                continue
            bad_calls += 1
            report.nonfinite_calls.append(item.index)
            ev = _event(item, "output", item.shapes, item.dtypes, nan, inf)
            first = first or ev
            if origin is None and counts(item.in_rows) == (0, 0):
                origin = ev
            continue
        nan, inf = int(rows[item.row][_NAN]), int(rows[item.row][_INF])
        if nan + inf == 0:
            continue
        bad_grads += 1
        ordered = _ordered_roles(item.roles)
        for call, where in ordered:
            if where == "grad_output":
                bad_grad_out.add(id(call))
            report = per_node.setdefault(id(call.node), _NodeReport(call.node))
            report.nonfinite_grad_calls.add(call.index)
        call, where = ordered[0]
        first = first or _event(call, where, [item.shape], [item.dtype], nan, inf)
        if origin is None:
            for call, where in ordered:
                if where == "grad_input" and id(call) not in bad_grad_out:
                    origin = _event(call, where, [item.shape], [item.dtype], nan, inf)
                    break

    for report in per_node.values():
        report.write(stats, grads, underflow)
    return first, origin, bad_calls, bad_grads


@dataclass(eq=False)
class _NodeReport:
    """What ``finish`` gathers for one node before writing ``node.numerics``."""

    node: Node
    checked_calls: int = 0
    nan: int = 0
    inf: int = 0
    stats: _Stats = field(default_factory=_Stats)
    nonfinite_calls: list[int] = field(default_factory=list)
    nonfinite_grad_calls: set[int] = field(default_factory=set)

    def write(self, stats: bool, grads: bool, underflow: bool) -> None:
        out: dict[str, Any] = {"checked_calls": self.checked_calls}
        if stats:
            out["elements"] = self.stats.n
            out |= self.stats.report(underflow)
        out["nan"] = self.nan
        out["inf"] = self.inf
        out["nonfinite_calls"] = sorted(set(self.nonfinite_calls))
        if grads:
            out["nonfinite_grad_calls"] = sorted(self.nonfinite_grad_calls)
        self.node.numerics = out
