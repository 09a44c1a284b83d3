"""Small pieces every pass of a session shares: which module to run, the default loss,
installing hook pairs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from layerscope.collect.signature import iter_tensors
from layerscope.errors import InvalidInputError


def is_compiled(model: Any) -> bool:
    """Whether ``model`` is a ``torch.compile``'d module (an ``OptimizedModule``)."""
    return type(model).__name__ == "OptimizedModule" and isinstance(
        getattr(model, "_orig_mod", None), nn.Module
    )


def unwrap_model(model: Any) -> tuple[nn.Module, list[str]]:
    """The eager module to instrument, with notices; clear errors for what cannot be.

    A ``torch.compile``'d model gives its original module; a ``DistributedDataParallel``
    one its ``.module`` (paths then have no ``module.`` prefix), in any nesting."""
    notices: list[str] = []
    while True:
        if isinstance(model, torch.jit.ScriptModule | torch.jit.ScriptFunction):
            raise InvalidInputError(
                "TorchScript models cannot be profiled: their submodules run inside the "
                "TorchScript interpreter, where no Python hook sees them. Profile the eager "
                "nn.Module the script was made from."
            )
        if is_compiled(model):
            orig = model._orig_mod
            notices.append(
                "torch.compile'd model: layerscope analysed (and timed per module) the "
                f"original eager module ({type(orig).__name__}); the compiled graph may fuse "
                "or reorder its ops, and a timing pass adds the compiled model's own latency"
            )
            model = orig
            continue
        inner = getattr(model, "module", None)
        if isinstance(model, nn.parallel.DistributedDataParallel) and isinstance(inner, nn.Module):
            notices.append(
                "DistributedDataParallel model: layerscope profiled its .module "
                f"({type(inner).__name__}), paths without the 'module.' prefix; DDP's "
                "gradient all-reduce runs only where the DDP model itself is called "
                "(inside `with ls.Profiler(model):`), not in ls.profile"
            )
            model = inner
            continue
        break
    if not isinstance(model, nn.Module):
        raise InvalidInputError(f"expected a torch.nn.Module, got {type(model).__name__}")
    inner_compiled = [name for name, m in model.named_modules() if name and is_compiled(m)]
    if inner_compiled:
        shown = ", ".join(inner_compiled[:3]) + (", ..." if len(inner_compiled) > 3 else "")
        notices.append(
            f"torch.compile'd submodules ({shown}): layerscope analysed their original "
            "eager modules (under _orig_mod); the compiled graphs may fuse or reorder "
            "their ops"
        )
    return model, notices


@contextmanager
def in_mode(model: nn.Module, mode: str | None) -> Iterator[None]:
    """Run the block with the model in ``mode`` ("eval" or "train", through its own
    ``train()``; None changes nothing) and put back every submodule's ``training`` flag
    exactly as it was, whatever the block or ``train()`` did to them."""
    if mode is None:
        yield
        return
    flags = [(m, m.training) for m in model.modules()]
    try:
        model.train(mode == "train")
        yield
    finally:
        for m, flag in flags:
            if m.training is not flag:
                m.training = flag


def default_loss(out: Any) -> torch.Tensor:
    """Sum of every floating tensor in the output that requires grad."""
    parts = [t.sum() for t in iter_tensors(out) if t.is_floating_point() and t.requires_grad]
    if not parts:
        raise InvalidInputError(
            "backward=True, but no output tensor requires grad (is the model frozen, or "
            "running under no_grad?); pass loss_fn to choose what to differentiate"
        )
    loss = parts[0]
    for part in parts[1:]:  # added one by one: the parts may differ in dtype
        loss = loss + part
    return loss


def install_hook_pairs(
    pairs: Iterable[tuple[nn.Module, Callable[..., Any], Callable[..., Any]]],
    *,
    with_kwargs: bool = False,
    prepend_pre: bool = False,
    prepend_post: bool = True,
) -> list[RemovableHandle]:
    """Register a forward pre hook and an always-called forward hook on each module (the
    forward hook runs before the user's unless ``prepend_post=False``); on failure remove
    what was registered and re-raise."""
    handles: list[RemovableHandle] = []
    try:
        for module, pre, post in pairs:
            handles.append(
                module.register_forward_pre_hook(pre, with_kwargs=with_kwargs, prepend=prepend_pre)
            )
            handles.append(
                module.register_forward_hook(
                    post, with_kwargs=with_kwargs, always_call=True, prepend=prepend_post
                )
            )
    except BaseException:
        remove_hooks(handles)
        raise
    return handles


def remove_hooks(handles: list[RemovableHandle]) -> None:
    """Remove every handle and empty the list."""
    for h in handles:
        h.remove()
    handles.clear()
