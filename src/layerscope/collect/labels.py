"""The user's ``record_function`` labels as regions of the profile's tree.

``with torch.autograd.profiler.record_function("block"): ...`` (or
``torch.profiler.record_function``) around module calls names a stretch of the model's
code for ``torch.profiler``; an analysis session treats it as ``ls.region("block")``
(``collect.regions``): a node ``<scope path>.[block]`` of type ``region`` under which the
modules first called inside it nest.

The label's start and end are dispatcher ops (``profiler::_record_function_enter_new``
and ``profiler::_record_function_exit``), so the session's dispatch mode sees them: a
session that counts ops (FLOPs, bytes or memory; the defaults) recognises labels, one
that counts none (``count_flops=False, count_bytes=False`` without ``memory``) runs no
dispatch mode and leaves them alone.

Only the user's labels become regions (``label_region_name``), and only those around at
least one module call: a label with ops only inside is dissolved when the profile is
built (``dissolve_label_regions``), its work counted in the scope it ran in, as if it
were not there. The kineto timer then treats the ranges of exactly these labels as
region ranges (``collect.timing.kineto``).
"""

from __future__ import annotations

from typing import Any

import torch

import layerscope.metricspec as ms
from layerscope.collect.scopes import ScopeTracker
from layerscope.profile import Profile

#: The dispatcher ops that open and close a ``record_function`` range from Python.
ENTER_OP = torch.ops.profiler._record_function_enter_new.default
EXIT_OP = torch.ops.profiler._record_function_exit._RecordFunction

#: Starts of labels torch itself writes (and layerscope's own, ``layerscope::``, which
#: the ``::`` rule below covers): never regions.
TORCH_LABEL_PREFIXES = (
    "## ",
    "DataLoader",
    "enumerate(DataLoader)",
    "Optimizer.",
    "ProfilerStep",
    "torch/",
    "Torch-Compiled Region",
    "TorchDynamo",
    "TORCHDYNAMO",
    "CompiledFunction",
    "DataParallel",
    "DistributedDataParallel",
    "FullyShardedDataParallel",
)


def label_region_name(label: object) -> str | None:
    """The region name a ``record_function`` label stands for, or None when it is not a
    user's label that can name a region: empty, namespaced like an op or one of
    layerscope's own ranges (``aten::mm``, ``autograd::...``, ``layerscope::module::a``,
    ``FSDP::...``: anything with ``::``), one of torch's own (``TORCH_LABEL_PREFIXES``),
    or holding ``.`` (a region name cannot: it separates path steps) or ``/`` (it
    separates an op row from its module's path)."""
    if not isinstance(label, str) or not label:
        return None
    if "::" in label or "." in label or "/" in label:
        return None
    if label.startswith(TORCH_LABEL_PREFIXES):
        return None
    return label


class LabelRegions:
    """Enters and leaves a region of ``tracker`` for each user label the dispatch mode
    sees open and close (``on_label_op``, called for ``ENTER_OP`` and ``EXIT_OP``).

    The handle the enter op returns comes back to the exit op as another Python object,
    so ranges are matched as ``with`` blocks nest them: an exit closes the innermost
    label still open (an exit with none open, of a label opened before the session,
    is let be)."""

    def __init__(self, tracker: ScopeTracker) -> None:
        self.tracker = tracker
        # each label open, innermost last: None for one that is no region, else (region
        # token, its node's id, module calls at entry)
        self._open: list[tuple[Any, int, int] | None] = []

    def on_label_op(self, func: Any, args: tuple[Any, ...], out: Any) -> None:
        tracker = self.tracker
        if func is ENTER_OP:
            name = label_region_name(args[0] if args else None)
            if name is None:
                self._open.append(None)
                return
            made = len(tracker.regions)
            token = tracker.enter_region(name)
            node = tracker.current
            if len(tracker.regions) > made:  # a new region: the label's own
                tracker.label_regions[id(node)] = False
            self._open.append((token, id(node), tracker.module_calls))
            return
        entry = self._open.pop() if self._open else None
        if entry is None:
            return
        token, node_id, calls = entry
        tracker.exit_region(token)
        if tracker.module_calls > calls and node_id in tracker.label_regions:
            tracker.label_regions[node_id] = True


def dissolve_label_regions(profile: Profile, tracker: ScopeTracker) -> None:
    """Take out of ``tracker`` the regions made from labels that had no module call
    inside and hold no region that stays: their self metrics go to the scope they ran
    in (``profile.outside`` for one outside the model), inner regions first. Called by
    ``attach_regions`` before it places the regions."""
    labels = tracker.label_regions
    if not labels or all(labels.values()):
        return
    keeps_inner: set[int] = set()  # ids of regions with a staying region inside
    dropped: set[int] = set()
    for key, node in reversed(list(tracker.regions.items())):  # inner ones were made later
        parent = tracker.region_parent[id(node)]
        if labels.get(id(node), True) or id(node) in keeps_inner:
            keeps_inner.add(id(parent))
            continue
        into = profile.outside if parent is tracker.outside else parent.self_metrics
        for k, v in node.self_metrics.items():
            if k in ms.ADDITIVE_METRICS and v:
                into[k] = into.get(k, 0) + v
        dropped.add(id(node))
        del tracker.regions[key]
        for table in (tracker.region_parent, tracker.region_times, tracker.region_created):
            del table[id(node)]
    tracker.region_calls = [c for c in tracker.region_calls if id(c[0]) not in dropped]
