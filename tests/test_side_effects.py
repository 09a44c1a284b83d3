"""Profiling leaves the model (and the process) exactly as found."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import layerscope as ls
from helpers.snapshots import ModelSnapshot
from layerscope import examples
from layerscope.examples import EXAMPLES

NAMES = sorted(EXAMPLES)


@pytest.fixture(autouse=True)
def _seeded_rng() -> Iterator[None]:
    """Fixed, non-default global RNG states, so "unchanged" is a meaningful check."""
    torch.manual_seed(1234)
    random.seed(99)
    yield


def build(name: str, mode: str) -> tuple[nn.Module, Tensor]:
    ex = examples.get(name)
    model = ex.build()
    model.train(mode == "train")
    return model, ex.example_input()


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", NAMES)
def test_profile_leaves_model_unchanged(name: str, mode: str) -> None:
    model, x = build(name, mode)
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, x)
    snap.assert_unchanged(model)
    assert prof.root.calls == 1
    assert prof.model["training"] is (mode == "train")


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", NAMES)
def test_profile_leaves_existing_grads_unchanged(name: str, mode: str) -> None:
    model, x = build(name, mode)
    model(x).float().sum().backward()
    # Freeze one parameter and drop one grad, so the flags and None grads are varied.
    first = next(model.parameters())
    first.requires_grad_(False)
    first.grad = None
    snap = ModelSnapshot.take(model)
    ls.profile(model, x)
    snap.assert_unchanged(model)


def test_batchnorm_stats_restored_after_train_mode_forward() -> None:
    model, x = build("tiny_resnet", "train")
    bn = model.get_submodule("layer2.0.bn1")
    assert isinstance(bn, nn.BatchNorm2d)
    assert bn.running_mean is not None and bn.num_batches_tracked is not None
    # A plain train-mode forward does move the stats, so the check below has teeth.
    probe = examples.tiny_resnet().train()
    probe(x)
    probe_bn = probe.get_submodule("layer2.0.bn1")
    assert isinstance(probe_bn, nn.BatchNorm2d)
    assert probe_bn.num_batches_tracked is not None
    assert int(probe_bn.num_batches_tracked) == 1

    mean = bn.running_mean.clone()
    snap = ModelSnapshot.take(model)
    ls.profile(model, x)
    ls.profile(model, x)
    snap.assert_unchanged(model)
    assert int(bn.num_batches_tracked) == 0
    assert torch.equal(bn.running_mean, mean)


def test_dropout_rng_restored() -> None:
    model, x = build("tiny_gpt", "train")
    # Dropout in train mode draws from the global RNG: two plain forwards differ.
    with torch.random.fork_rng(devices=[]):
        assert not torch.equal(model(x), model(x))
    before = torch.get_rng_state()
    ls.profile(model, x)
    assert torch.equal(torch.get_rng_state(), before)
    # So the next random draw is what it would have been without profiling.
    expected = torch.rand(4, generator=torch.Generator().set_state(before))
    assert torch.equal(torch.rand(4), expected)


def test_python_random_state_unchanged() -> None:
    model, x = build("shared_mlp", "train")
    state = random.getstate()
    ls.profile(model, x)
    assert random.getstate() == state


@pytest.mark.parametrize("name", NAMES)
def test_profile_without_input_changes_nothing(name: str) -> None:
    model, _ = build(name, "train")
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model)
    snap.assert_unchanged(model)
    assert all(n.calls == 0 for n in prof.nodes())
    assert prof.model["ran"] is False
    assert prof.root.metrics["params"] == sum(p.numel() for p in model.parameters())


# ---- user hooks ---------------------------------------------------------------------------


class HookCounter:
    def __init__(self) -> None:
        self.pre = 0
        self.post = 0

    def pre_hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        self.pre += 1

    def post_hook(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self.post += 1


HOOKED = {
    # example -> (submodule to hook, how often it runs per forward)
    "tiny_resnet": ("layer1.0.conv1", 1),
    "tiny_gpt": ("blocks.1.attn", 1),
    "lstm_tagger": ("lstm", 1),
    "shared_mlp": ("block", 2),
}


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", NAMES)
def test_user_hooks_kept_and_called_once_per_forward(name: str, mode: str) -> None:
    model, x = build(name, mode)
    path, runs = HOOKED[name]
    sub = model.get_submodule(path)
    on_root, on_sub = HookCounter(), HookCounter()
    handles = [
        model.register_forward_pre_hook(on_root.pre_hook),
        model.register_forward_hook(on_root.post_hook),
        sub.register_forward_pre_hook(on_sub.pre_hook),
        sub.register_forward_hook(on_sub.post_hook),
    ]
    try:
        snap = ModelSnapshot.take(model)
        ls.profile(model, x)
        snap.assert_unchanged(model)
        assert (on_root.pre, on_root.post) == (1, 1)
        assert (on_sub.pre, on_sub.post) == (runs, runs)
        # Still registered and still working after profiling.
        with torch.no_grad():
            model(x)
        assert (on_root.pre, on_root.post) == (2, 2)
        assert (on_sub.pre, on_sub.post) == (2 * runs, 2 * runs)
    finally:
        for h in handles:
            h.remove()


def test_global_user_hook_kept_and_called() -> None:
    model, x = build("shared_mlp", "eval")
    seen: list[str] = []

    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        seen.append(type(module).__name__)

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        snap = ModelSnapshot.take(model)
        ls.profile(model, x)
        snap.assert_unchanged(model)
        # root, block twice (each with Linear and Tanh), head
        assert sorted(seen) == sorted(
            ["SharedMLP", "Sequential", "Linear", "Tanh", "Sequential", "Linear", "Tanh", "Linear"]
        )
    finally:
        handle.remove()


def test_user_hooks_with_kwargs_and_always_call_kept() -> None:
    model, x = build("tiny_resnet", "eval")
    calls: list[str] = []

    def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        calls.append("pre")

    def post(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        calls.append("post")

    fc = model.get_submodule("fc")
    handles = [
        fc.register_forward_pre_hook(pre, with_kwargs=True),
        fc.register_forward_hook(post, with_kwargs=True, always_call=True),
        fc.register_full_backward_hook(lambda m, gi, go: None),
    ]
    try:
        snap = ModelSnapshot.take(model)
        ls.profile(model, x)
        snap.assert_unchanged(model)
        assert calls == ["pre", "post"]
    finally:
        for h in handles:
            h.remove()


# ---- a model that raises ---------------------------------------------------------------


class Boom(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        raise ValueError("boom")


class Exploding(nn.Module):
    """BatchNorm and dropout run (and would change state) before ``body.2`` raises."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), Boom(), nn.Linear(8, 2))
        self.drop = nn.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.body(self.drop(x))
        return out


