"""Storage records (``profile.memory["storages"]``) and the what-if they allow:
``checkpointed_activation_bytes(prof, path)``, the model's ``activation_bytes`` if the
module at ``path`` alone ran under ``checkpoint(..., use_reentrant=False)``.

Ground truth is a real run: the same model, with that one module's forward wrapped in
``torch.utils.checkpoint.checkpoint``, profiled again (the checkpoint's held inputs count
as activations, ``test_checkpointing.py``). The what-if reads only a JSON-round-tripped
profile of the plain model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import layerscope as ls
from helpers.models import with_checkpoint
from layerscope.analysis.whatif import checkpointed_activation_bytes, recompute_flops
from layerscope.errors import InvalidInputError

D, HEADS, T, B = 16, 2, 6, 2


class Attention(nn.Module):
    """Hand-written causal self-attention: qkv projection, softmax, output projection."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // HEADS)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        weights = self.drop(scores.masked_fill(~mask, float("-inf")).softmax(dim=-1))
        y = (weights @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)  # type: ignore[no-any-return]


class MHA(nn.Module):
    """``nn.MultiheadAttention`` as self-attention (its ``out_proj`` is never called)."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(D, HEADS, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.mha(x, x, x, need_weights=False)[0]  # type: ignore[no-any-return]


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln1(x)), then + mlp(ln2(.))."""

    def __init__(self, attn: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = attn()
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))  # type: ignore[no-any-return]


def block(kind: str) -> nn.Module:
    torch.manual_seed(0)
    return Block(Attention if kind == "hand" else MHA).train()


def measure(model: nn.Module) -> ls.Profile:
    torch.manual_seed(1)
    x = torch.randn(B, T, D)
    return ls.profile(model, x, backward=True, memory=True)


@pytest.mark.parametrize("kind", ["hand", "mha"])
def test_checkpoint_what_if_matches_real_runs(kind: str, tmp_path: Path) -> None:
    model = block(kind)
    plain = measure(model)
    plain.save(tmp_path / "p.json")
    loaded = ls.load(tmp_path / "p.json")
    assert loaded.memory["storages"] == plain.memory["storages"]
    full = plain.root.metrics["activation_bytes"]
    # each module's own activation_bytes: its rows as first saver, parameters left out
    table = plain.memory["storages"]
    own = dict.fromkeys(table["paths"], 0)
    for nbytes, savers, _, _, param in table["rows"]:
        if savers and not param:
            own[table["paths"][savers[0]]] += nbytes
    for node in plain.nodes():
        assert own.get(node.path, 0) == node.self_metrics["activation_bytes"], node.path
    figures = {}
    for node in loaded.nodes():
        if node.path == "attn.mha":
            continue  # no real run possible: see below
        ran = measure(with_checkpoint(model, node.path))
        real = ran.root.metrics["activation_bytes"]
        figures[node.path] = real
        # the forward's calls only: each module that ran takes one tensor, on one storage
        # (a recomputation's calls, in the backward, add no rows)
        table = ran.memory["storages"]
        for other in ran.nodes():
            index = table["paths"].index(other.path) if other.path in table["paths"] else -1
            rows = [r for r in table["rows"] if index in r[2]]
            assert len(rows) == (1 if other.calls else 0), (node.path, other.path)
        assert checkpointed_activation_bytes(loaded, node.path) == real, node.path
    if kind == "mha":
        # ``nn.MultiheadAttention`` itself cannot be checkpointed under any saved-tensor
        # hooks (layerscope's, or ``lambda t: t`` alone): its self-attention path tests
        # ``query is key``, and the recomputation gets the checkpoint's inputs back as
        # three distinct tensors from autograd's unpacking, takes the other path and
        # torch raises CheckpointError. Its figure equals its parent's: the same one
        # input x and the same saved storages (``attn`` runs no op of its own).
        assert checkpointed_activation_bytes(loaded, "attn.mha") == figures["attn"]
    # the what-if is not the plain figure everywhere: checkpointing saves memory
    assert figures["mlp"] < full and figures[""] < full
    # the whole block checkpointed keeps only its input x: B*T*D floats = 2*6*16*4 B
    assert figures[""] == B * T * D * 4


@pytest.mark.parametrize(
    "path", [pytest.param("", marks=pytest.mark.slow), "h.0", "h.0.attn", "h.0.mlp", "h.1.ln_2"]
)
def test_checkpoint_what_if_on_gpt2(path: str, tmp_path: Path) -> None:
    """transformers' GPT-2 (random weights, 2 layers): the same equality."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False
    )
    model = transformers.GPT2Model(config).train()
    ids = torch.randint(0, 64, (2, 8))
    ls.profile(model, ids, backward=True, memory=True).save(tmp_path / "p.json")
    figure = checkpointed_activation_bytes(ls.load(tmp_path / "p.json"), path)
    torch.manual_seed(1)
    real = ls.profile(with_checkpoint(model, path), ids, backward=True, memory=True)
    assert figure == real.root.metrics["activation_bytes"]
    if path == "":  # only the input ids are kept: 2 x 8 int64 = 128 B
        assert figure == 2 * 8 * 8


def test_table_rows_by_hand() -> None:
    """LayerNorm -> Linear(8, 16) on a (4, 8) input: every row derived by hand."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16))
    prof = ls.profile(model, torch.randn(4, 8), backward=True, memory=True)
    table = prof.memory["storages"]
    assert table["paths"] == ["", "0", "1"]
    assert table["rows"] == [
        [4 * 8 * 4, [1], [0, 1], [], False],  # x: input of root and "0", saved by LayerNorm
        [8 * 4, [1], [], [], True],  # LayerNorm's weight, saved (a parameter)
        [8 * 4, [1], [], [], True],  # its bias
        [4 * 4, [1], [], [], False],  # mean, one per row of x
        [4 * 4, [1], [], [], False],  # rstd
        [4 * 8 * 4, [2], [2], [1], False],  # LayerNorm's output: Linear's input, saved
        [16 * 8 * 4, [2], [], [], True],  # W.t(), a view of the Linear's weight
    ]
    assert table["dropped"] is False
    # activation_bytes counts each non-parameter row once, at its first saver
    assert prof.root.metrics["activation_bytes"] == 128 + 16 + 16 + 128
    # checkpointing "1" keeps its input (saved anyway): nothing changes; "0" drops
    # mean and rstd but keeps x, its input
    assert checkpointed_activation_bytes(prof, "1") == 288
    assert checkpointed_activation_bytes(prof, "0") == 128 + 128


