"""Pipeline parallelism in plans (``planning.pipeline``): the stages a model is cut
into, the schedules' orders, the composition of a stage's step by hand, a transformers
model's stages, the options' refusals and the document. The plans against real
pipelined runs are ``test_pp_steps.py``'s."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.cli import main
from layerscope.errors import InvalidInputError
from layerscope.planning import pipeline as pl
from layerscope.planning.timeline import PARTS


def stack(blocks: int = 8) -> nn.Sequential:
    """A stem, ``blocks`` identical blocks and a head."""
    parts: OrderedDict[str, nn.Module] = OrderedDict(stem=nn.Linear(8, 8))
    for i in range(blocks):
        parts[f"block{i}"] = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    parts["head"] = nn.Linear(8, 4)
    return nn.Sequential(parts)


def test_stages_of_a_sequential() -> None:
    """The blocks split evenly, the stem on the first stage and the head on the last;
    10 blocks on 4 stages: 2, 3, 3, 2 (the extra ones to the middle stages)."""
    lay = pl.layout(stack(8))
    assert (lay.pre, lay.post, len(lay.blocks)) == (("stem",), ("head",), 8)
    assert pl.cut(lay, 4, None) == [
        ("stem", "block0", "block1"), ("block2", "block3"), ("block4", "block5"),
        ("block6", "block7", "head"),
    ]  # fmt: skip
    sizes = [
        len([p for p in c if p.startswith("block")]) for c in pl.cut(pl.layout(stack(10)), 4, None)
    ]
    assert sizes == [2, 3, 3, 2]
    assert pl.cut(lay, 2, ["block1"]) == [
        ("stem", "block0"),
        ("block1", "block2", "block3", "block4", "block5", "block6", "block7", "head"),
    ]


@pytest.mark.parametrize(
    ("split", "says"),
    [
        (["block1", "block2"], "names 2 module paths"),
        (["nope"], "is not one of the pieces"),
        (["stem"], "forward order"),
    ],
)
def test_split_refused(split: list[str], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        pl.cut(pl.layout(stack(4)), 2, split)


def test_too_many_stages_and_other_models_refused() -> None:
    with pytest.raises(InvalidInputError, match="has 2 repeated blocks"):
        pl.cut(pl.layout(stack(2)), 4, None)
    with pytest.raises(InvalidInputError, match=r"nn\.Sequential's children or a transformers"):
        pl.layout(nn.TransformerEncoderLayer(8, 2))


def test_schedule_orders() -> None:
    """GPipe: every forward, then every backward; 1F1B on stage s of S: min(M, S - s)
    forwards, then a backward and a forward in turn, then the remaining backwards."""
    assert [(k, m) for k, _, m in pl.actions("gpipe", 4, 1, 3)] == [
        ("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)
    ]  # fmt: skip
    assert [(k, m) for k, _, m in pl.actions("1f1b", 4, 1, 4)] == [
        ("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("B", 2), ("B", 3)
    ]  # fmt: skip
    assert [pl.in_flight(pl.actions("1f1b", 4, s, 8)) for s in range(4)] == [4, 3, 2, 1]
    assert pl.in_flight(pl.actions("gpipe", 4, 3, 8)) == 8
    assert pl.bubble(4, 12) == 3 / 15


def test_interleaved_order_is_torchs() -> None:
    """Interleaved 1F1B: rank 0 of 2, 2 stages a rank (its stages 0 and 2), 4
    microbatches in 2 rounds of 2. Warm-up: a round (2) plus 2 x (2 - 1 - 0) = 4
    forwards: chunk 0's microbatches 0, 1, then chunk 1's 0, 1; then a forward and a
    backward in turn (forwards through the chunks in rounds, backwards from the last
    chunk); then the last 4 backwards. The same as torch's ScheduleInterleaved1F1B orders
    it, for every rank of several pipelines."""
    assert pl.actions("interleaved_1f1b", 2, 0, 4, 2) == [
        ("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("F", 1, 1),
        ("F", 0, 2), ("B", 1, 0), ("F", 0, 3), ("B", 1, 1),
        ("F", 1, 2), ("B", 0, 0), ("F", 1, 3), ("B", 0, 1),
        ("B", 1, 2), ("B", 1, 3), ("B", 0, 2), ("B", 0, 3),
    ]  # fmt: skip
    assert pl.bubble(4, 8, 2) == 3 / 19
    from torch.distributed.pipelining import schedules

    class Orders(schedules.ScheduleInterleaved1F1B):
        """torch's order alone (its attributes as its constructor sets them)."""

        def __init__(self, stages: int, virtual: int, m: int) -> None:
            self.pp_group_size, self.n_local_stages, self._n_microbatches = stages, virtual, m
            self.number_of_rounds = max(1, m // stages)
            self.microbatches_per_round = m // self.number_of_rounds

    for stages, virtual, m in [(2, 2, 4), (4, 2, 8), (4, 3, 12), (8, 2, 32), (4, 2, 4)]:
        for rank in range(stages):
            torch_order = [
                ("F" if a.computation_type.name == "FORWARD" else "B",
                 a.stage_index // stages, a.microbatch_index)
                for a in Orders(stages, virtual, m)._calculate_single_rank_operations(rank)
                if a is not None
            ]  # fmt: skip
            assert pl.actions("interleaved_1f1b", stages, rank, m, virtual) == torch_order


def test_zero_bubble_order_is_torchs() -> None:
    """Zero bubble, rank 1 of 2, 4 microbatches: no warm-up beyond 2 - 1 - 1 = 0
    forwards; a forward and an input half in turn, each after the first (rank 1) followed
    by the oldest weight half; then the last weight half. The same as torch's
    ScheduleInterleavedZeroBubble orders it, for every rank of several pipelines, one
    stage a rank and several."""
    assert pl.actions("zero_bubble", 2, 1, 4) == [
        ("F", 0, 0), ("I", 0, 0), ("F", 0, 1), ("I", 0, 1), ("W", 0, 0),
        ("F", 0, 2), ("I", 0, 2), ("W", 0, 1), ("F", 0, 3), ("I", 0, 3), ("W", 0, 2),
        ("W", 0, 3),
    ]  # fmt: skip
    assert pl.in_flight(pl.actions("zero_bubble", 2, 1, 4)) == 2  # F1 before W0
    from torch.distributed.pipelining import schedules

    class Orders(schedules.ScheduleInterleavedZeroBubble):
        """torch's order alone (its attributes as its constructor sets them)."""

        def __init__(self, stages: int, virtual: int, m: int) -> None:
            self.pp_group_size, self.n_local_stages, self._n_microbatches = stages, virtual, m
            self.number_of_rounds = max(1, m // stages)
            self.microbatches_per_round = m // self.number_of_rounds

    kinds = {"FORWARD": "F", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}
    shapes = [(2, 1, 4), (4, 1, 8), (4, 1, 4), (8, 1, 8), (3, 1, 5), (2, 2, 4), (4, 2, 8),
              (4, 3, 12), (8, 2, 32)]  # fmt: skip
    for stages, virtual, m in shapes:
        for rank in range(stages):
            torch_order = [
                (kinds[a.computation_type.name], a.stage_index // stages, a.microbatch_index)
                for a in Orders(stages, virtual, m)._calculate_single_rank_operations(rank)
                if a is not None
            ]
            assert pl.actions("zero_bubble", stages, rank, m, virtual) == torch_order


def test_zbv_order_and_span_by_hand() -> None:
    """ZB-V on 2 ranks (4 stages in a V: rank 0 holds stages 0 and 3, rank 1 stages 1
    and 2), 2 microbatches; torch fills the pipe with max(2 x 2 - 1, 2) = 3 and drops
    microbatch 2. Rank 0: 2 x 2 - 1 = 3 forwards of chunk 0 (two kept), no pairs, 2
    rounds of chunk 1's F, I, W, then chunk 0's I and W twice. Rank 1: 1 forward of
    chunk 0, 1 pair (chunk 1, chunk 0), 1 round of chunk 1's F, I, W, then chunk 0's I
    and W, chunk 1's I and W, and chunk 0's I and W. The same as torch's
    ScheduleZBVZeroBubble for every rank of several pipelines.

    Run with every F, I and W 1 s (stage 0's I empty and its W 2 s): rank 0 runs F(0,
    0) 0-1 and F(0, 1) 1-2; rank 1 F(1, 0) 1-2, F(2, 0) 2-3, F(1, 1) 3-4, F(2, 1) 4-5;
    rank 0 F(3, 0) 3-4, I 4-5, W 5-6, F(3, 1) 6-7, I 7-8, W 8-9; rank 1 I(2, 0) 5-6, W
    6-7, I(1, 0) 7-8, W 8-9, I(2, 1) 9-10, W 10-11, I(1, 1) 11-12, W 12-13; rank 0
    I(0, 0) at 9 (empty), W 9-11, I(0, 1) at 12, W 12-14. The step: 14 s, 12 s of work
    a rank."""
    assert [pl.actions("zbv", 2, r, 2, 2) for r in range(2)] == [
        [("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("I", 1, 0), ("W", 1, 0), ("F", 1, 1),
         ("I", 1, 1), ("W", 1, 1), ("I", 0, 0), ("W", 0, 0), ("I", 0, 1), ("W", 0, 1)],
        [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("I", 1, 0), ("W", 1, 0),
         ("I", 0, 0), ("W", 0, 0), ("I", 1, 1), ("W", 1, 1), ("I", 0, 1), ("W", 0, 1)],
    ]  # fmt: skip
    assert [pl.stage_of("zbv", 2, r, v) for r in range(2) for v in range(2)] == [0, 3, 1, 2]
    assert [pl.rank_of("zbv", 2, g) for g in range(4)] == [0, 1, 1, 0]
    seconds = {}
    for g in range(4):
        weight = 2.0 if g == 0 else 1.0
        seconds.update({(g, "F"): 1.0, (g, "I"): 2.0 - weight, (g, "W"): weight})
    orders = [pl.actions("zbv", 2, r, 2, 2) for r in range(2)]
    assert pl.simulate(2, 2, orders, seconds, "zbv") == [14.0, 13.0]
    from torch.distributed.pipelining import schedules

    class Orders(schedules.ScheduleZBVZeroBubble):
        """torch's order alone (its attributes as its constructor sets them)."""

        def __init__(self, stages: int, m: int) -> None:
            self.pp_group_size, self._n_microbatches, self.num_stages = stages, m, 2 * stages

    kinds = {"FORWARD": "F", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}
    for stages, m in [(2, 4), (2, 1), (4, 3), (4, 8), (8, 32), (3, 5)]:
        for rank in range(stages):
            torch_order = [
                (kinds[a.computation_type.name], int(a.stage_index != rank), a.microbatch_index)
                for a in Orders(stages, m)._calculate_single_rank_operations(rank)
                if a is not None
            ]
            assert pl.actions("zbv", stages, rank, m, 2) == torch_order


def test_simulated_spans() -> None:
    """The schedules run on equal stages (forward 1 s, backward 2 s: an input half and a
    weight half of 1 s each; the first stage's backward all weight half, as torch runs
    it), 4 stages, 8 microbatches: GPipe and 1F1B take (M + S - 1)(F + B) = 11 x 3 = 33
    s; interleaved 1F1B over 2 chunks a rank (each 0.5 s and 1 s) M (F + B) + (S - 1)(F
    + B) / V = 24 + 4.5 = 28.5 s; zero bubble M (F + B) + (S - 1)(F + I - W) = 24 + 3 =
    27 s (Qi et al.'s ZB-H1 bubble)."""

    def span(schedule: str, virtual: int = 1) -> float:
        seconds = {}
        for g in range(4 * virtual):
            weight = 2.0 if g == 0 else 1.0
            times = {"F": 1.0, "B": 2.0, "I": 2.0 - weight, "W": weight}
            seconds.update({(g, k): t / virtual for k, t in times.items()})
        orders = [pl.actions(schedule, 4, r, 8, virtual) for r in range(4)]
        return max(pl.simulate(4, virtual, orders, seconds))

    assert span("gpipe") == span("1f1b") == 33.0
    assert span("interleaved_1f1b", 2) == 28.5
    assert span("zero_bubble") == 27.0
    assert pl.bubble(4, 8) == 3 / 11 == (33 - 24) / 33


def point(phase: str, event: str, act: int, grad: int = 0) -> tuple[str, str, str, dict[str, int]]:
    parts = dict.fromkeys(PARTS, 0)
    parts.update(param_bytes=1000, activation_bytes=act, grad_bytes=grad)
    return (phase, event, "m", parts)


#: one microbatch of a stage: its forward leaves 100 B; its backward rises 50 B above
#: that while making 40 B of gradients, and ends with the activations freed
ONE = [
    point("forward", "enter", 0), point("forward", "exit", 100),
    point("backward", "backward", 100), point("backward", "peak", 110, 40),
    point("backward", "end", 0, 40), point("optimizer", "step", 0, 40),
]  # fmt: skip


def test_compose_by_hand() -> None:
    """Stage 0 of 2, input 10 B, output 20 B, 3 microbatches. At rest: 1,000 B of
    parameters and the receive buffers (3 output gradients: 60 B) and the batch's 2
    other microbatches (20 B): 1,080 B.

    GPipe: the three forwards leave 300 B; each finished microbatch keeps its sent output
    (20 B) to the end. Backward 0 peaks at 300 + 10 + 40 = 350 above rest; backward k
    adds into the 40 B of gradients, its own new 40 B a temporary: 300 - 100 k held,
    20 k kept, 40 + 40 and 10: k = 1: 200 + 20 + 80 + 10 = 310; k = 2: 100 + 40 + 90 =
    230. The peak: 1,080 + 350 = 1,430.

    1F1B (2 - 0 = 2 warm-up forwards): F0 F1 B0 F2 B1 B2; nothing kept (the first stage
    sends no gradient back); F2's exit: 100 (microbatch 1) + 100 + 40 gradients = 240;
    B1 at its peak: 100 (microbatch 2) + 110 + 80 = 290; B0: 100 + 110 + 40 = 250.
    The peak: 1,080 + 290 = 1,370."""
    step = pl.StageStep(points=ONE, input_bytes=10, output_bytes=20)
    gpipe = pl.compose([step], "gpipe", 2, 0, 3)
    totals = [sum(p[3].values()) for p in gpipe]
    assert totals[0] == 1_080  # the first forward's entry
    backwards = [t for p, t in zip(gpipe, totals, strict=True) if p[1] == "peak"]
    assert backwards == [1_080 + 350, 1_080 + 310, 1_080 + 230]
    one_f_one_b = pl.compose([step], "1f1b", 2, 0, 3)
    peaks = [sum(p[3].values()) for p in one_f_one_b if p[1] == "peak"]
    assert peaks == [1_080 + 250, 1_080 + 290, 1_080 + 190]  # B2: 110 + 80
    assert max(sum(p[3].values()) for p in one_f_one_b if p[0] != "optimizer") == 1_370
    # the optimizer step as one microbatch's, the receive buffers and batch still held
    assert one_f_one_b[-1] == ("optimizer", "step", "", {**ONE[-1][3], "other_bytes": 80})


def llama(layers: int = 4) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
    )  # fmt: skip
    torch.manual_seed(0)
    model: nn.Module = transformers.LlamaForCausalLM(config)
    return model


#: a decoder layer: q and o 64 x 64, k and v 64 x 32, gate, up, down 64 x 128, two norms
LAYER = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64  # 36,992
EMBED = 256 * 64  # 16,384, the head's as much


def test_transformers_stages() -> None:
    """Llama on 2 stages from its _pp_plan: the embeddings and layers 0-1, then layers
    2-3, the norm and the head; each stage's parameters by hand; the hidden states
    [2, 32, 64] sent on and their gradients back, once per microbatch, in float32
    (16,384 B: DDP's mixed precision is autocast, whose residual stream stays float32)."""
    model = llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plan = ls.plan(model, input_shape=(2, 32), mesh={"pp": 2, "dp_replicate": 2}, microbatches=4)
    assert plan.pipeline is not None
    rows = plan.pipeline["rows"]
    assert [(r["first"], r["last"], r["pieces"]) for r in rows] == [
        ("model.embed_tokens", "model.layers.1", 3), ("model.layers.2", "lm_head", 4)
    ]  # fmt: skip
    assert [r["params"] for r in rows] == [EMBED + 2 * LAYER, 2 * LAYER + 64 + EMBED]
    assert rows[0]["sent_bytes"] == rows[0]["received_bytes"] == 4 * 2 * 32 * 64 * 4
    assert plan.comm[""]["forward"]["send"] == {"calls": 4, "bytes": 4 * 16_384}
    assert [r["in_flight"] for r in rows] == [2, 1]
    assert plan.pipeline["stage"] == max(range(2), key=lambda s: rows[s]["peak_bytes"])
    # tokens/s per GPU: 4 microbatches of 64 tokens over the pipeline's 2 GPUs a step
    assert plan.tokens_per_s == pytest.approx(4 * 64 / 2 / plan.step_time)
    # the step: (M + S - 1) slots of the slower stage, then the collectives and optimizer
    slowest = max(r["time"] for r in rows)
    t = plan.time
    assert t["compute"] + t["recompute"] + t["bubble"] <= 5 * slowest * (1 + 1e-9)
    assert plan.step_time == pytest.approx(
        t["compute"] + t["recompute"] + t["exposed_comm"] + t["bubble"] + t["optimizer"]
    )
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [m.device.type for m in model.parameters()] == ["cpu"] * len(before)


def test_stage_asked_for_and_the_document(tmp_path: Path) -> None:
    """stage=1 plans the last stage; the plan survives JSON and renders its stages."""
    plan = ls.plan(
        stack(), input_shape=(2, 8), precision="fp32", world_size=2, mesh={"pp": 2},
        microbatches=4, schedule="gpipe", stage=1,
    )  # fmt: skip
    assert plan.pipeline is not None
    assert plan.pipeline["stage"] == 1 and plan.pipeline["chosen"] == "asked for"
    assert plan.options["microbatches"] == 4 and plan.options["schedule"] == "gpipe"
    path = tmp_path / "plan.json"
    plan.save(path)
    back = ls.load_plan(path)
    assert back.pipeline == plan.pipeline and back.time == plan.time
    text = back.render(width=80)
    assert "x pipeline 2 (gpipe, 4 microbatches; stage 1, asked for)" in text.replace("\n  ", " ")
    assert "block4 .. head" in text and "Bubble" in text


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"microbatches": 4}, "microbatches is pipeline parallelism's"),
        ({"mesh": {"pp": 2}, "schedule": "zb"}, "schedule"),
        ({"mesh": {"pp": 4}, "microbatches": 2}, "Schedule1F1B needs at least as many"),
        (
            {"mesh": {"pp": 2}, "virtual_stages": 2},
            "under schedule='interleaved_1f1b' or 'zero_bubble' only",
        ),
        (
            {"mesh": {"pp": 2}, "schedule": "interleaved_1f1b", "microbatches": 5},
            "runs them in 2 rounds",
        ),
        ({"mesh": {"pp": 2}, "schedule": "zbv", "virtual_stages": 3}, "runs 2 stages a rank"),
        (
            {"mesh": {"pp": 2}, "schedule": "zero_bubble", "microbatches": 5},
            r"2 rounds .* ScheduleInterleavedZeroBubble\), so it needs a multiple of 2, e.g. 6",
        ),
        ({"mesh": {"pp": 2}, "stage": 2}, "stage"),
    ],
)
def test_options_refused(options: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        ls.plan(stack(), input_shape=(2, 8), **options)


def test_a_profile_cannot_be_split() -> None:
    prof = ls.profile(stack(), input_shape=(2, 8), backward=True, memory=True)
    with pytest.raises(InvalidInputError, match="mesh pp=2"):
        ls.plan(prof, mesh={"pp": 2}, precision="fp32")


def test_the_cli_plans_a_pipeline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--mesh with pp, --microbatches, --schedule, --pp-split and --stage; the JSON has
    the stages; --microbatches without pp is refused with the fix."""
    model = tmp_path / "stack.py"
    model.write_text(
        "from torch import nn\n"
        "model = nn.Sequential(nn.Linear(8, 8), *[nn.Linear(8, 8) for _ in range(4)])\n"
    )
    out = tmp_path / "plan.json"
    args = ["plan", f"{model}:model", "--input-shape", "2,8", "--mesh", "dp_shard=2,pp=2",
            "--microbatches", "4", "--schedule", "gpipe", "--pp-split", "3", "--stage", "0",
            "--json", str(out), "--width", "100"]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "x pipeline 2 (gpipe, 4 microbatches; stage 0, asked for)" in text
    plan = ls.load_plan(out)
    assert plan.pipeline is not None
    assert [(r["first"], r["last"]) for r in plan.pipeline["rows"]] == [("0", "2"), ("3", "4")]
    assert main(["plan", f"{model}:model", "--input-shape", "2,8", "--microbatches", "4"]) == 2
    assert "give a mesh with pp above 1" in capsys.readouterr().err


def test_tensor_and_sequence_parallel_stages() -> None:
    """pp 2 x tp 2 with sequence parallelism: each stage is split by Llama's own plan,
    and the stream between the stages is sent as this rank's half of the sequence: bf16
    [2, 16, 64] = 4,096 B per microbatch (whole it would be [2, 32, 64]); the parameters
    per GPU are the stage's tensor-parallel shards (q, k, v, gate, up by rows, o and down
    by columns, embeddings and head by rows: half of every tensor but the norms')."""
    model = llama()
    plan = ls.plan(
        model, input_shape=(2, 32), mesh={"pp": 2, "tp": 2, "dp_shard": 2}, microbatches=4,
        sequence_parallel=True, checkpoint="blocks",
    )  # fmt: skip
    assert plan.pipeline is not None
    rows = plan.pipeline["rows"]
    assert [r["sent_bytes"] for r in rows] == [4 * 2 * 16 * 64 * 2] * 2
    assert plan.comm[""]["backward"]["send"]["bytes"] == 4 * 4_096
    norms = 2 * 64  # a layer's two norms stay whole
    layer = (LAYER - norms) // 2 + norms  # 18,560 per GPU
    stage1 = 2 * layer + 64 + EMBED // 2  # and the final norm, half the head
    # FSDP2 over the 2 data-parallel ranks: half of those, bf16-mixed keeps them float32
    assert plan.pipeline["stage"] == 1
    assert plan.states["param_bytes"] == 4 * stage1 // 2


def test_the_last_stage_keeps_the_outputs_unless_told_not() -> None:
    """The last stage of 2 under GPipe (input 10 B, output 20 B, 3 microbatches): each
    finished microbatch keeps its output (20 B) for the merged result and its input's
    gradient sent back (10 B) to the step's end; at backward 2's peak two have finished:
    60 B, or 20 B with return_outputs=False (the sends only)."""
    step = pl.StageStep(points=ONE, input_bytes=10, output_bytes=20)

    def last_peak(keep: bool) -> int:
        points = pl.compose([step], "gpipe", 2, 1, 3, return_outputs=keep)
        return [sum(p[3].values()) for p in points if p[1] == "peak"][-1]

    assert last_peak(True) - last_peak(False) == 2 * 20
    # at rest: 1,000 B of parameters and 2 more microbatches' inputs (20 B); held: the
    # third microbatch's 100 + 10 at the peak, 80 B of gradients, 2 x 10 B of sends
    assert last_peak(False) == 1_000 + 20 + 110 + 80 + 2 * 10


def test_zero_bubble_compose_by_hand() -> None:
    """The last stage of 2 under zero bubble (input 10 B, output 20 B, the modules that
    hold parameters' output gradients 30 B), 2 microbatches, outputs not returned: F0
    I0 F1 I1 W0 W1. At rest: 1,000 B of parameters and the other microbatch's input
    (10 B). An input half keeps its microbatch's 100 B held and ends holding its 30 B of
    output gradients and the input's 10 B gradient sent (40 B, growing by thirds over
    its 3 points, each at least the 100 B held): 113, 136, 140. F1 on I0's 140: 140,
    240. I1: 140 + 113, 136, 140. W0 holds microbatch 1's 140 and its own 40 fading
    (26, 13, 0) over the backward's points (100, 110, 0) and their gradients (0, 40,
    40): 266, 303, 180. W1: microbatch 0's sent 10 B kept, its gradients added into
    the 40 B: 136 + 40, 133 + 80, 10 + 80. The peak is W0's: 1,010 + 303 = 1,313."""
    step = pl.StageStep(points=ONE, input_bytes=10, output_bytes=20, wait_bytes=30)
    points = pl.compose([step], "zero_bubble", 2, 1, 2, return_outputs=False)
    above = [sum(p[3].values()) - 1_010 for p in points[:-1]]
    assert above == [0, 100, 113, 136, 140, 140, 240, 253, 276, 280,
                     266, 303, 180, 176, 213, 90]  # fmt: skip
    # stage 0: no input half (torch runs the whole backward as the weight half)
    first = pl.compose([step], "zero_bubble", 2, 0, 2)
    assert [p[1] for p in first].count("peak") == 2


def test_interleaved_compose_by_hand() -> None:
    """Rank 0 of 2 holding stages 0 and 2 of 4 (each the synthetic stage: input 10 B,
    output 20 B), interleaved 1F1B, 2 microbatches: the warm-up is all 4 forwards, then
    B(1, 0), B(1, 1), B(0, 0), B(0, 1). At rest: each stage's 1,000 B of parameters and
    50 B of buffers (stage 0: the other microbatch's input, 10, and 2 output gradients,
    40; stage 2: one input, 10, and 2 output gradients, 40). At B(1, 0)'s peak: stage 0
    holds 2 x 100, stage 2 the other microbatch's 100 and its own peak, 110 and 40 B of
    gradients: 2,100 + 200 + 100 + 150 = 2,550, the rank's peak."""
    step = pl.StageStep(points=ONE, input_bytes=10, output_bytes=20)
    points = pl.compose([step, step], "interleaved_1f1b", 2, 0, 2)
    peaks = [sum(p[3].values()) for p in points if p[1] == "peak"]
    # what a finished microbatch keeps, its sends: stage 0 its output (20 B), stage 2 its
    # output and its input's gradient (30 B). B(1, 1): stage 2's own 110 + 80 B of
    # gradients, the other's 30 B kept; B(0, 0): stage 2 done (40 B of gradients, 60 B
    # kept), stage 0's other microbatch 100 and its own 110 + 40; B(0, 1): its own 110,
    # 40 + 40 B of gradients and 20 B kept
    assert peaks == [2_550, 2_100 + 200 + 110 + 80 + 30, 2_100 + 100 + 100 + 150,
                     2_100 + 100 + 190 + 20]  # fmt: skip
    assert max(sum(p[3].values()) for p in points if p[0] != "optimizer") == 2_550


def test_a_sweep_over_pipeline_stages(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """pp=[1, 2, 4] on 8 GPUs: the data-parallel axis gives way (FSDP over 8, 4, 2), each
    row is ls.plan with the row's options (a row without a pipeline drops the pipeline's
    own options), and the CLI sweeps it too."""
    from layerscope.planning.sweep import row_options

    model = stack()
    options: dict[str, Any] = {"world_size": 8, "microbatches": 4, "schedule": "gpipe"}
    sweep = ls.plan_sweep(model, input_shape=(2, 8), pp=[1, 2, 4], **options)
    assert [r.pp for r in sweep.rows] == [1, 2, 4]
    for row in sweep.rows:
        alone = ls.plan(model, input_shape=(2, 8), **row_options(row, options))
        assert (row.peak_bytes, row.step_time) == (alone.peak_bytes, alone.step_time)
        assert alone.options["mesh"]["dp_shard"] == 8 // (row.pp or 1)
        assert (alone.pipeline is None) == (row.pp == 1)
    with pytest.raises(InvalidInputError, match=r"tp=1 x pp=3 does not divide the 8 GPUs"):
        ls.plan_sweep(model, input_shape=(2, 8), pp=[1, 3], world_size=8)
    path = tmp_path / "stack.py"
    path.write_text(
        "from torch import nn\nmodel = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])\n"
    )
    args = ["plan", f"{path}:model", "--input-shape", "2,8", "--sweep", "pp=1,2",
            "--world-size", "4", "--width", "100"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Plan sweep: 2 plans over pp" in out


def test_auto_checkpointing_over_a_pipeline() -> None:
    """checkpoint="auto" with a pipeline: under a budget between the peak with every
    block checkpointed and the peak without, it checkpoints some blocks and every rank
    fits; with room for the whole step, none; under a budget nothing meets, every block
    and a note saying so."""
    blocks_ = [nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 8)) for _ in range(8)]
    model, shape = nn.Sequential(nn.Linear(8, 8), *blocks_, nn.Linear(8, 4)), (64, 8)
    common: dict[str, Any] = {
        "input_shape": shape, "precision": "fp32", "world_size": 2, "mesh": {"pp": 2},
        "microbatches": 4, "reserve_bytes": 0,
    }  # fmt: skip
    plain = ls.plan(model, **common)
    blocks = ls.plan(model, checkpoint="blocks", **common)
    worst = [
        max(r["peak_bytes"] for r in (p.pipeline or {"rows": []})["rows"]) for p in (plain, blocks)
    ]
    assert worst[1] < worst[0]
    budget = (worst[0] + worst[1]) // 2
    auto = ls.plan(model, checkpoint="auto", budget=budget, **common)
    assert auto.pipeline is not None
    assert len(auto.checkpoint) > 0 and all(r["fits"] for r in auto.pipeline["rows"])
    assert max(r["peak_bytes"] for r in auto.pipeline["rows"]) <= budget
    roomy = ls.plan(model, checkpoint="auto", budget=worst[0], **common)
    assert roomy.checkpoint == [] and roomy.peak_bytes == plain.peak_bytes
    tight = ls.plan(model, checkpoint="auto", budget=1, **common)
    assert tight.fits is False
    assert any("even every block checkpointed does not fit" in n for n in tight.notes)


def test_a_stage_of_one_block_checkpoints_it_and_shards_it() -> None:
    """Four blocks over four stages: each stage holds one block, no run of its own, but
    it is one of the model's repeated blocks: "blocks" checkpoints it, and it is its own
    FSDP2 unit beside the stage's root (the stem, the head)."""
    model = stack(4)
    common: dict[str, Any] = {
        "input_shape": (64, 8), "precision": "fp32", "world_size": 8,
        "mesh": {"dp_shard": 2, "pp": 4}, "microbatches": 4, "reserve_bytes": 0,
    }  # fmt: skip
    for stage in range(4):
        plan = ls.plan(model, checkpoint="blocks", stage=stage, **common)
        assert plan.checkpoint == [f"block{stage}"]
        assert plan.options["fsdp_units"] == ["", f"block{stage}"]


def test_gradient_accumulation_repeats_the_pipeline() -> None:
    """grad_accum=2: the pipeline's step runs twice before the optimizer step (its parts
    double but the optimizer's), so the tokens per second stay; the memory is one
    pipeline step's."""
    common: dict[str, Any] = {"input_shape": (2, 8), "mesh": {"pp": 2}, "microbatches": 4}
    one = ls.plan(stack(), **common)
    two = ls.plan(stack(), grad_accum=2, **common)
    assert two.peak_bytes == one.peak_bytes
    for part in ("compute", "recompute", "exposed_comm", "bubble"):
        assert two.time[part] == pytest.approx(2 * one.time[part])
    assert two.time["optimizer"] == one.time["optimizer"]
    assert two.step_time == pytest.approx(2 * one.step_time - one.time["optimizer"])


def test_stages_are_cut_where_the_slowest_is_fastest() -> None:
    """An output projection 512 blocks' worth of FLOPs (256 x 262,144 multiply-adds per
    row against a block's 2 x 256 x 256): on 2 stages the even cut (4 blocks and the
    head last) leaves the last stage the slowest, so the plan cuts again with the head
    alone on it, says so, and keeps the cut in its options; a given pp_split is kept."""
    with torch.device("meta"):
        blocks_ = [nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256))
                   for _ in range(8)]  # fmt: skip
        model = nn.Sequential(nn.Linear(256, 256), *blocks_, nn.Linear(256, 262_144))
    plan = ls.plan(model, input_shape=(8192, 256), mesh={"pp": 2}, world_size=2, microbatches=2)
    assert plan.pipeline is not None
    assert [(r["first"], r["last"]) for r in plan.pipeline["rows"]] == [("0", "8"), ("9", "9")]
    assert plan.options["pp_split"] == ["9"]
    assert any(n.startswith("stages cut where the slowest one's") for n in plan.notes)
    given = ls.plan(model, input_shape=(8192, 256), mesh={"pp": 2}, world_size=2,
                    microbatches=2, pp_split=["5"])  # fmt: skip
    assert given.options["pp_split"] == ["5"]
    assert not any(n.startswith("stages cut where") for n in given.notes)
    assert pl.balanced([1.0] * 8, 4) == [2, 4, 6]
    assert pl.balanced([5.0, 1, 1, 1, 1, 1, 1, 3], 2) == [3]  # 5 + 1 + 1 | 1 + ... + 3


