"""``input_bytes``: the bytes of the tensors passed to a module's forward, per call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import layerscope as ls
import layerscope.metricspec as ms


@pytest.mark.parametrize(("dtype", "expected"), [(torch.float32, 80), (torch.float16, 40)])
def test_linear_input_bytes(dtype: torch.dtype, expected: int) -> None:
    model = nn.Linear(5, 3).to(dtype)
    prof = ls.profile(model, torch.randn(4, 5, dtype=dtype), memory=True)
    # [4, 5] = 20 elements x 4 bytes (float32) = 80, x 2 bytes (float16) = 40
    assert prof.root.metrics[ms.INPUT_BYTES] == expected
    assert prof.root.self_metrics[ms.INPUT_BYTES] == expected


def test_meta_input_bytes() -> None:
    prof = ls.profile(nn.Linear(5, 3).to("meta"), input_shape=(4, 5), memory=True)
    assert prof.root.metrics[ms.INPUT_BYTES] == 4 * 5 * 4  # 80


class _Pair(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, **kw: torch.Tensor) -> torch.Tensor:
        return a.sum() + b.sum() + sum(v.sum() for v in kw.values())


class _Caller(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.same = _Pair()
        self.halves = _Pair()
        self.transposed = _Pair()
        self.nested = _Pair()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.same(x, x)  # one tensor twice
        out = out + self.halves(x[:2], x[2:])  # two views, disjoint
        out = out + self.transposed(x, x.t())  # two views of the same elements
        y = torch.ones(3, dtype=torch.float64)
        last: torch.Tensor = self.nested(x, y, extra=x)  # a keyword argument, x again
        return out + last


def test_views_and_aliases() -> None:
    x = torch.randn(4, 6)  # 24 elements, 96 bytes
    prof = ls.profile(_Caller(), x, memory=True)
    got = {n.path: n.metrics[ms.INPUT_BYTES] for n in prof.root.walk()}
    assert got == {
        "": 96,
        "same": 96,  # x passed twice: counted once
        "halves": 48 + 48,  # x[:2] and x[2:]: 12 elements each, 48 bytes each
        "transposed": 96 + 96,  # x and x.t(): other strides, so counted each
        "nested": 96 + 3 * 8,  # x (twice, once as a keyword) + 3 float64 = 120
    }


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first: torch.Tensor = self.lin(x)
        out: torch.Tensor = self.lin(first[:1])
        return out


def test_largest_call_and_not_summed_into_parents(tmp_path: Path) -> None:
    prof = ls.profile(_Twice(), torch.randn(3, 4), memory=True)
    lin = prof.node("lin")
    assert lin.calls == 2
    # calls on [3, 4] (48 bytes) and [1, 4] (16 bytes): the largest, 48
    assert lin.metrics[ms.INPUT_BYTES] == lin.self_metrics[ms.INPUT_BYTES] == 48
    assert prof.root.metrics[ms.INPUT_BYTES] == 48  # the root's own input, not a sum
    prof.self_check()
    path = tmp_path / "p.json"
    prof.save(path)
    loaded = ls.load(path)
    assert loaded.node("lin").metrics[ms.INPUT_BYTES] == 48


def test_not_measured_without_memory_and_absent_where_not_called() -> None:
    model = nn.ModuleDict({"a": nn.Linear(2, 2), "unused": nn.Linear(2, 2)})

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.d["a"](x)
            return out

    x = torch.randn(1, 2)
    assert ms.INPUT_BYTES not in ls.profile(Wrap(), x).root.metrics
    prof = ls.profile(Wrap(), x, memory=True)
    assert prof.node("d.a").metrics[ms.INPUT_BYTES] == 8  # 2 float32
    assert ms.INPUT_BYTES not in prof.node("d.unused").metrics
    assert ms.INPUT_BYTES not in prof.node("d").metrics  # a ModuleDict is never called


def test_folded_siblings_keep_the_largest_and_the_column() -> None:
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(3)))
    prof = ls.profile(model, torch.randn(2, 4), memory=True)
    text = prof.render(width=80, columns=["input_bytes", "output_bytes"], pct=False)
    # each Linear takes [2, 4] float32 = 32 bytes; Out is additive: 3 x 32 = 96 in the
    # folded row, the Sequential's own 32 on top; In is not, so the folded row keeps 32
    # and the Total row leaves it blank
    assert text.splitlines()[:6] == [
        "Module                   In     Out",
        "───────────────────────────────────",
        "Sequential             32 B   128 B",
        "└─ (1) 0–2 Linear ×3   32 B    96 B",
        "",
        "Total                         128 B",
    ]