def exploding() -> Exploding:
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(5)
        return Exploding()


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_profile_error_names_module_and_cleans_up(mode: str) -> None:
    model = exploding().train(mode == "train")
    user = HookCounter()
    handle = model.body.register_forward_hook(user.post_hook)
    x = torch.randn(3, 4)
    try:
        snap = ModelSnapshot.take(model)
        with pytest.raises(ls.ModelError) as info:
            ls.profile(model, x)
        err = info.value
        assert err.path == "body.2"
        assert err.module_type == "Boom"
        assert "body.2" in str(err)
        assert isinstance(err.__cause__, ValueError)
        assert str(err.__cause__) == "boom"
        # BatchNorm stats, dropout RNG, flags, hooks: all as before.
        snap.assert_unchanged(model)
        assert user.post == 0
        # The model still works without layerscope's hooks in the way.
        model.body[2] = nn.Identity()
        model(x)
        assert user.post == 1
    finally:
        handle.remove()


def test_profiler_error_propagates_with_note_and_cleans_up() -> None:
    model = exploding().eval()
    user = HookCounter()
    handle = model.body.register_forward_pre_hook(user.pre_hook)
    x = torch.randn(3, 4)
    try:
        snap = ModelSnapshot.take(model)
        original = ValueError("never raised")
        with pytest.raises(ValueError) as info, ls.Profiler(model):
            try:
                model(x)
            except ValueError as e:
                original = e
                raise
        err = info.value
        assert err is original
        assert type(err) is ValueError
        assert str(err) == "boom"
        notes = getattr(err, "__notes__", [])
        assert any("body.2" in note for note in notes), notes
        # In eval mode with no grads the user's forward changes nothing, so the model
        # must be exactly as before: layerscope's hooks are gone, the user's remain.
        snap.assert_unchanged(model)
        assert user.pre == 1
    finally:
        handle.remove()


def test_profiler_hooks_gone_after_clean_exit() -> None:
    model, x = build("tiny_gpt", "eval")
    snap = ModelSnapshot.take(model)
    with ls.Profiler(model) as p, torch.no_grad():
        model(x)
    snap.assert_unchanged(model)
    assert p.profile.node("blocks.0").calls == 1


