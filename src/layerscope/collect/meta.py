"""``to_meta``: a copy of a model on the meta device that keeps tied weights tied;
``meta_copy``: that copy with the code that would still reach the original taken out.

``model.to("meta")`` replaces every parameter one by one, so two modules that shared one
``nn.Parameter`` (GPT-2's LM head and token embedding) end up with two, and the copy
counts the shared weight twice. A ``copy.deepcopy`` whose memo already maps each original
tensor to its meta twin keeps every sharing as it was and copies no real data.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import is_lazy

from layerscope.errors import InvalidInputError
from layerscope.validate import check_instance


def to_meta(model: nn.Module) -> nn.Module:
    """A copy of ``model`` on the meta device; ``model`` itself is left untouched.

    - Each distinct parameter (by identity) becomes one meta ``nn.Parameter`` of the same
      class, shape, dtype and ``requires_grad``, so a parameter shared by several modules
      (tied weights) is still one object in the copy, held by the same modules. Attributes
      set on a parameter (``p.__dict__``) are deep-copied onto its twin; ``.grad`` is not
      copied (the copy has no gradients).
    - Each buffer becomes a meta tensor of the same shape and dtype (shared buffers stay
      shared); a ``None`` buffer stays ``None``.
    - Tensors held directly as plain (unregistered) attributes of a module, such as a cached
      rotary table, become meta tensors too; tensors nested inside lists or dicts are copied
      as ``copy.deepcopy`` copies them, with their data.
    - Everything else (train/eval flags, hooks, other attributes) is copied by
      ``copy.deepcopy``, so a model that cannot be deep-copied cannot be copied here either.
      Lazy modules' uninitialized parameters are left to ``deepcopy``.

    No real weight is read or copied, so this is cheap even for a large model.
    """
    check_instance("model", model, nn.Module, "an nn.Module")
    memo: dict[int, Any] = {}
    keep: list[object] = []  # the originals, alive while memo refers to them by id
    for module in model.modules():
        for p in module._parameters.values():
            if p is None or id(p) in memo or is_lazy(p):
                continue
            memo[id(p)] = _meta_parameter(p, memo)
            keep.append(p)
        for b in module._buffers.values():
            if b is None or id(b) in memo or is_lazy(b):
                continue
            memo[id(b)] = _meta_tensor(b)
            keep.append(b)
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                if isinstance(value, nn.Parameter):
                    memo[id(value)] = _meta_parameter(value, memo)
                elif not is_lazy(value):
                    memo[id(value)] = _meta_tensor(value)
                keep.append(value)
    copied = copy.deepcopy(model, memo)
    del keep
    return copied


def _meta_tensor(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised meta tensor like ``t`` (shape, dtype, strides, requires_grad)."""
    out = torch.empty_like(t, device="meta")
    if t.requires_grad and (out.is_floating_point() or out.is_complex()):
        out.requires_grad_(True)
    return out


def _meta_parameter(p: nn.Parameter, memo: dict[int, Any]) -> nn.Parameter:
    """A meta parameter of ``p``'s class, as ``Parameter.__deepcopy__`` builds one."""
    data = torch.empty_like(p.detach(), device="meta")
    new = type(p)(data, p.requires_grad)
    extra = getattr(p, "__dict__", None)
    if extra:
        new.__dict__.update(copy.deepcopy(extra, memo))
    return new


#: The start of every notice ``meta_copy`` gives (a plan's notes carry them).
NOT_RUN = "not run on the meta copy"

#: The hook tables whose callables run during a forward or backward, with their flags
#: (keyed by the same handle ids).
_HOOK_TABLES: dict[str, tuple[str, ...]] = {
    "_forward_pre_hooks": ("_forward_pre_hooks_with_kwargs",),
    "_forward_hooks": ("_forward_hooks_with_kwargs", "_forward_hooks_always_called"),
    "_backward_pre_hooks": (),
    "_backward_hooks": (),
}

#: Values a callable may share with the original: they hold no state of the user's.
_ATOMS = (
    type(None), bool, int, float, complex, str, bytes, range, type, types.ModuleType,
    types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
    types.WrapperDescriptorType, types.CodeType, torch.dtype, torch.device, torch.Size,
    torch.layout, torch.memory_format,
)  # fmt: skip


