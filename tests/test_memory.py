"""Memory accounting against ground truth derived by hand: what autograd saves, what lives.

Every figure below is worked out from what the aten ops allocate and what their autograd
formulas save (``tools/autograd/derivatives.yaml``), with the arithmetic written beside
it; no number is copied from the tool's own output. Every profiling test also checks that
the model is left exactly as found (``ModelSnapshot``).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope import examples
from layerscope.errors import InvalidInputError, ModelError
from layerscope.examples import TinyGPT
from layerscope.metrics.memory import MemoryObserver
from layerscope.metrics.memory.peaks import NestedPeaks
from layerscope.metrics.memory.storages import StorageTable
from layerscope.planning.footprint import record_training_footprint, training_footprint
from layerscope.profile import Profile
from layerscope.session import max_batch_size

F32 = 4  # bytes per float32 element


def mlp(inplace: bool = False) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(inplace=inplace), nn.Linear(256, 10))


def run(model: nn.Module, *args: Any, **kwargs: Any) -> Profile:
    """``ls.profile`` with a fresh MemoryObserver; asserts the model is left untouched."""
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, *args, observers=[MemoryObserver()], **kwargs)
    snap.assert_unchanged(model)
    prof.self_check()
    return prof


def table(prof: Profile, key: str, inclusive: bool = False) -> dict[str, int]:
    return {n.path: int((n.metrics if inclusive else n.self_metrics)[key]) for n in prof.nodes()}


# ---- storage identity (what every figure relies on) ----------------------------------


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_storage_object_is_stable_and_dies_with_the_last_tensor(device: str) -> None:
    x = torch.empty(4, 4, device=device)
    s = x.untyped_storage()
    # the same Python object for every view, so it can key a table even on meta,
    # where data_ptr() is 0 for every storage
    assert x.t().untyped_storage() is s and x[1].untyped_storage() is s
    if device == "meta":
        assert s.data_ptr() == 0 == torch.empty(3, device="meta").untyped_storage().data_ptr()
    freed: list[int] = []
    weakref.finalize(s, freed.append, 1)
    view = x[0]
    del s, x
    assert freed == []  # the view keeps the whole storage alive
    del view
    assert freed == [1]  # the weak reference fires at the real free


def test_storage_table_counts_births_deaths_and_growth() -> None:
    table_ = StorageTable()
    a = torch.empty(10)  # 40 B
    table_.add(a.untyped_storage(), born=True)
    b = torch.empty(5)
    table_.add_baseline(b, param=False)  # baseline: never counted
    assert table_.read() == (40, 40)
    a.untyped_storage().resize_(80)
    ref = table_.get(a.untyped_storage())
    assert ref is not None and table_.grew(ref, a.untyped_storage()) == 40
    assert table_.read() == (80, 80)
    del a
    assert table_.read() == (0, 80) and len(table_) == 1
    table_.clear()
    assert len(table_) == 0


# ---- nested peaks with a resettable counter ------------------------------------------


class FakeAllocator:
    """An allocator with CUDA's statistics: current, a peak since reset, and a reset."""

    def __init__(self) -> None:
        self.current = 0
        self.top = 0

    def alloc(self, n: int) -> None:
        self.current += n
        self.top = max(self.top, self.current)

    def free(self, n: int) -> None:
        self.current -= n

    def read(self) -> tuple[int, int]:
        return self.current, self.top

    def reset_peak(self) -> None:
        self.top = self.current


def test_nested_peaks_keep_the_parent_maximum_across_child_resets() -> None:
    src = FakeAllocator()
    peaks = NestedPeaks(src)
    src.alloc(1000)  # before anything: the baseline
    parent = peaks.open()
    child1 = peaks.open()
    src.alloc(300)
    src.free(300)  # a transient of 300 inside child1
    assert peaks.close(child1) == 300
    child2 = peaks.open()  # resets the counter: child1's 300 must survive in the parent
    src.alloc(100)
    assert peaks.close(child2) == 100
    src.alloc(50)  # parent now at 150 above entry, below its 300 peak
    assert peaks.close(parent) == 300
    # scopes need not close in LIFO order (a backward pass spanning module scopes)
    outer = peaks.open()
    inner = peaks.open()
    src.alloc(70)
    assert peaks.close(outer) == 70
    src.alloc(30)
    assert peaks.close(inner) == 100


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("afoc"), st.integers(0, 1000)), max_size=60))
def test_nested_peaks_equal_a_brute_force_maximum(steps: list[tuple[str, int]]) -> None:
    """Any interleaving of allocations, frees and scopes opening and closing (in any
    order): each scope's peak is the max of the whole allocation history since it opened."""
    src = FakeAllocator()
    peaks = NestedPeaks(src)
    history = [0]  # every value ``current`` took
    open_: list[tuple[Any, int]] = []  # (scope, index into history at its opening)
    for op, n in steps:
        if op == "a":
            src.alloc(n)
        elif op == "f":
            src.free(min(n, src.current))
        elif op == "o":
            open_.append((peaks.open(), len(history) - 1))
        elif open_:
            scope, start = open_.pop(n % len(open_))
            assert peaks.close(scope) == max(history[start:]) - history[start]
        history.append(src.current)


