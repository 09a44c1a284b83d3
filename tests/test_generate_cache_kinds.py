"""``estimate_generate(cache="paged")`` and ``kv_dtype=``: a server's cache read in place
once at its length in whole blocks, and a KV cache at another width, against bytes
derived by hand (``generation.cachekinds``, docs/generate.md "The cache model").

The model (as in test_generate_estimate): a Llama of 2 layers, hidden 64, 4 query heads
and 2 KV heads of head_dim 16, MLP 128, vocab 128, bfloat16. One token's keys and values
in one layer: 2 x 2 heads x 16 x 2 B = 128 B per row. Prompt 16, 20 new tokens: decode
steps at cache lengths L = 16 .. 35, analysed at 16, 26 and 35. Blocks of 16 tokens: a
step at L reads R = L + 1 rounded up to 16: R = 32 for L = 16 .. 31 (16 steps), 48 for
L = 32 .. 35 (4 steps).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from layerscope.errors import InvalidInputError
from layerscope.generation.decodefit import AffineFit, Point
from layerscope.generation.estimate import estimate_generate
from layerscope.generation.estimate_result import GenerateEstimate

LAYERS, KV_HEADS, HEAD_DIM, BF16 = 2, 2, 16, 2
KV_TOKEN_LAYER = 2 * KV_HEADS * HEAD_DIM * BF16  # 128 B
PROMPT, NEW = 16, 20
WEIGHT_MACS = 81_920  # test_generate_estimate's: every Linear, in x out
#: MACs per read token and row: 2 layers x (q.k and p.v) 2 x 4 heads x 16
ATTENTION_MACS = LAYERS * 2 * 4 * HEAD_DIM  # 256


@pytest.fixture(scope="module")
def model() -> Any:
    config = LlamaConfig(
        num_hidden_layers=LAYERS, hidden_size=64, num_attention_heads=4,
        num_key_value_heads=KV_HEADS, intermediate_size=128, vocab_size=128,
    )  # fmt: skip
    with torch.device("meta"):
        m: Any = LlamaForCausalLM(config)
    return m.to(torch.bfloat16)


def estimate(model: Any, **options: Any) -> GenerateEstimate:
    return estimate_generate(model, prompt=PROMPT, new_tokens=NEW, batch=(1, 2), **options)


@pytest.fixture(scope="module")
def paged(model: Any) -> GenerateEstimate:
    return estimate(model, cache="paged")


@pytest.fixture(scope="module")
def dynamic(model: Any) -> GenerateEstimate:
    return estimate(model)


def test_a_paged_step_attends_over_whole_blocks(paged: GenerateEstimate) -> None:
    """MACs at L: b x (81,920 + 256 x R): R = 32 at L = 16 and 26, 48 at L = 35."""
    for fit in paged.fit:
        assert fit.block == 16
        assert [p.length for p in fit.points] == [16, 26, 35]
        assert [p.macs for p in fit.points] == [
            fit.batch * (WEIGHT_MACS + ATTENTION_MACS * r) for r in (32, 32, 48)
        ]
    assert paged.fit[0].points[0].macs == 90_112
    assert paged.block_size == 16 and paged.to_dict()["block_size"] == 16


def test_a_block_more_reads_a_block_more_of_the_cache_once(paged: GenerateEstimate) -> None:
    """Batch 1, R 32 -> 48 (16 more positions). Per layer: the keys and values once,
    16 x 128 B = 2,048 B; the mask's 16 more positions, turned from bool into bfloat16
    (read 16 x 1 B, write 16 x 2 B = 48 B) and read by attention (16 x 2 B = 32 B). The
    model builds the positions once: arange (write 16 x 8 B = 128), add (read and write
    16 x 8 B = 256), le (read 16 x 8 B, write 16 x 1 B = 144): 528 B. Together
    2 x (2,048 + 48 + 32) + 528 = 4,784 B."""
    first, _, last = paged.fit[0].points
    assert 2 * (16 * KV_TOKEN_LAYER + 48 + 32) + 528 == 4_784
    assert last.bytes - first.bytes == 4_784


def test_the_paged_mean_is_over_every_step_s_blocks(paged: GenerateEstimate) -> None:
    """16 steps read 32 tokens, 4 read 48: the mean is (16 x s32 + 4 x s48) / 20, the
    middle step (L = 26, R = 32) lies on the line through the ends exactly."""
    for fit, row in zip(paged.fit, paged.sweep, strict=True):
        s32, mid, s48 = fit.points
        assert fit.held is True and mid.bytes == s32.bytes
        for quantity in ("bytes", "flops", "time"):
            want = (16 * s32.value(quantity) + 4 * s48.value(quantity)) / 20
            assert fit.mean(quantity) == pytest.approx(want, rel=1e-12)
        assert row.decode_bytes == pytest.approx((16 * s32.bytes + 4 * s48.bytes) / 20)


def test_the_paged_cache_holds_whole_blocks(
    paged: GenerateEstimate, dynamic: GenerateEstimate
) -> None:
    """At the last token: 36 tokens, rounded up to 48: 2 layers x b x 48 x 128 B =
    12,288 x b; the dynamic cache holds the 36: 9,216 x b."""
    for p, d in zip(paged.sweep, dynamic.sweep, strict=True):
        assert p.kv_bytes == LAYERS * p.batch * 48 * KV_TOKEN_LAYER == 12_288 * p.batch
        assert d.kv_bytes == LAYERS * d.batch * 36 * KV_TOKEN_LAYER == 9_216 * d.batch


def test_dynamic_moves_the_cache_three_times_where_paged_reads_it_once(
    paged: GenerateEstimate, dynamic: GenerateEstimate
) -> None:
    """At L = 35, batch b: both attend; dynamic over the 36 tokens, paged over 48 in
    place. Dynamic's cache traffic per layer is 3 x 36 x 128 B x b (attention's read,
    torch.cat's read and write); paged's 48 x 128 B x b read and 1 x 128 B x b written.
    The rest of the two steps differs by the paged mask only (its model builds one over
    the 48 positions, the dynamic step needs none): the positions once (33 B a position,
    1,584 B, and a few scalars) and per row and layer a bool mask turned into bfloat16 and
    read by attention (5 B a position, 2 x 240 B), under 2,000 + 700 x b B. So the
    dynamic step moves more, by the traffic's difference, (3 x 36 - 49) x 128 x 2 layers
    = 15,104 B x b, less that mask."""
    for d, p in zip(dynamic.fit, paged.fit, strict=True):
        b = d.batch
        traffic = LAYERS * (3 * 36 - (48 + 1)) * KV_TOKEN_LAYER * b
        assert traffic == 15_104 * b
        more = d.points[-1].bytes - p.points[-1].bytes
        assert traffic - (2_000 + 700 * b) < more < traffic
    assert paged.decode_time_per_token < dynamic.decode_time_per_token


def test_an_fp8_cache_halves_what_the_cache_holds_and_moves(
    model: Any, paged: GenerateEstimate, dynamic: GenerateEstimate
) -> None:
    """fp8: 1 byte an element against bfloat16's 2, so every byte of cache traffic halves.
    Paged, at L = 16 (R = 32): per layer 33 x 128 B x b read and written, half saved:
    2 layers x 33 x 64 B = 4,224 B x b. Dynamic at L = 16: 3 x 17 x 128 B x b per layer,
    half saved: 2 x 3 x 17 x 64 = 6,528 B x b. The cache held halves too; int8 is 1 byte
    as well (scales not charged)."""
    for kind, base in (("paged", paged), ("dynamic", dynamic)):
        fp8 = estimate(model, cache=kind, kv_dtype="fp8")
        assert fp8.kv_dtype == "fp8" and fp8.to_dict()["kv_dtype"] == "fp8"
        saved = 4_224 if kind == "paged" else 6_528
        for f, g in zip(fp8.fit, base.fit, strict=True):
            assert g.points[0].bytes - f.points[0].bytes == saved * f.batch
            assert f.points[0].macs == g.points[0].macs  # the work is the model dtype's
        for r, s in zip(fp8.sweep, base.sweep, strict=True):
            assert r.kv_bytes * 2 == s.kv_bytes
    int8 = estimate(model, cache="paged", kv_dtype="int8")
    assert int8.sweep[0].kv_bytes == 6_144  # 48 x 2 layers x 64 B
    assert any(n.startswith("KV cache at int8: held and moved") for n in int8.notes)


def test_the_block_size_option(model: Any) -> None:
    """Blocks of 8: R = 24 at L = 16 (17 -> 24), 32 at 26 (27 -> 32), 40 at 35."""
    est = estimate_generate(model, prompt=PROMPT, new_tokens=NEW, batch=1, cache="paged",
                            block_size=8)  # fmt: skip
    assert [p.macs for p in est.fit[0].points] == [
        WEIGHT_MACS + ATTENTION_MACS * r for r in (24, 32, 40)
    ]
    assert "Paged cache, blocks of 8 tokens" in est.notes[1]
    with pytest.raises(InvalidInputError, match="block_size must be an int >= 1, got 0"):
        estimate_generate(model, prompt=4, new_tokens=2, batch=1, cache="paged", block_size=0)
    with pytest.raises(InvalidInputError, match="kv_dtype must be one of"):
        estimate_generate(model, prompt=4, new_tokens=2, batch=1, kv_dtype="fp4")


def test_a_paged_estimate_saves_and_loads(paged: GenerateEstimate) -> None:
    data = paged.to_dict()
    assert data["fit"][0]["block_size"] == 16
    loaded = GenerateEstimate.from_dict(data)
    assert loaded.to_dict() == data and loaded.fit[0].block == 16
    assert "paged cache (blocks of 16 tokens)." in loaded.render(width=200)


def test_a_step_function_that_misses_uses_the_broken_line_over_the_blocks() -> None:
    """Block 4, steps L = 0 .. 11 read R = 4 (L 0..3), 8 (L 4..7) or 12 (L 8..11); points
    at L = 0, 6, 11 (R 4, 8, 12) with values 1, 3, 3: the line through the ends gives 2 at
    R = 8, 33 % off 3, so the check misses, and the broken line through the points gives
    every step its block's value: (4 x 1 + 4 x 3 + 4 x 3) / 12 = 7 / 3."""
    points = [Point(n, t, 0, 0, 0) for n, t in ((0, 1.0), (6, 3.0), (11, 3.0))]
    fit = AffineFit(1, 0, 11, points, block=4)
    assert [fit.reads(p.length) for p in points] == [4, 8, 12]
    assert fit.held is False
    assert fit.mean("time") == pytest.approx(7 / 3)
