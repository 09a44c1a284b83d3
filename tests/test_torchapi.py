"""``layerscope.torchapi``: torch's private functions, bound once; a missing one names torch."""

from __future__ import annotations

import pytest
import torch

from layerscope import torchapi
from layerscope.errors import LayerscopeError


def test_bound_functions_are_torchs_own() -> None:
    assert torchapi.current_autograd_node is torch._C._current_autograd_node
    assert torchapi.get_sequence_nr is torch._C._autograd._get_sequence_nr
    assert torchapi.current_autograd_node() is None  # no backward runs here


def test_a_missing_function_names_itself_and_the_torch_version() -> None:
    missing = torchapi.private("_C._no_such_function")  # binding it does not fail
    with pytest.raises(LayerscopeError) as info:
        missing(1, key=2)
    message = str(info.value)
    assert "torch._C._no_such_function" in message
    assert f"torch {torch.__version__} does not have" in message


def test_every_binding_exists_on_this_torch() -> None:
    """No stand-in among the bindings: the running torch has every function layerscope
    binds (the compatibility run, bench/compat.sh, checks another release)."""
    helpers = (
        "checkpoint_of_pack_hook",
        "checkpoint_saving_inputs",
        "checkpointed_call",
        "reentrant_checkpointed",
    )
    bound = [n for n in torchapi.__all__ if n not in ("NO_SEQUENCE", "private", *helpers)]
    assert len(bound) == 12
    stand_ins = [n for n in bound if getattr(getattr(torchapi, n), "__name__", "") == "missing"]
    assert stand_ins == []
    assert torchapi.sdp_priority_order is torch._C._get_sdp_priority_order
    assert torchapi.set_version_counters is torch._C._autograd._unsafe_set_version_counter


def test_checkpointing_internals_are_found_on_this_torch() -> None:
    """What layerscope reads of non-reentrant checkpointing exists on this torch: its
    stop signal, the code of its hooks and of the frame's ``save_inputs``, and the
    recomputation closure's ``fn`` and ``kwargs``."""
    import torch.utils.checkpoint as cp

    assert torchapi.STOP_RECOMPUTATION is cp._StopRecomputationError
    assert torchapi._REENTRANT is cp.CheckpointFunction  # reentrant: its saving frame
    assert torchapi.top_saved_tensors_hooks is torch._C._autograd._top_saved_tensors_default_hooks
    found: dict[str, object] = {}

    def fn(x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        hooks = torchapi.top_saved_tensors_hooks(False)
        assert hooks is not None
        frame = torchapi.checkpoint_of_pack_hook(hooks[0])
        if torchapi.in_recomputation():
            found["recomputed"] = True
        elif frame is not None:
            found["call"] = torchapi.checkpointed_call(frame)
        return (x * scale).sin()

    x, scale = torch.ones(3, requires_grad=True), torch.full((3,), 2.0)
    assert not torchapi.in_recomputation()
    cp.checkpoint(fn, x, scale=scale, use_reentrant=False).sum().backward()
    assert found["call"] == (fn, {"scale": scale})
    assert found["recomputed"] is True
    assert torchapi.checkpoint_of_pack_hook(fn) is None
    assert torchapi.checkpointed_call(object()) == (None, {})
