"""``ModelSnapshot``: everything layerscope promises to leave alone when it runs a
model, and every difference reported precisely::

    snap = ModelSnapshot.take(model)
    ls.profile(model, x)
    snap.assert_unchanged(model)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.modules.module as torch_module
from torch import Tensor, nn
from torch.nn.parameter import is_lazy

#: Per-module hook tables; the keys and the hook objects must be exactly as they were.
MODULE_HOOK_DICTS: tuple[str, ...] = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)

#: Process-wide hook tables in ``torch.nn.modules.module`` (those this torch has).
GLOBAL_HOOK_DICTS: tuple[str, ...] = tuple(
    name
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
        "_global_forward_hooks_with_kwargs",
        "_global_forward_hooks_always_called",
        "_global_buffer_registration_hooks",
        "_global_module_registration_hooks",
        "_global_parameter_registration_hooks",
    )
    if hasattr(torch_module, name)
)


#: What ``assert_unchanged(..., skip=...)`` may leave out.
CATEGORIES: tuple[str, ...] = (
    "structure",
    "state_dict",
    "buffers",
    "params",
    "training",
    "requires_grad",
    "grads",
    "hooks",
    "global_hooks",
    "attributes",
    "rng",
)

#: A hook table as (key, hook object) pairs, in order.
HookTable = tuple[tuple[Any, Any], ...]


@dataclass(frozen=True)
class TensorRecord:
    """A tensor's identity, metadata and (for non-meta tensors) a copy of its values."""

    obj_id: int
    dtype: torch.dtype
    #: None for an uninitialised lazy tensor, which has no shape yet.
    shape: tuple[int, ...] | None
    device: torch.device
    #: A copy of the values; None for meta and lazy tensors (only metadata is compared).
    values: Tensor | None

    @classmethod
    def of(cls, t: Tensor) -> TensorRecord:
        if is_lazy(t):
            return cls(id(t), t.dtype, None, t.device, None)
        values = None if t.is_meta else t.detach().clone()
        return cls(id(t), t.dtype, tuple(t.shape), t.device, values)

    def diff(self, t: Tensor, what: str, *, check_identity: bool = False) -> list[str]:
        """Human-readable differences between this record and ``t`` (empty when equal)."""
        out: list[str] = []
        if check_identity and id(t) != self.obj_id:
            out.append(f"{what}: replaced by a different tensor object")
        lazy = is_lazy(t)
        meta = (
            ("dtype", self.dtype, t.dtype),
            ("shape", self.shape, None if lazy else tuple(t.shape)),
            ("device", self.device, t.device),
        )
        for label, before, after in meta:
            if before != after:
                out.append(f"{what}: {label} changed from {before} to {after}")
        if out or self.values is None:
            return out
        if t.is_meta:
            out.append(f"{what}: became a meta tensor")
        elif not _exactly_equal(self.values, t.detach()):
            out.append(f"{what}: values changed ({_describe_change(self.values, t.detach())})")
        return out


def _exactly_equal(a: Tensor, b: Tensor) -> bool:
    """``torch.equal``, except that NaNs in the same places count as equal."""
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        return torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)
    return False


def _describe_change(before: Tensor, after: Tensor) -> str:
    if before.numel() == 1:
        return f"{before.item()!r} -> {after.item()!r}"
    if before.is_floating_point() or before.is_complex():
        differs = (before != after) & ~(before.isnan() & after.isnan())
    else:
        differs = before != after
    n = int(differs.sum().item())
    return f"{n} of {before.numel()} elements differ"


def _hook_table(obj: Any) -> HookTable | None:
    if obj is None:
        return None
    return tuple(obj.items())


def _hook_diff(before: HookTable | None, after: HookTable | None, what: str) -> list[str]:
    if before is None or after is None:
        return [] if before is after else [f"{what}: table appeared or disappeared"]
    keys_before = [k for k, _ in before]
    keys_after = [k for k, _ in after]
    if keys_before != keys_after:
        added = [k for k in keys_after if k not in keys_before]
        removed = [k for k in keys_before if k not in keys_after]
        detail = f"added {added}, removed {removed}" if added or removed else "reordered"
        return [f"{what}: keys {keys_before} -> {keys_after} ({detail})"]
    return [
        f"{what}[{k}]: hook object replaced ({hb!r} -> {ha!r})"
        for (k, hb), (_, ha) in zip(before, after, strict=True)
        if hb is not ha
    ]


