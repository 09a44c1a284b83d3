"""Merging the Profiles of a cycle's analysed steps into one (``merge_profiles``).

A ``Profiler`` with a schedule analyses several steps of a user's loop; each gives a
Profile of the same model, and the cycle's Profile is their merge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from layerscope.metricspec import merge_cycle_metrics
from layerscope.profile import Node, Profile


def merge_profiles(profiles: Sequence[Profile]) -> Profile:
    """One Profile for several analysed steps of the same model, built on the last.

    Nodes are matched by path. Work metrics (FLOPs, MACs, activation, output and
    communication bytes; self and inclusive) and ``calls`` are summed; ``*peak_bytes``
    take the max; static metrics (parameters, buffers, gradient bytes), node numerics and
    everything else come from the last step. Distinct signatures are kept in order of
    first appearance. ``unsupported_ops`` counts, ``outside``, the collectives by kind
    (``comm``) and the kernels a meta analysis followed (``model["kernels"]``) are
    summed, whole-model ``memory`` numbers take the max (its timeline is the last
    step's), ``numerics`` is the first step's that found a non-finite value, else the
    last's; notices are united.
    The profiles are consumed: the result is the last one, updated in place.
    """
    if not profiles:
        raise ValueError("no profiles to merge")
    last = profiles[-1]
    if len(profiles) == 1:
        return last
    by_path = {n.path: n for n in last.root.walk()}
    for prof in reversed(profiles[:-1]):  # newest first: signatures end in step order
        for node in prof.root.walk():
            mine = by_path.get(node.path)
            if mine is not None:
                _merge_node(mine, node)
    outside = dict(last.outside)
    unsupported = last.unsupported_ops
    notices: list[str] = []
    for prof in profiles:
        for key, value in prof.outside.items():
            if prof is not last:
                outside[key] = outside.get(key, 0) + value
        if prof is not last:
            _merge_unsupported(unsupported, prof.unsupported_ops)
            _merge_memory(last.memory, prof.memory)
            add_comm(last.comm, prof.comm)
        notices.extend(n for n in prof.notices if n not in notices)
    last.outside = outside
    last.notices = notices
    kernels = _sum_kernels(profiles)
    if kernels:
        last.model["kernels"] = kernels
    for k, prof in enumerate(profiles):
        if prof.numerics.get("first_nonfinite") is not None:
            last.numerics = _in_cycle(prof.numerics, profiles[:k])
            break
    return last


def _in_cycle(numerics: Mapping[str, Any], earlier: Sequence[Profile]) -> dict[str, Any]:
    """A step's numerics with its events' call numbers counted over the cycle: each
    event's module's calls in the ``earlier`` steps added (the merged node's calls are the
    cycle's)."""
    out = dict(numerics)
    for key in ("first_nonfinite", "origin"):
        event = out.get(key)
        if isinstance(event, Mapping) and isinstance(event.get("call"), int):
            before = 0
            for prof in earlier:
                node = next((n for n in prof.root.walk() if n.path == event.get("path")), None)
                before += node.calls if node is not None else 0
            out[key] = {**event, "call": event["call"] + before}
    return out


def add_comm(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    """Collectives by module, phase and kind (``Profile.comm``'s form) added into
    ``into``: calls and bytes summed, in new dicts."""
    for path, phases in more.items():
        for phase, kinds in phases.items():
            mine = into.setdefault(path, {}).setdefault(phase, {})
            for kind, row in kinds.items():
                acc = mine.setdefault(kind, {})
                for key, value in row.items():
                    acc[key] = acc.get(key, 0) + value


#: The figures of the step whose absolute peak (held at its start + its peak above that)
#: is the cycle's: taken together, never one step's baseline with another's peak.
_PEAK_STEP = ("baseline_bytes", "session_peak_bytes", "baseline")


def _absolute(memory: Mapping[str, Any]) -> float:
    total = 0.0
    for key in ("baseline_bytes", "session_peak_bytes"):
        value = memory.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            total += value
    return total


def _merge_memory(into: dict[str, Any], earlier: Mapping[str, Any]) -> None:
    """Whole-model ``memory`` numbers: the baseline, its kinds and the session peak of
    the step with the highest absolute peak (``_PEAK_STEP``); every other number the max
    of the steps'."""
    if _absolute(earlier) > _absolute(into):
        for key in _PEAK_STEP:
            if key in earlier:
                value = earlier[key]
                into[key] = dict(value) if isinstance(value, Mapping) else value
    for key, value in earlier.items():
        mine = into.get(key)
        if key in _PEAK_STEP:
            continue
        if _is_number(value) and (mine is None or (_is_number(mine) and value > mine)):
            into[key] = value


def _sum_kernels(profiles: Sequence[Profile]) -> dict[str, dict[str, int]]:
    """The kernels a meta analysis followed (``model["kernels"]``), summed over steps."""
    kernels: dict[str, dict[str, int]] = {}
    for prof in profiles:
        chosen = prof.model.get("kernels")
        for op, by_kernel in chosen.items() if isinstance(chosen, dict) else ():
            counts = kernels.setdefault(op, {})
            for kernel, n in by_kernel.items():
                counts[kernel] = counts.get(kernel, 0) + n
    return kernels


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _merge_node(mine: Node, earlier: Node) -> None:
    mine.calls += earlier.calls
    merge_cycle_metrics(mine.metrics, earlier.metrics)
    merge_cycle_metrics(mine.self_metrics, earlier.self_metrics)
    for name in ("inputs", "outputs", "grad_inputs", "grad_outputs"):
        old = getattr(earlier, name)
        if old:
            current = getattr(mine, name)
            setattr(mine, name, [s for s in old if s not in current] + current)


def _merge_unsupported(into: dict[str, Any], earlier: Mapping[str, Any]) -> None:
    for op, entry in earlier.items():
        mine = into.get(op)
        if mine is None:
            into[op] = {**entry, "modules": dict(entry.get("modules", {}))}
            continue
        for key in ("count", "forward", "backward"):
            mine[key] = mine.get(key, 0) + entry.get(key, 0)
        modules = mine.setdefault("modules", {})
        for where, n in entry.get("modules", {}).items():
            modules[where] = modules.get(where, 0) + n
        if "error" in entry:
            mine.setdefault("error", entry["error"])


__all__ = ["add_comm", "merge_profiles"]