def test_profiler_user_training_step_only_changes_what_it_changes() -> None:
    model, x = build("tiny_resnet", "train")
    snap = ModelSnapshot.take(model)
    with ls.Profiler(model):
        model(x).sum().backward()
    # The user's own step moves BatchNorm stats and sets grads (no dropout, so the RNG
    # is untouched); everything else, hooks included, must be as layerscope found it.
    snap.assert_unchanged(model, skip=("state_dict", "buffers", "grads"))
    diffs = snap.differences(model)
    assert any("running_mean" in d for d in diffs)
    assert any(".grad" in d for d in diffs)


# ---- the snapshot itself -----------------------------------------------------------------


def test_snapshot_detects_changes() -> None:
    model, x = build("tiny_resnet", "train")
    snap = ModelSnapshot.take(model)
    snap.assert_unchanged(model)
    model(x)  # BN stats move
    model.eval()
    model.get_submodule("fc").weight.requires_grad_(False)
    setattr(model.get_submodule("fc"), "extra", 1)  # noqa: B010
    handle = model.get_submodule("conv1").register_forward_hook(lambda m, a, o: None)
    torch.rand(1)
    random.random()
    try:
        diffs = snap.differences(model)
    finally:
        handle.remove()
    text = "\n".join(diffs)
    for expected in (
        "state_dict layer1.0.bn1.running_mean: values changed",
        "state_dict bn1.num_batches_tracked: values changed (0 -> 1)",
        "module <root>: training True -> False",
        "parameter fc.weight: requires_grad True -> False",
        "module 'fc': __dict__ keys changed (added ['extra']",
        "module 'conv1' _forward_hooks: keys",
        "torch CPU RNG state changed",
        "Python random state changed",
    ):
        assert expected in text, f"{expected!r} not in:\n{text}"
    with pytest.raises(AssertionError, match="the model or global state changed"):
        snap.assert_unchanged(model)
    with pytest.raises(ValueError, match="unknown categories"):
        snap.differences(model, skip=("nope",))


def test_snapshot_detects_replaced_hook_object_and_meta_tensors() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    handle = model[0].register_forward_hook(lambda m, a, o: None)
    try:
        snap = ModelSnapshot.take(model)
        snap.assert_unchanged(model)  # meta tensors: metadata only, no value compare
        key = handle.id
        model[0]._forward_hooks[key] = lambda m, a, o: None
        assert any("hook object replaced" in d for d in snap.differences(model))
    finally:
        handle.remove()
    model[0].weight = nn.Parameter(torch.empty(4, 4, dtype=torch.float64, device="meta"))
    text = "\n".join(snap.differences(model))
    assert "parameter 0.weight: replaced by a different tensor object" in text
    assert "dtype changed from torch.float32 to torch.float64" in text


# ---- what the model's own forward changes is undone too ----------------------------------


class RebindsBuffers(nn.Module):
    """Assigns new tensors to its buffers in forward instead of updating them in place."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Tensor
        self.last: Tensor
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("last", torch.zeros(4), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        self.count = self.count + 1
        self.last = x.detach()[0].clone()
        return x


class CachesAttribute(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        self.cache = x.detach()
        return x


def test_profile_restores_rebound_buffers() -> None:
    model = RebindsBuffers()
    x = torch.ones(2, 4)
    snap = ModelSnapshot.take(model)
    ls.profile(model, x)
    snap.assert_unchanged(model)


def test_profile_removes_attributes_added_by_forward() -> None:
    model = CachesAttribute()
    x = torch.ones(2, 4)
    snap = ModelSnapshot.take(model)
    ls.profile(model, x)
    snap.assert_unchanged(model)


def test_profile_leaves_lazy_modules_lazy() -> None:
    model = nn.Sequential(nn.LazyLinear(3), nn.ReLU())
    x = torch.ones(2, 5)
    snap = ModelSnapshot.take(model)
    prof = ls.profile(model, x)
    snap.assert_unchanged(model)
    assert type(model[0]) is nn.LazyLinear
    assert isinstance(model[0].weight, nn.parameter.UninitializedParameter)
    assert prof.root.metrics["params"] == 5 * 3 + 3  # counted as initialised by the run: 18
    assert prof.notices == []
    model(x)  # still initialises normally for the user afterwards
    assert type(model[0]) is nn.Linear and model[0].weight.shape == (3, 5)


def test_real_model_under_a_users_fake_tensor_mode() -> None:
    """Real weights, fake input: the restore step must not compare fake copies."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model, x = build("tiny_resnet", "train")
    snap = ModelSnapshot.take(model)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        prof = ls.profile(model, mode.from_tensor(x))
    snap.assert_unchanged(model)
    assert prof.root.outputs[0][0] == ls.TensorSpec("", (2, 10), "float32", "cpu")