# ---- the hand-derived MLP --------------------------------------------------------------


def test_mlp_saved_activations_outputs_and_peaks_by_hand() -> None:
    model, x = mlp(), torch.randn(32, 128)  # x does not require grad
    prof = run(model, x, backward=True)
    # What autograd saves (derivatives.yaml), batch 32, float32:
    # fc1 = addmm(b1, x, W1.t()): mat1 (x) is saved because mat2 (the weight) needs a
    #   gradient; mat2 would be saved only if mat1 needed one, and x does not.
    #   x: 32*128*4 = 16,384 B, at fc1 (the caller's tensor, still memory the graph holds)
    # relu: threshold_backward needs its result: 32*256*4 = 32,768 B, at relu
    # fc2 = addmm(b2, h, W2.t()): saves mat1 = h, relu's output (same storage: counted
    #   once, at relu, which saved it first) and mat2 = W2.t() (a view of a parameter:
    #   never an activation) -> 0 B
    assert table(prof, "activation_bytes") == {"": 0, "0": 16_384, "1": 32_768, "2": 0}
    assert prof.root.metrics["activation_bytes"] == 16_384 + 32_768 == 49_152
    assert prof.memory["activation_bytes"] == 49_152
    # outputs: fc1 32*256*4, relu 32*256*4, fc2 32*10*4, and the root's own output (the
    # same tensor as fc2's, counted again: it is the root's output too)
    assert table(prof, "output_bytes") == {"": 1_280, "0": 32_768, "1": 32_768, "2": 1_280}
    assert prof.root.metrics["output_bytes"] == 1_280 + 32_768 + 32_768 + 1_280 == 68_096
    # Simulated allocator (x, weights: baseline). fc1 allocates its output (32,768).
    # relu allocates its own while fc1's is still alive: 65,536 live. fc1's output dies
    # when relu returns (nothing saved it); fc2 allocates 1,280 on top of relu's 32,768.
    assert table(prof, "peak_bytes") == {"": 65_536, "0": 32_768, "1": 32_768, "2": 1_280}
    for n in prof.nodes():
        assert n.metrics["peak_bytes"] == n.self_metrics["peak_bytes"]  # not additive
    assert prof.memory["forward_peak_bytes"] == 65_536
    # live when forward returns: what autograd saved (relu's output) + the output
    assert prof.memory["forward_end_bytes"] == 32_768 + 1_280 == 34_048
    # Backward. At its start: 34,048 + loss scalar (4) + the ones_like seed (4) = 34,056.
    # fc2: grad_h = g @ W2 (32,768), grad_W2 (10,256) = 10,240, grad_b2 = 40 -> 77,104;
    # relu: threshold_backward (32,768) -> 109,872, then grad_h and the saved relu output
    # die -> 44,336; fc1: grad_W1 (256,128) = 131,072, grad_b1 = 1,024 -> 176,432 = the
    # peak, 176,432 - 34,056 = 142,376 above the start (no grad_x: x needs none).
    assert prof.memory["backward_peak_bytes"] == 142_376
    assert prof.memory["session_peak_bytes"] == 176_432
    # gradients present at the end: W1 131,072 + b1 1,024 | W2 10,240 + b2 40
    assert table(prof, "grad_bytes") == {"": 0, "0": 132_096, "1": 0, "2": 10_280}
    assert prof.memory["grads"]["0.weight"] == {
        "shape": [256, 128],
        "dtype": "float32",
        "bytes": 131_072,
        "module": "0",
    }
    assert prof.memory["allocator"] == "simulated"


def events(prof: Profile) -> list[tuple[int, str, str, int]]:
    t = prof.memory["timeline"]
    return list(zip(t["op"], t["event"], t["path"], t["bytes"], strict=True))