def test_without_records() -> None:
    model = nn.Linear(4, 4)
    prof = ls.profile(model, torch.randn(2, 4))
    assert "storages" not in prof.memory
    with pytest.raises(InvalidInputError, match="no storage records"):
        checkpointed_activation_bytes(prof, "")
    mem = ls.profile(model, torch.randn(2, 4), backward=True, memory=True)
    with pytest.raises(KeyError, match="no module with path 'nope'"):
        checkpointed_activation_bytes(mem, "nope")


def test_over_the_cap_the_table_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("layerscope.metrics.memory.records.MAX_ROWS", 3)
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16))
    prof = ls.profile(model, torch.randn(4, 8), backward=True, memory=True)
    # 7 rows (test_table_rows_by_hand) > 3: none kept, the table says it was dropped
    assert prof.memory["storages"] == {"paths": [], "rows": [], "dropped": True}
    assert any("memory['storages'] not kept" in n for n in prof.notices)
    with pytest.raises(InvalidInputError, match="not kept"):
        checkpointed_activation_bytes(prof, "0")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            [128, [3], [], [], False],  # paths has 3 entries: indices 0, 1, 2
            "$.memory.storages.rows[0][1][0]: expected an index into 'paths' (an integer "
            "below 3), got the integer 3",
        ),
        (
            [128, [1], [], []],
            "$.memory.storages.rows[0]: expected an array of 5 items, got an array of 4 items",
        ),
        (
            [-1, [1], [], [], False],
            "$.memory.storages.rows[0][0]: expected an integer >= 0, got the integer -1",
        ),
    ],
)
def test_malformed_records_are_refused_at_load(
    row: list[Any], message: str, tmp_path: Path
) -> None:
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16))
    data = ls.profile(model, torch.randn(4, 8), backward=True, memory=True).to_dict()
    data["memory"]["storages"]["rows"][0] = row
    file = tmp_path / "p.json"
    file.write_text(json.dumps(data))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == f"{file}: {message}"


def test_meta_analysis_keeps_the_same_table() -> None:
    """On ``meta`` (a model too large for the machine) the records are those of CPU."""
    model = block("hand")
    meta = ls.profile(ls.to_meta(model), input_shape=(B, T, D), backward=True, memory=True)
    assert meta.memory["storages"] == measure(model).memory["storages"]
    real = measure(with_checkpoint(model, "attn")).root.metrics["activation_bytes"]
    assert checkpointed_activation_bytes(meta, "attn") == real


@pytest.mark.parametrize(
    "paths",
    [("0",), ("0", "2"), ("0", "1", "2"), ("0.attn", "1.mlp", "2.ln1"), ("1.attn.qkv", "2")],
)
@pytest.mark.slow
def test_checkpointing_several_modules(paths: tuple[str, ...], tmp_path: Path) -> None:
    """A stack of three blocks with several modules checkpointed at once: the what-if's
    kept activation bytes and recompute FLOPs, from the plain model's JSON profile,
    equal a real run's (early stop off: each checkpointed forward recomputed whole)."""
    torch.manual_seed(0)
    stack = nn.Sequential(*(Block(Attention) for _ in range(3))).train()
    measure(stack).save(tmp_path / "p.json")
    loaded = ls.load(tmp_path / "p.json")
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        real = measure(with_checkpoint(stack, *paths))
    assert checkpointed_activation_bytes(loaded, paths) == real.root.metrics["activation_bytes"]
    assert recompute_flops(loaded, paths) == real.root.metrics["recompute_flops"]
    assert recompute_flops(loaded, paths) == sum(loaded.node(p).metrics["flops"] for p in paths)


def test_checkpointed_paths_may_not_nest() -> None:
    prof = measure(nn.Sequential(block("hand")))
    with pytest.raises(InvalidInputError, match=r"'0\.attn' is inside '0'"):
        checkpointed_activation_bytes(prof, ["0", "0.attn"])
    with pytest.raises(InvalidInputError, match="is inside"):
        recompute_flops(prof, ["0.attn", "0"])
    with pytest.raises(KeyError):
        recompute_flops(prof, ["nope"])


def test_a_what_if_of_a_cycle_of_several_analysed_steps_is_refused() -> None:
    """Three analysed steps sum their activation_bytes while the storage records are the
    last step's: the what-if would mix one step with three, so it is refused."""
    from layerscope.analysis.whatif import checkpointed_activation_bytes

    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(5)])
    p = ls.Profiler(model, memory=True, schedule=ls.schedule(active=3, repeat=1))
    with p:
        for _ in range(3):
            model(torch.randn(32, 64)).sum().backward()
            p.step()
    with pytest.raises(ls.InvalidInputError, match="this profile sums 3 analysed steps"):
        checkpointed_activation_bytes(p.profile, "2")