def _label(path: str) -> str:
    return repr(path) if path else "<root>"


@dataclass
class ModelSnapshot:
    """Everything about a model (and the process) that profiling must leave unchanged."""

    modules: dict[str, tuple[int, type[nn.Module]]] = field(default_factory=dict)
    state_dict: dict[str, TensorRecord | Any] = field(default_factory=dict)
    buffers: dict[str, TensorRecord] = field(default_factory=dict)
    params: dict[str, TensorRecord] = field(default_factory=dict)
    training: dict[str, bool] = field(default_factory=dict)
    requires_grad: dict[str, bool] = field(default_factory=dict)
    grads: dict[str, TensorRecord | None] = field(default_factory=dict)
    hooks: dict[tuple[str, str], HookTable | None] = field(default_factory=dict)
    global_hooks: dict[str, HookTable] = field(default_factory=dict)
    attributes: dict[str, frozenset[str]] = field(default_factory=dict)
    cpu_rng: Tensor = field(default_factory=torch.get_rng_state)
    cuda_rng: list[Tensor] | None = None
    python_rng: Any = None

    @classmethod
    def take(cls, model: nn.Module) -> ModelSnapshot:
        """Record ``model`` and the global state now."""
        snap = cls()
        for path, m in model.named_modules(remove_duplicate=False):
            snap.modules[path] = (id(m), type(m))
            snap.training[path] = m.training
            snap.attributes[path] = frozenset(m.__dict__)
            for name in MODULE_HOOK_DICTS:
                snap.hooks[(path, name)] = _hook_table(m.__dict__.get(name))
        for key, value in model.state_dict(keep_vars=True).items():
            snap.state_dict[key] = TensorRecord.of(value) if isinstance(value, Tensor) else value
        for name, b in model.named_buffers(remove_duplicate=False):
            snap.buffers[name] = TensorRecord.of(b)
        for name, p in model.named_parameters(remove_duplicate=False):
            snap.params[name] = TensorRecord.of(p)
            snap.requires_grad[name] = p.requires_grad
            snap.grads[name] = None if p.grad is None else TensorRecord.of(p.grad)
        for name in GLOBAL_HOOK_DICTS:
            table = _hook_table(getattr(torch_module, name))
            assert table is not None
            snap.global_hooks[name] = table
        snap.cpu_rng = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            snap.cuda_rng = torch.cuda.get_rng_state_all()
        snap.python_rng = random.getstate()
        return snap

    def differences(self, model: nn.Module, skip: Collection[str] = ()) -> list[str]:
        """Every difference between this snapshot and ``model`` now, as readable lines."""
        unknown = set(skip).difference(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown categories {sorted(unknown)}; known: {CATEGORIES}")
        now = ModelSnapshot.take(model)
        out: list[str] = []
        if "structure" not in skip:
            out += _dict_diff("module", self.modules, now.modules, _module_diff)
        if "state_dict" not in skip:
            out += _dict_diff("state_dict", self.state_dict, now.state_dict, _value_diff(model))
        if "buffers" not in skip:
            out += _tensor_dict_diff(
                "buffer", self.buffers, model.named_buffers(remove_duplicate=False)
            )
        if "params" not in skip:
            out += _tensor_dict_diff(
                "parameter", self.params, model.named_parameters(remove_duplicate=False)
            )
        if "training" not in skip:
            out += _dict_diff(
                "module",
                self.training,
                now.training,
                lambda k, a, b: [f"module {_label(k)}: training {a} -> {b}"] if a != b else [],
            )
        if "requires_grad" not in skip:
            out += _dict_diff(
                "parameter",
                self.requires_grad,
                now.requires_grad,
                lambda k, a, b: [f"parameter {k}: requires_grad {a} -> {b}"] if a != b else [],
            )
        if "grads" not in skip:
            grads_now = dict(model.named_parameters(remove_duplicate=False))
            for name, rec in self.grads.items():
                p = grads_now.get(name)
                if p is None:
                    continue  # reported by "params"
                if rec is None:
                    if p.grad is not None:
                        out.append(f"parameter {name}: .grad was None, now {tuple(p.grad.shape)}")
                elif p.grad is None:
                    out.append(f"parameter {name}: .grad was set, now None")
                else:
                    out += rec.diff(p.grad, f"parameter {name}: .grad")
        if "hooks" not in skip:
            for (path, name), before in self.hooks.items():
                if (path, name) in now.hooks:
                    out += _hook_diff(
                        before, now.hooks[(path, name)], f"module {_label(path)} {name}"
                    )
        if "global_hooks" not in skip:
            for name, before in self.global_hooks.items():
                out += _hook_diff(before, now.global_hooks[name], f"torch.nn.modules.module.{name}")
        if "attributes" not in skip:
            for path, keys_before in self.attributes.items():
                keys_after = now.attributes.get(path)
                if keys_after is not None and keys_after != keys_before:
                    added = sorted(keys_after - keys_before)
                    removed = sorted(keys_before - keys_after)
                    out.append(
                        f"module {_label(path)}: __dict__ keys changed (added {added}, "
                        f"removed {removed})"
                    )
        if "rng" not in skip:
            if not torch.equal(self.cpu_rng, now.cpu_rng):
                out.append("torch CPU RNG state changed")
            if self.cuda_rng is not None:
                after_cuda = now.cuda_rng or []
                if len(after_cuda) != len(self.cuda_rng) or any(
                    not torch.equal(a, b) for a, b in zip(self.cuda_rng, after_cuda, strict=False)
                ):
                    out.append("torch CUDA RNG state changed")
            if self.python_rng != now.python_rng:
                out.append("Python random state changed")
        return out

    def assert_unchanged(self, model: nn.Module, skip: Collection[str] = ()) -> None:
        """Fail with every difference listed if anything recorded has changed.

        ``skip`` names categories (see ``CATEGORIES``) not to compare, for code that is
        allowed to change them (a user's own training step inside ``ls.Profiler``).
        """
        diffs = self.differences(model, skip)
        if diffs:
            shown = "\n  ".join(diffs[:50])
            more = f"\n  ... and {len(diffs) - 50} more" if len(diffs) > 50 else ""
            raise AssertionError(
                f"the model or global state changed ({len(diffs)}):\n  {shown}{more}"
            )


def _dict_diff(
    kind: str,
    before: dict[str, Any],
    after: dict[str, Any],
    compare: Callable[[str, Any, Any], list[str]],
    entries: str | None = None,
) -> list[str]:
    """Keys removed and added (named ``entries``, default "<kind> entries"), then
    ``compare`` on every key in both."""
    entries = entries or f"{kind} entries"
    out: list[str] = []
    missing = [k for k in before if k not in after]
    added = [k for k in after if k not in before]
    if missing:
        out.append(f"{entries} removed: {missing}")
    if added:
        out.append(f"{entries} added: {added}")
    for k, a in before.items():
        if k in after:
            out += compare(k, a, after[k])
    return out


def _module_diff(
    path: str, before: tuple[int, type[nn.Module]], after: tuple[int, type[nn.Module]]
) -> list[str]:
    out: list[str] = []
    if before[0] != after[0]:
        out.append(f"module {_label(path)}: replaced by a different module object")
    if before[1] is not after[1]:
        out.append(f"module {_label(path)}: class {before[1].__name__} -> {after[1].__name__}")
    return out


def _value_diff(model: nn.Module) -> Callable[[str, Any, Any], list[str]]:
    current = model.state_dict(keep_vars=True)

    def compare(key: str, before: Any, after: Any) -> list[str]:
        if isinstance(before, TensorRecord):
            value = current[key]
            if not isinstance(value, Tensor):
                return [f"state_dict {key}: was a tensor, now {type(value).__name__}"]
            return before.diff(value, f"state_dict {key}")
        if isinstance(after, TensorRecord):
            return [f"state_dict {key}: was {type(before).__name__}, now a tensor"]
        try:
            same = bool(before == after)
        except Exception:
            same = before is after
        return [] if same else [f"state_dict {key}: {before!r} -> {after!r}"]

    return compare


def _tensor_dict_diff(
    kind: str, before: dict[str, TensorRecord], now: Iterable[tuple[str, Tensor]]
) -> list[str]:
    return _dict_diff(
        kind,
        before,
        dict(now),
        lambda name, rec, t: rec.diff(t, f"{kind} {name}", check_identity=True),
        entries=f"{kind}s",
    )