def test_timeline_of_a_linear_relu_by_hand() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 8), nn.ReLU()), torch.randn(2, 4)
    prof = run(model, x, backward=True)
    timeline = prof.memory["timeline"]
    assert timeline["clock"] == "op" and timeline["allocator"] == "simulated"
    # Clock: aten ops dispatched before the event. Linear = t (a view of W: nothing
    # allocated) + addmm (its 2x8 float32 output: 2*8*4 = 64 B); ReLU = relu (64 B more,
    # while the Linear's output is still held by Sequential's loop variable); it dies
    # when the loop moves on, so the root returns with relu's 64 B live.
    forward = [
        (0, "enter", "", 0),
        (0, "enter", "0", 0),
        (2, "exit", "0", 64),
        (2, "enter", "1", 64),
        (3, "exit", "1", 128),
        (3, "exit", "", 64),
    ]
    assert events(prof)[:6] == forward
    # against the per-module figures: each module's peak is what it added, the root's
    # the highest level of its forward, and the level it returns at is forward_end_bytes
    assert table(prof, "peak_bytes") == {"": 128, "0": 128 - 64, "1": 128 - 64}
    assert table(prof, "output_bytes") == {"": 64, "0": 64, "1": 64}
    assert prof.memory["forward_peak_bytes"] == max(b for *_, b in forward) == 128
    assert prof.memory["forward_end_bytes"] == forward[-1][3] == 64
    # Backward: ops 3 and 4 are the loss (sum) and its seed (ones_like), 4 B each: 72 B.
    # expand (op 5, the sum's backward, a view) runs outside the model, as the loss did;
    # relu's backward (detach, threshold_backward: 2x8 grad_h, 64 B) from op 6; the
    # Linear's from op 8, at 72 + 64 = 136 B. It adds grad_W (8x4, 128 B) and grad_b
    # (8, 32 B), and their AccumulateGrad stays in the Linear, which owns them.
    backward = [e for e in events(prof) if e[1] == "backward"]
    assert backward == [(5, "backward", "<outside>", 72), (6, "backward", "1", 72),
                        (8, "backward", "0", 136)]  # fmt: skip
    assert prof.memory["session_peak_bytes"] == 136 + 128 + 32  # inside the Linear's backward
    # that peak lies between events, so it is one ("peak", in the Linear's backward, after
    # its 12th op); at the end only the two gradients are left: 128 + 32 = 160 B
    assert events(prof)[6:] == [*backward, (12, "peak", "0", 296), (16, "end", "", 160)]
    ops = [e[0] for e in events(prof)]
    assert ops == sorted(ops)


def test_timeline_of_a_module_called_twice_and_in_json() -> None:
    torch.manual_seed(0)
    prof = run(Twice(), torch.randn(4, 8))  # every activation 4*8*4 = 128 B
    # fc (t + addmm) twice, a functional relu after each: on the root, no module events;
    # the relus' highs between two events are "peak" events of the root, and "end" is the
    # level when the session closed (nothing left: no backward keeps r1 or the output)
    assert events(prof) == [
        (0, "enter", "", 0),
        (0, "enter", "fc", 0),
        (2, "exit", "fc", 128),  # h1
        (3, "peak", "", 256),  # h1 + r1, before h1 dies
        (3, "enter", "fc", 128),  # r1
        (5, "exit", "fc", 256),  # r1 + h2
        (6, "peak", "", 384),  # r1 + h2 + r2, the root's peak
        (6, "exit", "", 256),  # r1 (saved) + r2, h2 died
        (6, "end", "", 0),
    ]
    assert prof.root.metrics["peak_bytes"] == 384 == max(e[3] for e in events(prof))
    assert Profile.from_dict(prof.to_dict()).memory["timeline"] == prof.memory["timeline"]


def test_timeline_keeps_a_bounded_number_of_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("layerscope.metrics.memory.timeline.MAX_EVENTS", 4)
    # 9 events: enter/exit of 4 module calls and the end (no peak between two of them)
    prof = run(mlp(), torch.randn(32, 128))
    timeline = prof.memory["timeline"]
    assert len(timeline["op"]) == len(timeline["bytes"]) == 4
    assert timeline["dropped"] == 9 - 4


def test_input_requiring_grad_adds_only_a_parameter_view() -> None:
    model = mlp()
    x = torch.randn(32, 128, requires_grad=True)
    prof = run(model, x)
    # fc1 now also saves mat2 = W1.t() for grad_x: a parameter's storage, not counted
    assert table(prof, "activation_bytes") == {"": 0, "0": 16_384, "1": 32_768, "2": 0}


def test_inplace_relu_allocates_nothing_and_saves_fc1_output() -> None:
    prof = run(mlp(inplace=True), torch.randn(32, 128))
    # relu_ writes into fc1's output and saves that result: the storage fc1 allocated
    # (fc1 itself saved only x), so it counts at relu, the first to save it
    assert table(prof, "activation_bytes") == {"": 0, "0": 16_384, "1": 32_768, "2": 0}
    # in place: relu allocates nothing; the root peaks at fc1's output + fc2's
    assert table(prof, "peak_bytes") == {"": 34_048, "0": 32_768, "1": 0, "2": 1_280}


class SliceSquare(nn.Module):
    """Squares a narrow view of a wide activation: the view keeps the whole storage."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 64)

    def forward(self, x: Tensor) -> Tensor:
        h: Tensor = self.fc(x)  # (4, 64): 1,024 B
        v = h[:, :8]  # a view: (4, 8) = 128 B of it
        return v * v


def test_a_saved_view_counts_its_whole_storage() -> None:
    torch.manual_seed(0)
    prof = run(SliceSquare(), torch.randn(4, 16))
    # mul saves both operands, the view v twice: one storage, 4*64*4 = 1,024 B (not the
    # view's 128 B: the view keeps all of h alive); fc saves x: 4*16*4 = 256 B
    assert table(prof, "activation_bytes") == {"": 1_024, "fc": 256}
    # the slice allocates nothing; v*v allocates 4*8*4 = 128 B on top of h's 1,024
    assert table(prof, "peak_bytes") == {"": 1_024 + 128, "fc": 1_024}


class Twice(nn.Module):
    """One Linear called twice, functional ReLUs on the root."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.fc(torch.relu(self.fc(x))))