@pytest.mark.parametrize(
    "options", [{"backward": True}, {"backward": True, "timing": True}, {"timing": True}]
)
def test_lazy_modules_keep_no_gradients_or_versions(options: dict[str, Any]) -> None:
    """A run materialises lazy parameters: its gradients and version bumps go with them."""
    model = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(2))
    x = torch.randn(4, 5)
    for _ in range(3):
        ls.profile(model, x, **options)
        for p in model.parameters():
            assert isinstance(p, nn.parameter.UninitializedParameter)
            assert p.grad is None and p._version == 0 and p.requires_grad
    model(x).sum().backward()
    # d(sum of a (4, 2) output)/d bias: one per row of the batch, 4 rows; nothing of the
    # three runs before (each left 4 per element: 16 on main).
    last = model[2]
    assert isinstance(last, nn.Linear)
    assert last.bias.grad is not None
    assert last.bias.grad.tolist() == [4.0, 4.0]


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode])
def test_lazy_timing_under_no_grad_keeps_materialised_gradients(grad_mode: Any) -> None:
    """Existing gradients of a model with lazy parts stay (same objects, same values)."""
    model = nn.Sequential(nn.Linear(5, 8), nn.LazyLinear(2))
    x = torch.arange(20.0).reshape(4, 5)
    first = model[0]
    assert isinstance(first, nn.Linear)
    model[0](x).sum().backward()
    grad = first.weight.grad
    assert grad is not None
    # d(sum of x @ W.T)/dW: every row is x's column sums, 0+5+10+15 = 30, then 34, ...
    assert grad.tolist() == [[30.0, 34.0, 38.0, 42.0, 46.0]] * 8
    before = grad.clone()
    with grad_mode():
        ls.profile(model, x, timing=True)
    assert first.weight.grad is grad and torch.equal(grad, before)


@pytest.mark.parametrize(
    "options",
    [{}, {"backward": True}, {"timing": True}, {"memory": True, "numerics": "record"}],
)
def test_profile_between_a_users_forward_and_backward(options: dict[str, Any]) -> None:
    """The user's pending graph saved the BatchNorm's running statistics: putting them back
    must not make that graph see them as modified in place."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).train()
    twin = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).train()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(16, 4)
    bn = model[1]
    assert isinstance(bn, nn.BatchNorm1d) and bn.running_mean is not None
    out = model(x)
    mean, version = bn.running_mean.clone(), bn.running_mean._version
    ls.profile(model, x, **options)
    assert torch.equal(bn.running_mean, mean) and bn.running_mean._version == version
    out.sum().backward()  # raised "modified by an inplace operation" on main
    twin(x).sum().backward()  # the same step with no profile in between
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        assert torch.equal(p.grad, q.grad)


def test_embedding_max_norm_rows_put_back() -> None:
    """``max_norm`` renormalises the looked-up rows of the weight in place."""
    emb = nn.Embedding(10, 4, max_norm=1.0)
    with torch.no_grad():
        emb.weight.fill_(3.0)  # each row's norm is sqrt(4 * 9) = 6 > 1
    version = emb.weight._version
    ids = torch.tensor([1, 2, 3])
    prof = ls.profile(emb, ids, timing=True)
    assert emb.weight.eq(3.0).all() and emb.weight._version == version
    assert prof.notices == []
    # The user's own forward still renormalises: rows 1-3 to norm 1 (0.5 each).
    emb(ids)
    assert torch.allclose(emb.weight[1:4], torch.full((3, 4), 0.5))
    assert emb.weight[0].eq(3.0).all()


def test_a_sparse_gradient_is_put_back_and_the_rest_with_it() -> None:
    """A sparse embedding's gradient from an earlier step (autograd adds the next one to
    it in place) and the dense gradients beside it read back as they were."""
    embed, linear = nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1)
    model = nn.Sequential(embed, linear)
    ids = torch.randint(0, 10, (2, 3))
    model(ids).sum().backward()
    sparse, dense = embed.weight.grad, linear.weight.grad
    assert sparse is not None and sparse.is_sparse and dense is not None
    before = (sparse.to_dense().clone(), dense.clone())
    ls.profile(model, ids, backward=True)
    assert embed.weight.grad is sparse and linear.weight.grad is dense
    assert torch.equal(sparse.to_dense(), before[0]) and torch.equal(dense, before[1])
