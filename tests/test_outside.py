"""Work done while no call of the profiled module runs goes to ``prof.outside``, not the
root: the loss of ``ls.profile(backward=True)``, the user's code in a Profiler block, and
everything outside a profiled submodule's calls. Gradients accumulated into ``.grad``
are charged to the module owning the parameter."""

from __future__ import annotations

import json

import torch
from torch import nn

import layerscope as ls


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))


def test_profiler_on_a_submodule_counts_only_its_calls() -> None:
    model = mlp()
    head = model[2]
    with ls.Profiler(head) as p:
        model(torch.randn(4, 512)).sum().backward()
    prof = p.profile
    m = prof.root.metrics
    assert prof.root.calls == 1
    assert m["macs"] == 4 * 64 * 10  # 2,560: the head's own matmul, nothing else
    # backward: grad input 4x10 @ 10x64 and grad weight 10x4 @ 4x64, 2,560 MACs each
    assert m["backward_macs"] == 2 * 2_560
    # the first Linear ran outside the head: its 4*512*64 MACs, forward and backward
    # (grad weight only: its input needs no grad)
    assert prof.outside["macs"] == 4 * 512 * 64
    assert prof.outside["backward_macs"] == 4 * 512 * 64


def test_the_loss_is_outside_and_the_model_numbers_do_not_change() -> None:
    model, x = mlp(), torch.randn(4, 512)
    plain = ls.profile(model, x)
    with_backward = ls.profile(model, x, backward=True)
    for key in ("macs", "flops"):
        for a, b in zip(plain.nodes(), with_backward.nodes(), strict=True):
            assert a.metrics[key] == b.metrics[key], (a.path, key)
            assert a.self_metrics[key] == b.self_metrics[key], (a.path, key)
    # the default loss sums the 4x10 output: a reduction of 40 values is 40 FLOPs
    # (docs/flops.md); its backward (expand) does no arithmetic. Bytes (docs/roofline.md):
    # the sum reads 40 float32 values (160 B) and writes the 4-B loss; backward() seeds
    # the loss's gradient with ones_like, which writes 4 B (it reads only the loss's
    # shape); the backward's expand is a view (0 B). 160 + 4 + 4 = 168
    assert with_backward.outside == {"flops": 40, "bytes_accessed": 168}
    assert plain.outside == {}
    # the root's inclusive totals are its children's: nothing of its own here
    assert with_backward.root.self_metrics["flops"] == 0
    assert with_backward.root.metrics["flops"] == sum(
        c.metrics["flops"] for c in with_backward.root.children
    )
    with_backward.self_check()


def test_code_around_the_calls_in_a_profiler_block_is_outside() -> None:
    model = mlp()
    x = torch.randn(4, 512)
    with ls.Profiler(model) as p:
        y = x * 2  # 4*512 = 2,048 FLOPs before the model runs
        out = model(y)
        (out.softmax(-1) ** 2).mean().backward()
    prof = p.profile
    inside = ls.profile(model, y)
    assert prof.root.metrics["flops"] == inside.root.metrics["flops"]
    assert prof.outside["flops"] > 2_048  # the mul, the softmax, the square and the mean


def test_accumulated_gradients_are_charged_to_the_parameter_owner() -> None:
    model = mlp()
    x = torch.randn(4, 512)
    with ls.Profiler(model) as p:
        model(x).sum().backward()  # the first backward stores .grad: no arithmetic
        model(x).sum().backward()  # the second adds into it: one add per element
    first = model[0]
    assert isinstance(first, nn.Linear)
    n = first.weight.numel() + first.bias.numel()  # 512*64 + 64 = 32,832
    model.zero_grad(set_to_none=True)
    with ls.Profiler(model) as once:
        model(x).sum().backward()
    accumulate = (
        p.profile.node("0").self_metrics["backward_flops"]
        - 2 * once.profile.node("0").self_metrics["backward_flops"]
    )
    assert accumulate == n
    assert p.profile.root.self_metrics.get("backward_flops", 0) == 0


def test_outside_round_trips_through_json_and_shows_in_the_footer() -> None:
    prof = ls.profile(mlp(), torch.randn(4, 512), backward=True)
    data = json.loads(prof.to_json())
    assert data["outside"] == {"flops": 40, "bytes_accessed": 168}
    again = ls.Profile.from_dict(data)
    assert again.outside == {"flops": 40, "bytes_accessed": 168} and again == prof
    text = prof.render(width=100)
    assert (
        "Outside the model (the loss, code around the calls; not in the totals): FLOPs 40" in text
    )