def test_a_module_called_twice_sums_bytes_and_takes_the_max_peak() -> None:
    torch.manual_seed(0)
    prof = run(Twice(), torch.randn(4, 8))  # every activation 4*8*4 = 128 B
    fc = prof.node("fc")
    assert fc.calls == 2
    # call 1 saves x (128); call 2 saves r1 = relu(h1), already saved by the root's relu
    assert fc.self_metrics["activation_bytes"] == 128
    assert prof.root.self_metrics["activation_bytes"] == 128 + 128  # r1, r2
    assert fc.self_metrics["output_bytes"] == 2 * 128  # summed over calls
    # each call allocates its 128-B output; h1 dies once relu returns (nobody saved it)
    assert fc.metrics["peak_bytes"] == 128
    # the root peaks in the second relu: r1 (saved) + h2 (its input) + r2 = 384
    assert prof.root.metrics["peak_bytes"] == 384
    assert prof.memory["forward_end_bytes"] == 256  # r1 and r2 (the output)


@pytest.mark.parametrize(
    ("dtype", "device"),
    [(torch.bfloat16, "cpu"), (torch.float16, "meta"), (torch.bfloat16, "meta")],
)
def test_half_precision_halves_every_figure(dtype: torch.dtype, device: str) -> None:
    model = mlp().to(device=device, dtype=dtype)
    prof = run(model, torch.randn(32, 128).to(device=device, dtype=dtype), backward=True)
    assert table(prof, "activation_bytes") == {"": 0, "0": 8_192, "1": 16_384, "2": 0}
    assert table(prof, "output_bytes") == {"": 640, "0": 16_384, "1": 16_384, "2": 640}
    assert table(prof, "peak_bytes") == {"": 32_768, "0": 16_384, "1": 16_384, "2": 640}
    assert table(prof, "grad_bytes") == {"": 0, "0": 66_048, "1": 0, "2": 5_140}
    # the loss and its seed are 2-byte scalars: (88,216 - 17,028) = 142,376 / 2
    assert prof.memory["backward_peak_bytes"] == 71_188


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_nothing_is_saved_without_grad(mode: Callable[[], Any]) -> None:
    model, x = mlp(), torch.randn(32, 128)
    with mode():
        prof = run(model, x)
    assert table(prof, "activation_bytes") == {"": 0, "0": 0, "1": 0, "2": 0}
    # fc1's output and relu's coexist during relu: 65,536; relu's output dies after fc2
    assert prof.memory["forward_peak_bytes"] == 65_536
    assert prof.memory["forward_end_bytes"] == 1_280  # only the output is left
    assert "grad_bytes" not in prof.root.metrics  # no backward, no gradients: absent


def test_meta_model_gives_the_cpu_figures() -> None:
    with torch.device("meta"):
        model = mlp()
    assert all(p.is_meta for p in model.parameters())
    prof = run(model, torch.randn(32, 128, device="meta"), backward=True)
    assert table(prof, "activation_bytes") == {"": 0, "0": 16_384, "1": 32_768, "2": 0}
    assert table(prof, "peak_bytes") == {"": 65_536, "0": 32_768, "1": 32_768, "2": 1_280}
    assert prof.memory["backward_peak_bytes"] == 142_376
    assert prof.root.metrics["grad_bytes"] == 142_376  # grads exist on meta too


# ---- meta against CPU on the built-in examples ---------------------------------------

KEYS = ("activation_bytes", "output_bytes", "peak_bytes", "grad_bytes")


