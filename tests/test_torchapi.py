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