def test_zero_bubble_on_a_transformers_model(tmp_path: Path) -> None:
    """Llama on 4 stages, 8 microbatches: zero bubble's step is 1F1B's less the weight
    halves that fill its bubble, its memory above 1F1B's by what input halves keep; the
    plan saves, loads and renders with its schedule; the CLI takes it."""
    plans = {
        schedule: ls.plan(llama(), input_shape=(2, 32), mesh={"pp": 4}, microbatches=8,
                          schedule=schedule, return_outputs=False)
        for schedule in ("1f1b", "zero_bubble")
    }  # fmt: skip
    one, zero = plans["1f1b"], plans["zero_bubble"]
    assert one.pipeline is not None and zero.pipeline is not None
    # the same work a microbatch on every stage; the busiest rank's step shorter
    assert [r["time"] for r in zero.pipeline["rows"]] == [r["time"] for r in one.pipeline["rows"]]
    assert zero.step_time < one.step_time
    assert zero.pipeline["bubble"] < one.pipeline["bubble"]
    for a, b in zip(zero.pipeline["rows"], one.pipeline["rows"], strict=True):
        assert a["peak_bytes"] >= b["peak_bytes"] - 64, (a["stage"], a, b)
    assert any("zero bubble: each backward split" in n for n in zero.notes)
    path = tmp_path / "plan.json"
    zero.save(path)
    back = ls.load_plan(path)
    assert back.pipeline == zero.pipeline
    assert "zero_bubble, 8 microbatches" in back.render(width=80).replace("\n  ", " ")