def figures(name: str, device: str, train: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    ex = examples.get(name)
    with torch.device(device):  # built there: .to("meta") would untie tied weights
        model = ex.build()
    model.train(train)
    prof = run(model, ex.example_input().to(device), backward=True)
    per_node = {n.path: tuple(n.metrics.get(k) for k in KEYS) for n in prof.nodes()}
    whole = {k: v for k, v in prof.memory.items() if k.endswith("_bytes")}
    return per_node, whole


@pytest.mark.parametrize(
    ("name", "train"), [("shared_mlp", False), ("shared_mlp", True), ("tiny_resnet", True)]
)
def test_meta_and_cpu_agree_on_examples(name: str, train: bool) -> None:
    assert figures(name, "cpu", train) == figures(name, "meta", train)


@pytest.mark.slow
def test_meta_and_cpu_differ_only_where_kernels_differ() -> None:
    """Device kernels may save other tensors than the meta (reference) ones; see docs."""
    # tiny_resnet in eval: CPU batch_norm returns empty save_mean/save_invstd, the meta
    # kernel returns C floats each (saved, unused): 2*4*C bytes per BatchNorm. Channels:
    # stem 16 + layer1 4x16 + layer2 5x32 = 240 -> 1,920 B more on meta, if torch still
    # differs (a fixed meta kernel gives 0).
    cpu, _ = figures("tiny_resnet", "cpu", False)
    meta, _ = figures("tiny_resnet", "meta", False)
    assert meta[""][0] - cpu[""][0] in (0, 2 * 4 * 240)
    # tiny_gpt and lstm_tagger: CPU runs fused kernels (flash attention for CPU, oneDNN
    # LSTM) that save other tensors than the math decompositions meta runs; outputs and
    # gradients do not depend on the kernel
    for name in ("tiny_gpt", "lstm_tagger"):
        cpu, _ = figures(name, "cpu", False)
        meta, _ = figures(name, "meta", False)
        assert {p: (v[1], v[3]) for p, v in cpu.items()} == {
            p: (v[1], v[3]) for p, v in meta.items()
        }


def test_tied_weight_gradient_counts_once_at_the_common_ancestor() -> None:
    ex = examples.get("tiny_gpt")
    model = ex.build()
    assert isinstance(model, TinyGPT)
    prof = run(model, ex.example_input(), backward=True)
    assert model.lm_head.weight is model.tok_emb.weight  # tied: one tensor, one grad
    nbytes = model.tok_emb.weight.numel() * F32  # 64 x 32 x 4 = 8,192
    assert nbytes == 8_192
    assert prof.node("tok_emb").self_metrics["grad_bytes"] == 0
    assert prof.node("lm_head").self_metrics["grad_bytes"] == 0
    assert prof.root.self_metrics["grad_bytes"] >= nbytes
    assert prof.memory["grads"]["tok_emb.weight"]["module"] == ""
    # every parameter got a gradient: grad bytes == param bytes, node by node
    for n in prof.nodes():
        assert n.metrics["grad_bytes"] == n.metrics["param_bytes"], n.path


# ---- robustness ------------------------------------------------------------------------


class Fail(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        _ = x * 2  # allocates, then the module raises
        raise ValueError("boom")


class Boom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fail = Fail()

    def forward(self, x: Tensor) -> Tensor:
        return self.fail(self.fc(x))  # type: ignore[no-any-return]


def test_exception_mid_forward_keeps_everything_balanced() -> None:
    torch.manual_seed(0)
    model, x = Boom(), torch.randn(4, 8)
    snap = ModelSnapshot.take(model)
    obs = MemoryObserver()
    with pytest.raises(ModelError, match="boom"):
        ls.profile(model, x, observers=[obs])
    snap.assert_unchanged(model)
    assert obs._frames == []
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    # and with a Profiler around the user's own code, the profile is still built
    with pytest.raises(ValueError, match="boom"), ls.Profiler(model, observers=[obs]) as p:
        model(x)
    assert obs._frames == []
    prof = p.profile
    assert prof.node("fc").metrics["peak_bytes"] == 4 * 8 * F32  # its output, 128 B
    assert prof.node("fail").metrics["peak_bytes"] == 4 * 8 * F32  # x*2 before raising
    assert prof.node("fail").metrics["output_bytes"] == 0  # no output: it raised
    snap.assert_unchanged(model)


class ModifiesSaved(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.fc(x).sigmoid()  # sigmoid saves its result ...
        y.mul_(2)  # ... which is then changed in place
        return y


def test_inplace_change_of_a_saved_tensor_still_fails_backward() -> None:
    """Autograd skips its version check for hooked tensors; the observer repeats it."""
    model, x = ModifiesSaved(), torch.randn(2, 4)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        model(x).sum().backward()  # torch's own error, without layerscope
    model.zero_grad(set_to_none=True)
    with pytest.raises(ModelError, match="modified by an inplace operation"):
        run(model, x, backward=True)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 16)

    def forward(self, x: Tensor) -> Tensor:
        h = checkpoint(self.inner, x, use_reentrant=False)
        return self.head(h)  # type: ignore[no-any-return]


def test_activation_checkpointing_hooks_win_inside_their_region() -> None:
    torch.manual_seed(0)
    prof = run(Checkpointed(), torch.randn(4, 16), backward=True)
    # inside checkpoint() its own saved-tensor hooks hold (and later recompute) what
    # autograd saves, so nothing is stored there and nothing is counted
    for path in ("inner.0", "inner.1", "inner.2"):
        assert prof.node(path).self_metrics["activation_bytes"] == 0
    # what the checkpoint keeps for the recomputation, its input x (4*16*4 = 256 B), is
    # the checkpointed module's; head saves its input h (the checkpoint's output), 256 B
    assert prof.node("inner").self_metrics["activation_bytes"] == 256
    assert prof.root.self_metrics["activation_bytes"] == 0
    assert prof.node("head").self_metrics["activation_bytes"] == 256
    assert prof.root.metrics["grad_bytes"] == prof.root.metrics["param_bytes"]


def test_outer_saved_tensor_hooks_keep_working() -> None:
    packed: list[tuple[int, ...]] = []

    def pack(t: Tensor) -> Tensor:
        packed.append(tuple(t.shape))
        return t.detach()

    model, x = mlp(), torch.randn(32, 128)
    snap = ModelSnapshot.take(model)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        prof = ls.profile(model, x, observers=[MemoryObserver()], backward=True)
    snap.assert_unchanged(model)
    assert packed  # the caller's hooks still ran inside the session
    assert prof.root.metrics["activation_bytes"] == 49_152


def test_observer_reused_and_combined_with_flops() -> None:
    model, x = mlp(), torch.randn(32, 128)
    obs = MemoryObserver()
    first = run(model, x)
    snap = ModelSnapshot.take(model)
    again = ls.profile(model, x, observers=[obs])
    again2 = ls.profile(model, x, observers=[obs], count_flops=False)
    snap.assert_unchanged(model)
    for prof in (again, again2):
        for key in KEYS[:3]:
            assert table(prof, key) == table(first, key)
    assert again.root.metrics["macs"] == 32 * 128 * 256 + 32 * 256 * 10


def test_profiler_around_a_training_step() -> None:
    model, x = mlp(), torch.randn(32, 128)
    snap = ModelSnapshot.take(model)
    with ls.Profiler(model, observers=[MemoryObserver()]) as p:
        loss = F.cross_entropy(model(x), torch.zeros(32, dtype=torch.long))
        loss.backward()  # type: ignore[no-untyped-call]
    prof = p.profile
    assert prof.root.metrics["grad_bytes"] == 142_376
    assert prof.memory["forward_peak_bytes"] == 65_536
    assert prof.memory["backward_peak_bytes"] > 0
    model.zero_grad(set_to_none=True)  # the user's own backward set them
    snap.assert_unchanged(model)


def test_json_round_trip_keeps_memory() -> None:
    prof = run(mlp(), torch.randn(32, 128), backward=True)
    back = Profile.from_dict(prof.to_dict())
    assert back.memory["grads"]["2.bias"]["shape"] == [10]
    assert back.root.metrics["peak_bytes"] == 65_536


def test_cuda_requested_without_cuda_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    with pytest.raises(InvalidInputError, match="CUDA is not available"):
        MemoryObserver(cuda=True)


# ---- training footprint and batch size -------------------------------------------------


@pytest.mark.parametrize(
    ("optimizer", "make"),
    [
        ("adamw", lambda ps: torch.optim.AdamW(ps)),
        ("adam", lambda ps: torch.optim.Adam(ps)),
        ("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ],
)
def test_optimizer_state_matches_torch_optim(optimizer: Any, make: Any) -> None:
    model, x = mlp(), torch.randn(32, 128)
    prof = run(model, x, backward=True)
    fp = training_footprint(prof, optimizer)
    # ground truth: the state torch.optim really allocates after one step
    opt = make(model.parameters())
    model(x).sum().backward()
    opt.step()
    real = sum(
        t.numel() * t.element_size()
        for state in opt.state.values()
        for t in state.values()
        if isinstance(t, Tensor)
    )
    assert fp["optimizer_state_bytes"] == real
    # 35,594 params x 4 B = 142,376: Adam 2 states + 4 steps x 4 B; momentum 1; sgd 0
    states = {"adamw": 2 * 142_376 + 16, "adam": 2 * 142_376 + 16}
    assert real == states.get(optimizer, {"sgd_momentum": 142_376, "sgd": 0}.get(optimizer))
    assert fp["grad_bytes"] == prof.root.metrics["grad_bytes"] == 142_376
    assert fp["param_bytes"] == 142_376 and fp["activation_bytes"] == 65_536
    assert fp["total_bytes"] == 142_376 * 2 + real + 65_536


def test_master_weights_for_half_parameters() -> None:
    with torch.device("meta"):
        model = mlp().to(torch.bfloat16)
    prof = run(model, torch.randn(32, 128, device="meta", dtype=torch.bfloat16))
    n = 35_594
    plain = training_footprint(prof, "adamw")
    assert plain["grad_bytes"] == 2 * n and plain["optimizer_state_bytes"] == 2 * 2 * n + 16
    mixed = record_training_footprint(prof, "adamw", master_weights=True)
    # 2 (bf16 weight) + 2 (bf16 grad) + 4 (fp32 master) + 8 (fp32 m, v) = 16 B per param
    assert mixed["master_weight_bytes"] == 4 * n
    assert mixed["optimizer_state_bytes"] == 8 * n + 16
    assert (
        mixed["param_bytes"]
        + mixed["grad_bytes"]
        + mixed["master_weight_bytes"]
        + mixed["optimizer_state_bytes"]
        == 16 * n + 16
    )
    assert prof.memory["training"] is mixed


def test_frozen_parameters_have_no_grads_or_state() -> None:
    model = mlp()
    model[0].requires_grad_(False)  # freeze fc1: 128*256 + 256 = 33,024 params
    prof = run(model, torch.randn(32, 128))
    fp = training_footprint(prof, "adamw")
    assert fp["trainable_params"] == 2_570  # fc2: 256*10 + 10
    assert fp["grad_bytes"] == 2_570 * 4
    assert fp["optimizer_state_bytes"] == 2 * 2_570 * 4 + 2 * 4  # 2 tensors' steps


def test_training_footprint_needs_a_measured_profile() -> None:
    prof = ls.profile(mlp())  # no input: nothing measured
    with pytest.raises(InvalidInputError, match="forward peak"):
        training_footprint(prof)
    with pytest.raises(InvalidInputError) as info:
        training_footprint(prof, "lion", activation_bytes=0)  # type: ignore[arg-type]
    assert str(info.value) == (
        "optimizer must be one of 'sgd', 'sgd_momentum', 'adam', 'adamw', got 'lion'"
    )


def test_max_batch_size_on_meta_by_hand() -> None:
    with torch.device("meta"):
        model = mlp()
    snap = ModelSnapshot.take(model)
    res = max_batch_size(model, lambda b: (torch.randn(b, 128, device="meta"),), 1_000_000)
    snap.assert_unchanged(model)
    # forward peak per sample: fc1's output and relu's, 2 x 256 x 4 = 2,048 B, no
    # constant part. Fixed: params 142,376 + grads 142,376 + AdamW 284,768 = 569,520.
    # (1,000,000 - 569,520) / 2,048 = 210.2 -> 210
    fit = res["activation_fit"]
    assert fit["per_sample_bytes"] == 2_048 and fit["intercept_bytes"] == 0
    assert fit["affine"] is True and fit["points"] == {"1": 2_048, "2": 4_096, "4": 8_192}
    assert res["fixed_bytes"] == 569_520
    assert res["max_batch"] == 210 and res["verified"] is True
    assert res["breakdown"]["total_bytes"] == 569_520 + 210 * 2_048 == 999_600


class Gram(nn.Module):
    """Builds a batch x batch matrix: memory quadratic in the batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: Tensor) -> Tensor:
        h: Tensor = self.fc(x)
        return (h @ h.t()).sum()


def test_max_batch_size_says_when_not_affine_and_verifies_on_meta() -> None:
    with torch.device("meta"):
        model = Gram()
    budget = 200_000

    def make(b: int) -> tuple[Tensor]:
        return (torch.randn(b, 16, device="meta"),)

    res = max_batch_size(model, make, budget, optimizer="sgd")
    assert res["activation_fit"]["affine"] is False and res["notes"]
    best = res["max_batch"]
    fixed = res["fixed_bytes"]  # params 272 x 4 + grads 272 x 4 = 2,176
    assert fixed == 2 * 272 * 4

    def peak(b: int) -> int:
        prof = ls.profile(model, args=make(b), observers=[MemoryObserver()])
        return int(prof.memory["forward_peak_bytes"])

    assert fixed + peak(best) <= budget < fixed + peak(best + 1)  # the exact largest


def test_max_batch_size_inference_on_cpu_runs_the_model_as_given() -> None:
    model = mlp()
    snap = ModelSnapshot.take(model)
    res = max_batch_size(model, lambda b: (torch.zeros(b, 128),), 500_000, optimizer=None)
    snap.assert_unchanged(model)
    # under no_grad the peak is still fc1's + relu's outputs: 2,048 B per sample;
    # fixed = params only, 142,376: (500,000 - 142,376) / 2,048 = 174.6 -> 174
    assert res["fixed_bytes"] == 142_376
    assert res["max_batch"] == 174 and res["verified"] is False


# ---- CUDA: the caching allocator as ground truth ---------------------------------------


def _warm_cuda() -> None:
    """Create cuBLAS handles and workspaces once, so they do not land in a module's peak."""
    a = torch.randn(32, 128, device="cuda")
    torch.addmm(torch.zeros(256, device="cuda"), a, torch.randn(128, 256, device="cuda"))
    torch.cuda.synchronize()


@pytest.mark.cuda
def test_cuda_allocator_peaks_agree_with_the_simulation() -> None:
    _warm_cuda()
    model, x = mlp().cuda(), torch.randn(32, 128, device="cuda")
    prof = run(model, x)
    assert prof.memory["allocator"] == "cuda"
    sim = table(prof, "simulated_peak_bytes")
    assert sim == {"": 65_536, "0": 32_768, "1": 32_768, "2": 1_280}  # as on CPU
    peak = table(prof, "peak_bytes")
    # The allocator rounds each block up to 512 B: fc2's 1,280-B output takes 1,536.
    # relu is one elementwise kernel: exactly its output.
    assert peak["1"] == 32_768
    # A GEMM may also take a transient cuBLAS(Lt) workspace from the caching allocator
    # (persistent per stream after _warm_cuda in current torch; allow one workspace).
    slack = 32 << 20
    for path, rounded in (("0", 32_768), ("2", 1_536), ("", 65_536)):
        assert rounded <= peak[path] <= rounded + slack, path
    cuda = prof.memory["cuda"]
    assert cuda["forward_end_bytes"] == 32_768 + 1_536
    assert cuda["simulated_forward_end_bytes"] == 32_768 + 1_280
    assert cuda["largest_peak_difference"]["bytes"] >= 0  # the allocator never has less
    # the activation accounting does not depend on the device
    assert table(prof, "activation_bytes") == {"": 0, "0": 16_384, "1": 32_768, "2": 0}


class TransientThenSmall(nn.Module):
    """A first child with a large transient, then a second child that allocates little."""

    def __init__(self) -> None:
        super().__init__()
        self.big = Transient(1 << 20)  # 4 MiB transient
        self.small = Transient(1 << 10)  # 4 KiB transient

    def forward(self, x: Tensor) -> Tensor:
        return self.small(self.big(x))  # type: ignore[no-any-return]


class Transient(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: Tensor) -> Tensor:
        tmp = torch.ones(self.n, device=x.device)  # n * 4 B, freed on return
        return x + tmp.sum()


@pytest.mark.cuda
def test_cuda_nested_peaks_survive_child_resets() -> None:
    model, x = TransientThenSmall(), torch.randn(128, device="cuda")
    snap = ModelSnapshot.take(model)
    # the model has no tensors, so CUDA statistics are asked for explicitly
    prof = ls.profile(model, x, observers=[MemoryObserver(cuda=True)])
    snap.assert_unchanged(model)
    big, small = prof.node("big").metrics["peak_bytes"], prof.node("small").metrics["peak_bytes"]
    # big: ones (4 MiB) + sum (512-B block) + output (512-B block); small: 4 KiB + ...
    assert big >= 4 << 20 and small < 1 << 16
    # the root's peak contains big's transient although small's entry reset the counter
    assert prof.root.metrics["peak_bytes"] >= big
    assert prof.memory["cuda"]["simulated_forward_peak_bytes"] >= 4 << 20


@pytest.mark.cuda
def test_cuda_timeline_reads_the_allocator() -> None:
    _warm_cuda()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU()).cuda()
    prof = run(model, torch.randn(2, 4, device="cuda"))
    timeline = prof.memory["timeline"]
    assert timeline["allocator"] == "cuda"
    assert timeline["base_bytes"] >= (8 * 4 + 8 + 2 * 4) * F32  # params and x at least
    got = events(prof)
    # the same events as on CPU (the clock is op order, not time); no "peak" events, the
    # allocator is read at boundaries only
    assert [e[:3] for e in got] == [
        (0, "enter", ""),
        (0, "enter", "0"),
        (2, "exit", "0"),
        (2, "enter", "1"),
        (3, "exit", "1"),
        (3, "exit", ""),
        (3, "end", ""),
    ]
    # the allocator rounds each 64-B output up to a 512-B block; addmm may add a cuBLAS
    # workspace, relu is one elementwise kernel: exactly its block
    assert got[0][3] == got[1][3] == 0
    assert 512 <= got[2][3] <= 512 + (32 << 20)
    assert got[4][3] - got[3][3] == 512
    assert got[5][3] == prof.memory["forward_end_bytes"]  # the root returns at this level


def test_backward_peak_per_module_by_hand() -> None:
    """Each module's backward_peak_bytes: the highest live bytes above the level at the
    start of each of its own backward intervals (its gradient work), max over them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    prof = ls.profile(model, torch.randn(2, 4), backward=True, memory=True)
    own = {n.path: n.self_metrics["backward_peak_bytes"] for n in prof.nodes()}
    # Linear(8, 2): grad input 2x8 (64 B), grad weight 2x8 (64 B), grad bias 2 (8 B)
    # ReLU: threshold_backward's 2x8 grad (64 B)
    # Linear(4, 8): grad weight 8x4 (128 B) and grad bias 8 (32 B); x needs no grad
    assert own == {"": 0, "2": 64 + 64 + 8, "1": 64, "0": 128 + 32}
    # inclusive: the highest over the subtree
    assert prof.root.metrics["backward_peak_bytes"] == 160
    assert prof.node("2").metrics["backward_peak_bytes"] == 136
    # the whole backward pass peaks higher: at its end the four parameter gradients
    # are all live, 64 + 8 + 128 + 32 = 232 B
    assert prof.memory["backward_peak_bytes"] == 232
    again = ls.Profile.from_dict(json.loads(prof.to_json()))
    assert again.node("0").metrics["backward_peak_bytes"] == 160
    assert "Bwd peak" in prof.render(columns=["backward_peak_bytes"], width=100)


class Keyed(nn.Module):
    """``mlp()`` called with its input by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.body = mlp()

    def forward(self, *, x: Tensor) -> Tensor:
        out: Tensor = self.body(x)
        return out


def test_max_batch_size_takes_a_tensor_a_tuple_or_a_dict() -> None:
    """A tensor from make_input is the one input (it was unpacked into batch arguments:
    "forward() takes 2 positional arguments but 3 were given"); a dict is keywords."""
    with torch.device("meta"):
        model, keyed = mlp(), Keyed()
    makers: list[tuple[nn.Module, Any]] = [
        (model, lambda b: torch.randn(b, 128, device="meta")),
        (model, lambda b: [torch.randn(b, 128, device="meta")]),
        (keyed, lambda b: {"x": torch.randn(b, 128, device="meta")}),
    ]
    for m, make_input in makers:
        res = max_batch_size(m, make_input, 1_000_000)
        # as test_max_batch_size_on_meta_by_hand: 2 x 256 x 4 = 2,048 B per sample and
        # 569,520 B fixed; (1,000,000 - 569,520) / 2,048 = 210.2 -> 210
        assert res["activation_fit"]["points"] == {"1": 2_048, "2": 4_096, "4": 8_192}
        assert res["fixed_bytes"] == 569_520
        assert res["max_batch"] == 210 and res["verified"] is True