def meta_copy(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """``to_meta(model)`` that cannot touch ``model`` or anything the user holds, and
    a notice for each piece of code it leaves out.

    ``copy.deepcopy`` copies functions by reference: an instance-level ``forward``
    (``bn.forward = lambda x: orig(x)``) or a hook whose closure, defaults or globals
    hold the original module, a dict or any other object would run the user's module or
    write into the user's objects when the copy runs. Such a forward is dropped from the
    copy (its class's ``forward`` runs instead) and such a hook removed; what only
    reaches the copy (a bound method or ``functools.partial`` rebound by the deep copy)
    or no state at all stays. A lazy module not yet initialised is refused, named: its
    parameters have no shape to copy."""
    check_instance("model", model, nn.Module, "an nn.Module")
    for path, module in model.named_modules():
        lazy = any(is_lazy(p) for p in module.parameters(recurse=False))
        if lazy and isinstance(module, LazyModuleMixin):
            raise InvalidInputError(
                f"module {path or '<root>'!r} ({type(module).__name__}) has lazy parameters "
                "that no input has shaped yet: run the model once on a real input to "
                "initialise them, then plan it"
            )
    copied = to_meta(model)
    names = {id(m): path for path, m in model.named_modules(remove_duplicate=False)}
    notices: list[str] = []
    pairs = zip(
        model.named_modules(remove_duplicate=False),
        copied.named_modules(remove_duplicate=False),
        strict=True,
    )
    for (path, original), (_, twin) in pairs:
        where = f"module {path!r}" if path else "the root module"
        own = twin.__dict__.get("forward")
        if own is not None:
            held = _shared(original.__dict__["forward"], own, names)
            if held is not None:
                del twin.__dict__["forward"]
                notices.append(
                    f"{NOT_RUN}: the instance-level forward {_name(own)} of {where}, which "
                    f"reaches {held}; {type(twin).__name__}.forward ran instead. To "
                    "analyse it, plan from a profile of the model (ls.profile(..., "
                    "backward=True, memory=True)), or remove the wrapper"
                )
        for table, flags in _HOOK_TABLES.items():
            hooks: dict[int, Any] = twin.__dict__.get(table) or {}
            for hid, hook in list(hooks.items()):
                held = _shared(original.__dict__[table][hid], hook, names)
                if held is None:
                    continue
                del hooks[hid]
                for flag in flags:
                    twin.__dict__[flag].pop(hid, None)
                kind = table.strip("_").replace("_", " ").removesuffix("s")
                notices.append(
                    f"{NOT_RUN}: the {kind} {_name(hook)} on {where}, which reaches {held}"
                )
    return copied, notices


def _name(fn: Any) -> str:
    inner = fn.func if isinstance(fn, functools.partial) else fn
    return repr(getattr(inner, "__name__", None) or type(fn).__name__)


def _shared(original: Any, twin: Any, names: dict[int, str]) -> str | None:
    """What the copy's callable ``twin`` shares with the original's callable
    ``original`` that may hold the user's state (described), or None."""
    theirs = {id(o) for o in _reach(original)}
    for obj in _reach(twin):
        if id(obj) in theirs:
            where = names.get(id(obj))
            if where is not None:
                return f"the model's own {type(obj).__name__} {where!r}"
            return f"a {type(obj).__name__} outside the model"
    return None


def _reach(root: Any) -> Iterator[Any]:
    """The objects with state that ``root`` can reach through the parts ``deepcopy``
    shares: closures, defaults and the globals a function names (other functions of
    the same module followed), bound methods' ``self``, ``partial``'s arguments, and
    the items of tuples and frozensets."""
    seen: set[int] = set()
    todo = [root]
    inner = root.func if isinstance(root, functools.partial) else root
    home = getattr(inner, "__globals__", None)  # a bound method's is its function's
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _ATOMS):
            continue
        seen.add(id(obj))
        if isinstance(obj, tuple | frozenset):
            todo.extend(obj)
        elif isinstance(obj, types.MethodType):
            todo.extend((obj.__func__, obj.__self__))
        elif isinstance(obj, functools.partial):
            todo.extend((obj.func, *obj.args, *obj.keywords.values()))
        elif isinstance(obj, types.FunctionType):
            if obj is not root and obj.__globals__ is not home and obj.__closure__ is None:
                continue  # a library's function: its state is not the user's
            todo.extend(c.cell_contents for c in obj.__closure__ or () if _filled(c))
            todo.extend(obj.__defaults__ or ())
            todo.extend((obj.__kwdefaults__ or {}).values())
            glob = obj.__globals__
            todo.extend(glob[n] for n in _names(obj.__code__) if n in glob)
        else:
            yield obj


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def _names(code: types.CodeType) -> Iterator[str]:
    """The global names ``code`` and the functions defined in it may read."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


__all__ = ["NOT_RUN", "meta_copy", "to_meta"]
