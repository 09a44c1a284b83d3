"""Gradient shapes per module (``grad_inputs``, ``grad_outputs``), in the profile, the
views, CSV and JSON; the hooks that record them leave the user's tensors as they were."""

from __future__ import annotations

import json

import torch
from torch import nn

import layerscope as ls
from layerscope.profile import TensorSpec, ValueSpec


class TwoHeads(nn.Module):
    """Returns a tuple; only the first output reaches the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.a = nn.Linear(8, 2)
        self.b = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.a(h), self.b(h)


def spec(path: str, *shape: int) -> TensorSpec:
    return TensorSpec(path, shape, "float32", "cpu")


def test_gradient_shapes_of_each_module() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4, requires_grad=True)
    prof = ls.profile(model, x, backward=True)
    grads = {n.path: (n.grad_inputs, n.grad_outputs) for n in prof.nodes()}
    # every activation is 3 rows; its gradient has its shape
    assert grads[""] == ([(spec("0", 3, 4),)], [(spec("", 3, 2),)])
    assert grads["0"] == ([(spec("0", 3, 4),)], [(spec("", 3, 8),)])
    assert grads["1"] == ([(spec("0", 3, 8),)], [(spec("", 3, 8),)])
    assert grads["2"] == ([(spec("0", 3, 8),)], [(spec("", 3, 2),)])
    assert x._backward_hooks is None  # no hook (nor hook dict) left behind


def test_an_output_without_a_gradient_is_none() -> None:
    torch.manual_seed(0)
    model = TwoHeads()
    prof = ls.profile(model, torch.randn(2, 4), backward=True, loss_fn=lambda out: out[0].sum())
    assert prof.root.grad_outputs == [(spec("0", 2, 2), ValueSpec("1", "None"))]
    assert prof.node("b").grad_outputs == []  # no gradient reached it at all
    assert prof.node("body").grad_outputs == [(spec("", 2, 8),)]


def test_no_backward_no_gradient_shapes() -> None:
    prof = ls.profile(nn.Linear(4, 2), torch.randn(2, 4))
    assert prof.root.grad_inputs == [] and prof.root.grad_outputs == []
    assert "grad_inputs" not in prof.to_dict()["root"]


def test_views_csv_and_json_show_them() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    prof = ls.profile(model, torch.randn(3, 4), backward=True)
    text = prof.render(columns=["grad_input_shape", "grad_output_shape"], width=100)
    assert "Grad in" in text and "Grad out" in text and "[3, 8]" in text
    csv = prof.to_csv()
    assert csv is not None and "grad_output_shape" in csv.splitlines()[0]
    again = ls.Profile.from_dict(json.loads(prof.to_json()))
    assert again == prof and again.node("1").grad_inputs == [(spec("0", 3, 8),)]
