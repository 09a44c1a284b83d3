"""Activation checkpointing measured right, with each of torch's non-reentrant APIs:
``torch.utils.checkpoint.checkpoint(...)`` (function style; transformers' gradient
checkpointing calls it), ``checkpoint_wrapper`` and the composable ``checkpoint``, with
torch's early stop of the recomputation on and off.

- No tensor of a recomputation outlives the backward because of layerscope: the bytes
  live at the end of the backward, counted by a tracker of the test's own (every storage
  an op returns, held weakly), are those of the same run without layerscope.
- What a checkpoint keeps for its recomputation (the inputs, positional or keyword) is
  saved for backward: ``activation_bytes`` of the checkpointed module.
- ``recompute_flops``: the part of ``backward_flops`` that is forward work run again;
  with early stop off, the checkpointed module's forward FLOPs.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.distributed._composable.checkpoint_activation import checkpoint as composable_checkpoint
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import layerscope as ls

APIS = ("function", "wrapper", "composable")


class LiveStorages(TorchDispatchMode):
    """Every storage an op returns that did not exist when the tracker started, held
    weakly with its size: ``live()`` sums those still alive."""

    def __init__(self, existing: Iterator[Tensor]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._before = {t.untyped_storage()._cdata for t in existing}
        self._refs: dict[int, tuple[StorageWeakRef, int]] = {}

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, Tensor):
                s = t.untyped_storage()
                key = s._cdata
                known = self._refs.get(key)
                if key not in self._before and (known is None or _expired(known[0])):
                    self._refs[key] = (StorageWeakRef(s), s.nbytes())  # type: ignore[no-untyped-call]
        return out

    def live(self) -> int:
        return sum(n for ref, n in self._refs.values() if not _expired(ref))


def _expired(ref: StorageWeakRef) -> bool:
    return bool(ref.expired())  # type: ignore[no-untyped-call]


# ---- models -------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))  # type: ignore[no-any-return]


class Stack(nn.Module):
    """Blocks run in turn; with ``function=True`` each through ``checkpoint(...)``."""

    def __init__(self, blocks: list[nn.Module], function: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.function = function

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.function else block(x)
        return x


class ConvBlock(nn.Module):
    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.act = nn.ReLU()
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.act(self.conv1(x)))  # type: ignore[no-any-return]


def checkpointed(blocks: list[nn.Module], api: str) -> Stack:
    """``Stack`` of ``blocks``, each checkpointed with ``api``."""
    if api == "wrapper":
        blocks = [checkpoint_wrapper(b) for b in blocks]
    elif api == "composable":
        for b in blocks:
            composable_checkpoint(b)
    return Stack(blocks, function=api == "function")


def mlp(api: str) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    return checkpointed([Block() for _ in range(3)], api), torch.randn(32, 64)


def cnn(api: str) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    return checkpointed([ConvBlock() for _ in range(2)], api), torch.randn(2, 8, 8, 8)


def gpt2(api: str) -> tuple[nn.Module, Tensor]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32, use_cache=False
    )
    config.attn_pdrop = config.resid_pdrop = config.embd_pdrop = 0.0
    model = transformers.GPT2Model(config).train()
    if api == "function":  # transformers' own: checkpoint(partial(forward, block, ...))
        model.gradient_checkpointing_enable({"use_reentrant": False})
    else:
        for i, block in enumerate(model.h):
            if api == "wrapper":
                model.h[i] = checkpoint_wrapper(block)
            else:
                composable_checkpoint(block)
    return model, torch.randint(0, 128, (2, 16))


def loss_of(model: nn.Module, x: Tensor) -> Tensor:
    out = model(x)
    if not isinstance(out, Tensor):
        out = out.last_hidden_state
    loss: Tensor = out.sum()
    return loss


MODELS: dict[str, Callable[[str], tuple[nn.Module, Tensor]]] = {
    "mlp": mlp,
    "cnn": cnn,
    "gpt2": gpt2,
}


@contextmanager
def early_stop(on: bool) -> Iterator[None]:
    with set_checkpoint_early_stop(on):
        yield


def live_after_backward(
    model: nn.Module, x: Tensor, *, profiled: bool, early: bool
) -> tuple[int, int]:
    """Bytes of the storages made during one forward and backward that are alive right
    after the backward (inside the session when ``profiled``): gradients, and whatever
    else something still holds; then the same after a collection of the cyclic GC. The
    GC is off until then, so that tensors a reference cycle holds count in the first."""
    existing = (*model.parameters(), *model.buffers(), x)
    tracker = LiveStorages(iter(existing))
    gc.collect()
    gc.disable()
    try:
        with early_stop(early):
            if profiled:
                with ls.Profiler(model, memory=True) as p:
                    with tracker:
                        loss_of(model, x).backward()  # type: ignore[no-untyped-call]
                    live = tracker.live()
                    gc.collect()
                    collected = tracker.live()
                # nothing of the session's own is left once it ended
                assert p.tracker.error_site == {} and p.tracker.backward_error_site == {}
            else:
                with tracker:
                    loss_of(model, x).backward()  # type: ignore[no-untyped-call]
                live = tracker.live()
                gc.collect()
                collected = tracker.live()
    finally:
        gc.enable()
    return live, collected


@pytest.mark.parametrize("early", [True, False], ids=["early_stop", "no_early_stop"])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", list(MODELS))
def test_no_recomputed_tensor_outlives_the_backward(name: str, api: str, early: bool) -> None:
    model, x = MODELS[name](api)
    plain = live_after_backward(model, x, profiled=False, early=early)
    model.zero_grad(set_to_none=True)
    profiled = live_after_backward(model, x, profiled=True, early=early)
    if name == "mlp":
        # once the cyclic GC ran (torch's checkpoint leaves a cycle of its own that
        # holds one 32x64 output, 8,192 B, in both runs), only the gradients: 3 blocks of
        # Linear(64, 256) + Linear(256, 64), (64*256 + 256 + 256*64 + 64) * 4 B each
        assert plain[1] == 3 * 132_352 == 397_056
    assert profiled[1] == plain[1]
    if early:
        # torch's early stop leaves a reference cycle of its own in the plain run (one
        # 32x64 output of the 3-block MLP with checkpoint(...)); layerscope's saved
        # copies are detached, so with it there may be less before the GC, never more
        assert profiled[0] <= plain[0]
    else:
        assert profiled[0] == plain[0]


def test_the_stop_signal_is_not_kept_but_a_real_error_still_names_its_module() -> None:
    """torch's ``_StopRecomputationError`` is caught by torch itself: never recorded. An
    error a recomputation raises for real still names the module it came from."""

    class FailsOnRecompute(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.calls = 0

        def forward(self, x: Tensor) -> Tensor:
            self.calls += 1
            if self.calls == 2:
                raise ValueError("recompute failed")
            return self.fc(x).relu()  # type: ignore[no-any-return]

    model = Stack([Block(4), FailsOnRecompute()], function=True)
    x = torch.randn(2, 4)
    p = ls.Profiler(model)
    with pytest.raises(ValueError, match="recompute failed") as info, p:
        loss_of(model, x).backward()  # type: ignore[no-untyped-call]
    assert "layerscope: raised in module 'blocks.1' (FailsOnRecompute)" in (info.value.__notes__)
    assert p.tracker.site_of(info.value) is p.profile.node("blocks.1")
    assert list(p.tracker.error_site) == [id(info.value)]


def test_a_swallowed_error_is_forgotten_when_its_caller_returns() -> None:
    """An exception raised in a module and caught in its caller is no longer held once
    the caller returns (its traceback would keep the frames' tensors alive)."""

    class Raises(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            raise KeyError("caught below")

    class Catches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Raises()
            self.seen: list[int] = []

        def forward(self, x: Tensor, tracker: Any) -> Tensor:
            try:
                self.inner(x)
            except KeyError:
                self.seen.append(len(tracker.error_site))  # still on its way here
            return x * 2

    model = Catches()
    with ls.Profiler(model) as p:
        model(torch.ones(2), p.tracker)
        assert p.tracker.error_site == {}
    assert model.seen == [1]


# ---- what a checkpoint keeps: activation_bytes -----------------------------------------
class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x: Tensor, scale: Tensor | None = None) -> Tensor:
        return self.fc(x).relu() * scale  # type: ignore[no-any-return]


class Caller(nn.Module):
    def __init__(self, api: str, keyword: bool) -> None:
        super().__init__()
        self.api, self.keyword = api, keyword
        self.block: nn.Module = Scaled()
        if api == "wrapper":
            self.block = checkpoint_wrapper(self.block)
        elif api == "composable":
            composable_checkpoint(self.block)
        self.head = nn.Linear(32, 32)

    def forward(self, x: Tensor) -> Tensor:
        scale = torch.full((32, 32), 2.0)
        if self.api == "function":
            if self.keyword:
                h = checkpoint(self.block, x, scale=scale, use_reentrant=False)
            else:
                h = checkpoint(self.block, x, scale, use_reentrant=False)
        else:
            h = self.block(x, scale=scale) if self.keyword else self.block(x, scale)
        return self.head(h)  # type: ignore[no-any-return]


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
@pytest.mark.parametrize("api", APIS)
def test_what_a_checkpoint_keeps_is_its_modules_activations(api: str, keyword: bool) -> None:
    x = torch.randn(32, 32, requires_grad=True)
    prof = ls.profile(Caller(api, keyword), x, backward=True, memory=True)
    # the checkpointed module (the module checkpoint_wrapper wraps) keeps x and scale
    # for its recomputation, 32*32*4 = 4,096 B each; nothing inside it is stored
    path = "block._checkpoint_wrapped_module" if api == "wrapper" else "block"
    held = prof.node(path)
    assert held.self_metrics["activation_bytes"] == 2 * 4_096
    assert held.metrics["activation_bytes"] == 8_192
    assert prof.node("block").metrics["activation_bytes"] == 8_192
    assert prof.root.self_metrics["activation_bytes"] == 0  # not the caller's
    # head saves h, the checkpoint's output, 4,096 B
    assert prof.node("head").self_metrics["activation_bytes"] == 4_096
    assert prof.root.metrics["activation_bytes"] == 12_288


class Reentrant(nn.Module):
    """``checkpoint(block, x, scale, use_reentrant=True)``, or of a plain function."""

    def __init__(self, function: bool) -> None:
        super().__init__()
        self.function = function
        self.block, self.head = Scaled(), nn.Linear(32, 32)

    def forward(self, x: Tensor) -> Tensor:
        scale = torch.full((32, 32), 2.0)
        run = (lambda a, b: self.block(a, b)) if self.function else self.block
        h = checkpoint(run, x, scale, use_reentrant=True)
        return self.head(h)  # type: ignore[no-any-return]


def test_reentrant_checkpoint_keeps_its_modules_activations() -> None:
    """A reentrant checkpoint saves its tensor inputs in its own autograd function, after
    the module has returned: they count at the module it runs (x and scale, 4,096 B
    each), as with the other APIs; for a plain function, at the running module."""
    x = torch.randn(32, 32, requires_grad=True)
    prof = ls.profile(Reentrant(function=False), x, backward=True, memory=True)
    assert prof.node("block").self_metrics["activation_bytes"] == 2 * 4_096
    assert prof.node("block.fc").metrics["activation_bytes"] == 0  # run under no_grad
    assert prof.root.self_metrics["activation_bytes"] == 0
    assert prof.node("head").self_metrics["activation_bytes"] == 4_096
    prof = ls.profile(Reentrant(function=True), x, backward=True, memory=True)
    assert prof.node("block").metrics["activation_bytes"] == 0
    assert prof.root.self_metrics["activation_bytes"] == 2 * 4_096


@pytest.mark.parametrize("api", APIS)
def test_gpt2_blocks_hold_their_inputs(api: str) -> None:
    """GPT-2's checkpointed blocks keep their input hidden states; the ``position_ids``
    they get as a keyword argument (bound in a ``partial`` by transformers' own gradient
    checkpointing) were saved before, by ``wpe``'s embedding lookup, and count there."""
    model, ids = gpt2(api)
    prof = ls.profile(model, ids, backward=True, memory=True, loss_fn=loss_of_output)
    names = [f"h.{i}._checkpoint_wrapped_module" if api == "wrapper" else f"h.{i}" for i in (0, 1)]
    hidden = 2 * 16 * 64 * 4  # a block's input hidden states: 8,192 B
    for name in names:
        block = prof.node(name)
        assert block.self_metrics["activation_bytes"] == hidden
        assert block.metrics["activation_bytes"] == hidden  # nothing inside is stored
    assert prof.node("wpe").self_metrics["activation_bytes"] == 1 * 16 * 8  # int64 [1, 16]
    assert prof.node("h").self_metrics["activation_bytes"] == 0
    assert prof.root.self_metrics["activation_bytes"] == 0


# ---- recompute_flops ------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS)
def test_recompute_flops_of_a_3_block_mlp(api: str) -> None:
    fc1 = 2 * 32 * 64 * 256 + 32 * 256  # Linear(64, 256) on 32 rows: 1,056,768 FLOPs
    gelu = 5 * 32 * 256  # 5 per element: 40,960
    fc2 = 2 * 32 * 256 * 64 + 32 * 64  # Linear(256, 64): 1,050,624
    block = fc1 + gelu + fc2  # 2,148,352
    for early in (False, True):
        model, x = mlp(api)
        with early_stop(early):
            prof = ls.profile(model, x, backward=True)
        paths = [
            f"blocks.{i}._checkpoint_wrapped_module" if api == "wrapper" else f"blocks.{i}"
            for i in range(3)
        ]
        for path in paths:
            node = prof.node(path)
            assert node.metrics["flops"] == block
            assert node.self_metrics["recompute_flops"] == 0  # the Linears' and GELU's
            if early:
                # it stops when fc2's addmm saves its inputs, before fc2 runs again
                assert node.metrics["recompute_flops"] == fc1 + gelu == 1_097_728
                assert prof.node(f"{path}.fc2").metrics["recompute_flops"] == 0
            else:
                assert node.metrics["recompute_flops"] == block == 2_148_352
            assert prof.node(f"{path}.fc1").self_metrics["recompute_flops"] == fc1
        assert prof.root.metrics["recompute_flops"] == 3 * (fc1 + gelu if early else block)


def test_recompute_flops_are_part_of_backward_flops() -> None:
    """The backward with checkpointing is the plain backward plus the recomputation."""
    plain_model, x = mlp("none")
    plain = ls.profile(plain_model, x, backward=True)
    with early_stop(False):
        checked = ls.profile(mlp("function")[0], x, backward=True)
    assert plain.root.metrics["recompute_flops"] == 0
    for i in range(3):
        was, now = plain.node(f"blocks.{i}"), checked.node(f"blocks.{i}")
        assert now.metrics["backward_flops"] == (
            was.metrics["backward_flops"] + now.metrics["recompute_flops"]
        )


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", ["cnn", "gpt2"])
def test_recompute_flops_equal_forward_flops_without_early_stop(name: str, api: str) -> None:
    model, x = MODELS[name](api)
    with early_stop(False):
        prof = ls.profile(model, x, backward=True, loss_fn=lambda o: loss_of_output(o))
    blocks = [n for n in prof.nodes() if n.type in ("ConvBlock", "GPT2Block")]
    assert len(blocks) == 2
    for node in blocks:
        assert node.metrics["flops"] > 0
        assert node.metrics["recompute_flops"] == node.metrics["flops"]
    assert prof.root.metrics["recompute_flops"] == sum(n.metrics["flops"] for n in blocks)


def loss_of_output(out: Any) -> Tensor:
    if not isinstance(out, Tensor):
        out = out[0]
    loss: Tensor = out.sum()
    return loss


def test_plain_function_recomputation_counts_outside_modules() -> None:
    """A checkpointed plain function: its own ops, run again, are recompute work too
    (counted in the backward of the module whose node unpacked them)."""

    class Fn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: Tensor) -> Tensor:
            return checkpoint(lambda t: self.fc(t) * 3, x, use_reentrant=False)  # type: ignore[no-any-return]

    with early_stop(False):
        prof = ls.profile(Fn(), torch.randn(4, 8, requires_grad=True), backward=True)
    linear = 2 * 4 * 8 * 8 + 4 * 8  # 544 FLOPs
    mul = 4 * 8  # 32, outside any module
    # the recomputation runs when fc's addmm node unpacks its input: the mul, in no
    # module, is that node's backward work, and recompute work as well
    assert prof.node("fc").self_metrics["recompute_flops"] == linear + mul == 576
    assert prof.root.metrics["recompute_flops"] == 576
    assert prof.root.metrics["flops"] == 576  # with early stop off: all of the forward
