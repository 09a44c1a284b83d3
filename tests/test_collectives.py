"""The collectives' cost (``planning.collectives``) on a cluster (``planning.cluster``):
the alpha-beta formulas by hand, then the model against published nccl-tests figures."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import layerscope as ls
from layerscope.errors import InvalidInputError
from layerscope.hardware import device_spec
from layerscope.planning.cluster import Cluster, default_cluster
from layerscope.planning.collectives import (
    Link,
    algorithm,
    bus_bandwidth,
    collective_time,
    consecutive,
    strided,
    times,
)
from layerscope.planning.options import check_options

#: 4 GPUs per node over PCIe (NCCL's Simple protocol only) at 1,000 B/s, half of it
#: reached (500); 2 NICs of 100 B/s, half reached: a node's NICs carry 100 B/s. Base 1 s,
#: 2 s a step within a node, 10 s between nodes (the Simple ring's; NCCL's tree steps
#: scale alike: over PCIe 4.0/5.7 of the ring's, over the network the same)
TOY = Cluster(4, 1000.0, "pcie", 2, 100.0, 0.5, 0.5, 1.0, 2.0, 10.0)
TREE_PCIE = 2.0 * 4.0 / 5.7


def test_placements() -> None:
    assert consecutive(TOY, 3) == Link(TOY, 3, 3, 1)
    assert consecutive(TOY, 8) == Link(TOY, 8, 4, 2)
    assert consecutive(TOY, 6) == Link(TOY, 6, 2, 2)  # 4 + 2: the fewer counts
    assert strided(TOY, 2, 4) == Link(TOY, 2, 1, 2)  # HSDP 2 x 4: one GPU per node
    assert strided(TOY, 4, 2) == Link(TOY, 4, 2, 2)  # HSDP 4 x 2: two per node
    assert consecutive(TOY, 1) == Link(TOY, 1, 1, 1)
    assert collective_time("all_reduce", 100, consecutive(TOY, 1)) == 0.0
    assert collective_time("all_gather", 0, consecutive(TOY, 4)) == 0.0


def test_ring_collectives_by_hand() -> None:
    one, two = consecutive(TOY, 4), consecutive(TOY, 8)
    # one node: 3 steps of 2 s after 1 s; (n - 1) shards of 100 B at 500 B/s
    assert collective_time("all_gather", 100, one) == pytest.approx(1 + 3 * 2 + 300 / 500)
    # two nodes: 6 steps within, 1 between; 700 B at the node's NICs (100 B/s, all 4 GPUs
    # of the node in the group) rather than the link (500)
    assert two.bandwidth == 100.0
    assert collective_time("all_gather", 100, two) == pytest.approx(1 + 6 * 2 + 10 + 7)
    assert collective_time("reduce_scatter", 800, two) == pytest.approx(1 + 12 + 10 + 7)
    # a chain of 3 hops within a node carries the buffer once
    assert collective_time("broadcast", 100, one) == pytest.approx(1 + 3 * 2 + 100 / 500)


def test_all_reduce_ring_or_tree() -> None:
    two, four = consecutive(TOY, 8), consecutive(TOY, 16)
    # 8 GPUs on 2 nodes: the ring, 12 steps within and 2 between, 2 x 7/8 x 800 B at 100
    # B/s; the tree, a chain of 4 and a hop between nodes both ways, 2 x 800 B at 0.92 of
    # the smaller of the link (500) and twice the NICs (200): on two nodes each node
    # sends the buffer across once each way
    ring = 1 + 12 * 2 + 2 * 10 + 1400 / 100
    tree = 1 + 2 * (3 * TREE_PCIE + 1 * 10) + 1600 / (0.92 * 200)
    assert times("all_reduce", 800, two) == {
        "ring/simple": pytest.approx(ring), "tree/simple": pytest.approx(tree)
    }  # fmt: skip
    assert collective_time("all_reduce", 800, two) == pytest.approx(tree)
    assert algorithm("all_reduce", 800, two) == "tree/simple"
    # 16 GPUs on 4 nodes: log2(4) = 2 hops between nodes each way, at the NICs
    ring = 1 + 24 * 2 + 6 * 10 + 2 * 15 / 16 * 800 / 100
    tree = 1 + 2 * (3 * TREE_PCIE + 2 * 10) + 1600 / (0.92 * 100)
    assert collective_time("all_reduce", 800, four) == pytest.approx(min(ring, tree))
    # HSDP's replicate group of 2, one GPU per node: a quarter of the node's NICs (25
    # B/s), the other GPUs of the node running their own groups; the ring wins
    across = strided(TOY, 2, 4)
    assert across.bandwidth == 25.0
    ring, tree = 1 + 2 * 10 + 100 / 25, 1 + 2 * 10 + 200 / (0.92 * 25)
    assert collective_time("all_reduce", 100, across) == pytest.approx(min(ring, tree)) == ring


def test_point_to_point_by_hand() -> None:
    two = consecutive(TOY, 8)
    # all-to-all of 800 B on 8 GPUs: 700 B leave the GPU, 3/7 of them to its node (300 B
    # at 500 B/s) while 400 B cross its quarter of the NICs (25 B/s)
    assert collective_time("all_to_all", 800, two) == pytest.approx(1 + 2 + 10 + 400 / 25)
    assert collective_time("send", 100, two) == pytest.approx(1 + 10 + 100 / 25)
    assert collective_time("recv", 100, consecutive(TOY, 4)) == pytest.approx(1 + 2 + 0.2)
    with pytest.raises(ValueError, match="unknown kind"):
        collective_time("barrier", 100, two)


#: NCCL's own latencies and an NVLink node of 1e11 B/s, fully reached
NVL = Cluster(4, 1e11, "nvlink", 4, 1e10, 1.0, 1.0)


def test_nvlink_picks_ll128_for_small_and_simple_for_large() -> None:
    """On NVLink NCCL also has LL128: less latency (NCCL's tuning.cc: base 14 us, 1.9
    us a ring step, 1.25 a tree step) at 0.92 of the bandwidth (tree: 0.92 x 7/9 within
    a node)."""
    one = consecutive(NVL, 4)
    small = {
        "ring/simple": 8.4e-6 + 6 * 3.4e-6 + 1500 / 1e11,
        "ring/ll128": 14e-6 + 6 * 1.9e-6 + 1500 / (0.92 * 1e11),
        "tree/simple": 8.4e-6 + 2 * 3 * 4.0e-6 + 2000 / (0.92 * 1e11),
        "tree/ll128": 14e-6 + 2 * 3 * 1.25e-6 + 2000 / (0.92 * 7 / 9 * 1e11),
    }
    assert times("all_reduce", 1000, one) == pytest.approx(small)
    assert algorithm("all_reduce", 1000, one) == "tree/ll128"
    assert algorithm("all_reduce", 10**9, one) == "ring/simple"
    assert collective_time("all_gather", 1000, one) == pytest.approx(8.4e-6 + 3 * 3.4e-6 + 3e-8)


# ---- against published nccl-tests figures ------------------------------------------
#: how far the model may be from a published figure
TOLERANCE = 0.25
GiB = 2**30


def _h100(n: int) -> Link:
    return consecutive(default_cluster(device_spec("h100")), n)


def test_bus_bandwidth_against_published_figures() -> None:
    """Large messages, where bandwidth rules (nccl-tests' ``busbw``, GB/s)."""
    figures = [
        # 8 x H100 in a node, ring (NCCL_ALGO=RING, or all-gather / reduce-scatter):
        # "NCCL can get an effective NVLink bandwidth of 370GB/s" (NCCL's maintainer,
        # NVIDIA/nccl-tests issue 212, 2024-05-06)
        ("all_gather", 8 * GiB // 8, _h100(8), 370e9),
        ("reduce_scatter", 8 * GiB, _h100(8), 370e9),
        # H100 nodes over 8 x NDR 400 Gb/s: "For NDR @ 400Gbps you should see 46-48GB/s
        # per NIC" (NVIDIA/nccl-tests issue 290, 2025-03-03): 8 x 47 on the ring
        ("all_reduce", 8 * GiB, _h100(32), 8 * 47e9),
        # 248 x 8 H200, 8 NICs each, 512 MB all-reduce, NCCL's default algorithm:
        # "typically measuring around 350G" (NVIDIA/nccl-tests issue 283, 2025-01-18)
        ("all_reduce", 512 * 2**20,
         consecutive(default_cluster(device_spec("h200")), 1984), 350e9),
        # DGX A100, 8 x 200 Gb/s HDR: "we measure 192GB/s AllReduce BusBW" (NVIDIA/nccl
        # issue 812, 2023-03-31)
        ("all_reduce", 8 * GiB, consecutive(default_cluster(device_spec("a100")), 32), 192e9),
        # 8 x A100 in a node over NVLink: "close to 240 GB/s" (NVIDIA/nccl issue 1712,
        # 2025-05-21)
        ("all_reduce", 8 * GiB, consecutive(default_cluster(device_spec("a100")), 8), 240e9),
    ]  # fmt: skip
    for kind, payload, link, published in figures:
        model = bus_bandwidth(kind, payload, link)
        assert abs(model / published - 1) <= TOLERANCE, (kind, link.size, model, published)


def test_small_message_latency_against_a_published_figure() -> None:
    """2 nodes of 8 Hopper GPUs (H20: NVLink 4, 8 ConnectX-7 NDR per node), all-reduce
    of 4 B to 1 KiB: 46.3-47.8 us measured (NVIDIA/nccl issue 1244, 2024-04-09, NCCL
    2.21.5, its NVLSTree algorithm, which the model does not have: it takes its tree)."""
    for payload in (8, 1024):
        model = collective_time("all_reduce", payload, _h100(16))
        assert abs(model / 47e-6 - 1) <= TOLERANCE, (payload, model)


# ---- the cluster option ----------------------------------------------------------
def test_default_clusters_per_part() -> None:
    h100, a100 = default_cluster(device_spec("h100")), default_cluster(device_spec("a100"))
    assert (h100.gpus_per_node, h100.nics_per_node, h100.nic_bandwidth) == (8, 8, 50e9)
    assert h100.intra == pytest.approx(450e9 * 20.6 / 25)  # NCCL's 20.6 GB/s per link
    assert (a100.intra_bandwidth, a100.nic_bandwidth) == (300e9, 25e9)
    assert a100.intra == pytest.approx(240e9) and a100.node_nics == pytest.approx(192e9)
    l4 = default_cluster(device_spec("l4"))
    assert (l4.intra_kind, l4.intra_bandwidth, l4.intra_latency) == ("pcie", 32e9, 5.7e-6)
    assert any("assumed" in s for s in l4.sources)


def test_cluster_and_inter_node_bandwidth_options() -> None:
    opts = check_options({"cluster": {"nics_per_node": 4}})
    given = {"nics_per_node": 4, "sources": ("given by the user",)}
    assert opts.network == Cluster(**{**default_cluster(opts.target).to_dict(), **given})
    assert check_options(opts.to_dict()) == opts
    # inter_node_bandwidth: NIC line rate per GPU, the node's NICs together 8 x it
    override = check_options({"inter_node_bandwidth": 1e10}).network
    assert override.node_nics == pytest.approx(8 * 1e10 * 0.96)
    with pytest.raises(InvalidInputError, match="unknown key 'nic'"):
        check_options({"cluster": {"nic": 1}})
    with pytest.raises(InvalidInputError, match=r"cluster\['nic_efficiency'\]"):
        check_options({"cluster": {"nic_efficiency": 2}})
    with pytest.raises(InvalidInputError, match=r"cluster\['intra_kind'\]"):
        check_options({"cluster": {"intra_kind": "ib"}})


def test_a_plan_states_its_cluster_and_follows_it() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    x = torch.randn(8, 64)
    plan = ls.plan(model, x, world_size=16, sharding="ddp")
    slow = ls.plan(model, x, world_size=16, sharding="ddp",
                   cluster={"nic_bandwidth": 1e6, "nics_per_node": 1})  # fmt: skip
    assert plan.options["cluster"]["nics_per_node"] == 8
    assert plan.options["inter_node_bandwidth"] == 50e9  # per GPU: 8 x 400 Gb/s / 8
    assert slow.options["inter_node_bandwidth"] == 1e6 / 8
    assert slow.time["comm"] > plan.time["comm"]


@pytest.mark.slow
def test_fsdp_throughput_per_gpu_stays_flat_past_a_node() -> None:
    """A 7B Llama under FSDP2 (4 x 2,048 tokens per GPU, blocks checkpointed) on 8, 64
    and 512 H100s: the node's NICs carry the collectives, which hide under compute, so
    tokens/s per GPU moves by under 3 %: only by what the longer hidden collectives slow
    compute by (contention; published runs stay nearly flat: MPT-7B 10.6 K tokens/s per
    GPU on 8, 9.7-10.5 K on 128-512, docs/plan.md)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, use_cache=False,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).train()
    ids = torch.zeros(4, 2048, dtype=torch.long, device="meta")
    options: dict[str, Any] = {"target": "h100", "sharding": "fsdp", "checkpoint": "blocks",
               "loss_fn": lambda o: o.logits.float().sum()}  # fmt: skip
    first = ls.plan(model, ids, world_size=8, **options)
    rates = [
        float(p.tokens_per_s or 0)
        for p in (first, *(ls.plan(model, ids, world_size=n, **options) for n in (64, 512)))
    ]
    assert min(rates) > 0
    assert max(rates) / min(rates) < 1.03, rates
