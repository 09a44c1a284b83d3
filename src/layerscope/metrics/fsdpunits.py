"""FSDP2's work charged to the unit it is done for, wherever it runs.

``fully_shard`` makes each sharded module a unit with one or more parameter groups
(``FSDPParamGroup``). Two of a group's methods do a unit's communication away from the
unit's own calls:

- ``post_backward`` reduce-scatters the unit's gradients. It runs after the unit's
  backward, from an autograd node on the unit's inputs, or, when those inputs need no
  gradient (the first unit, a model with one unit), from the callback FSDP queues at the
  end of the backward pass, where no module and no autograd node runs: its ops would land
  in ``Profile.outside``, in the forward phase;
- ``unshard`` all-gathers the unit's parameters, also when another unit prefetches them
  (in the backward, each unit prefetches the one autograd reaches next).

While one of them runs, ``ScopeTracker.charged`` names the unit's node (the lowest common
ancestor of the group's modules, for ``fully_shard([a, b])``): the dispatch mode then
attributes every op to it, ``post_backward``'s to its backward, ``unshard``'s to the
phase it runs in. The methods are wrapped on the group instances (an instance attribute
each, removed at the end of the session), found through each module's FSDP state; groups
of modules outside the profiled model are left alone. A torch whose FSDP2 has none of
these names is left alone too: its ops are then attributed as any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from layerscope.profile import Node

if TYPE_CHECKING:
    from layerscope.collect.scopes import ScopeTracker

__all__ = ["UnitCharges", "fsdp_param_groups", "fsdp_units"]

#: (method, phase it charges: True backward, None the phase it runs in)
_METHODS: tuple[tuple[str, bool | None], ...] = (("post_backward", True), ("unshard", None))


def fsdp_param_groups(module: nn.Module) -> list[Any]:
    """The FSDP2 parameter groups of ``module`` (empty if it is not a ``fully_shard``
    unit, or holds no parameters of its own)."""
    get = getattr(type(module), "_get_fsdp_state", None)
    if get is None:
        return []
    try:
        state = get(module)
    except Exception:  # not initialised as a unit after all
        return []
    groups = getattr(state, "_fsdp_param_groups", None)  # torch >= 2.10: a list
    if groups is None:
        one = getattr(state, "_fsdp_param_group", None)
        groups = [] if one is None else [one]
    return [g for g in groups if g is not None]


def fsdp_units(tracker: ScopeTracker) -> list[tuple[Any, Node]]:
    """Each FSDP2 parameter group of the profiled model, once, with its unit's node: the
    lowest common ancestor of the group's modules."""
    tree = tracker.tree
    seen: set[int] = set()
    units: list[tuple[Any, Node]] = []
    for node in tree.root.walk():
        for group in fsdp_param_groups(tree.module[id(node)]):
            if id(group) in seen:
                continue
            seen.add(id(group))
            nodes = [
                n for m in getattr(group, "modules", ()) or () for n in tree.nodes_of.get(id(m), ())
            ]
            units.append((group, tree.lowest_common_ancestor(nodes) if nodes else node))
    return units


class InstancePatches:
    """Methods set on objects for a session, each put back as it was at ``undo``: the
    instance attribute it had, or none (the class's method shows through again)."""

    def __init__(self) -> None:
        # (object, method name, whether it had an instance attribute, that attribute)
        self._undo: list[tuple[Any, str, bool, Any]] = []

    def set(self, obj: Any, name: str, method: Callable[..., Any]) -> None:
        self._undo.append((obj, name, name in vars(obj), vars(obj).get(name)))
        setattr(obj, name, method)

    def undo(self) -> None:
        while self._undo:
            obj, name, had, previous = self._undo.pop()
            if had:
                setattr(obj, name, previous)
            else:
                vars(obj).pop(name, None)


class UnitCharges:
    """Wraps ``post_backward`` and ``unshard`` of the profiled model's FSDP2 groups so
    that their ops are charged to their unit (module docstring)."""

    def __init__(self) -> None:
        self._patches = InstancePatches()

    def install(self, tracker: ScopeTracker) -> None:
        for group, unit in fsdp_units(tracker):
            for name, backward in _METHODS:
                if callable(getattr(group, name, None)):
                    self._wrap(tracker, group, name, unit, backward)

    def _wrap(
        self, tracker: ScopeTracker, group: Any, name: str, unit: Node, backward: bool | None
    ) -> None:
        original: Callable[..., Any] = getattr(group, name)

        def charged(*args: Any, **kwargs: Any) -> Any:
            before = tracker.charged
            tracker.charged = (unit, backward)
            try:
                return original(*args, **kwargs)
            finally:
                tracker.charged = before

        self._patches.set(group, name, charged)

    def uninstall(self) -> None:
        self._patches.undo()