def test_a_rank_of_two_stages_sums_their_collectives() -> None:
    """ZBV puts stages 0 and 3 on rank 0: both have a root unit (the embedding, then the
    final norm and head), so the rank's root all-gathers twice, its two shards' bytes
    (the module table's two root rows), and reduce-scatters likewise; its FSDP2 units
    are both stages' (before, the second stage's collectives replaced the first's)."""
    ids = torch.randint(0, 128, (2, 32))
    plan = ls.plan(
        llama(), kwargs={"input_ids": ids, "labels": ids}, target="h100",
        mesh={"dp_shard": 2, "pp": 2}, schedule="zbv", microbatches=4, stage=0,
    )  # fmt: skip
    roots = [r for r in plan.modules if r["path"] == ""]
    assert len(roots) == 2
    gather = plan.comm[""]["forward"]["all_gather"]
    assert gather["calls"] == 2 and gather["bytes"] == sum(r["gather_bytes"] for r in roots)
    scatter = plan.comm[""]["backward"]["reduce_scatter"]
    assert scatter["calls"] == 2 and scatter["bytes"] == sum(r["reduce_bytes"] for r in roots)
    assert plan.options["fsdp_units"] == ["", "model.layers.0", "model.layers.3"]


def test_a_zero_bubble_plan_loads_back(tmp_path: Path) -> None:
    """ZBV over 2 ranks of 2 virtual stages, 8 microbatches: the span less the work in it
    came out -4.3e-19 s as a float difference, which the loader refuses as a negative
    time; the bubble is never below 0, and the saved plan loads back equal."""
    m = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(6)])
    plan = ls.plan(
        m, input_shape=(8, 64), mesh={"pp": 2}, stage=0, microbatches=8, schedule="zbv",
        virtual_stages=2, target="h100", progress=False,
    )  # fmt: skip
    assert plan.time["bubble"] >= 0
    path = tmp_path / "plan.json"
    plan.save(path)
    assert ls.load_plan(path).time == plan.time
