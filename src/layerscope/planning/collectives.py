"""Seconds one collective takes on a cluster, as NCCL runs it (``docs/plan.md``,
"Collectives"): an alpha-beta cost per algorithm and protocol, the cheapest taken.

A group of ``n`` GPUs sits ``k`` to a node on ``m`` nodes (``Link``). Its bandwidth
``B`` (bytes/s NCCL moves per GPU, at the cluster's efficiencies): within one node the
GPU's link; across nodes the smaller of that and the group's share of its node's NICs,
``k / gpus_per_node`` of them. NCCL builds one ring (and tree) per NIC, so the node's
NICs together carry the inter-node part; the node's other GPUs run their own groups'
collectives at the same time (HSDP's replicate groups), hence the share.

- **ring** (every kind): ``t = base + s_intra * l_intra + s_inter * l_inter + w / (f B)``
  with ``w`` the wire bytes per GPU (``metrics.commkinds.wire_bytes``), ``s`` the ring's
  steps (all-reduce ``2(n-1)``, ``2(m-1)`` of them between nodes; all-gather and
  reduce-scatter ``n-1``, ``m-1``; broadcast and reduce a chain of ``n-1`` hops);
- **tree** (all-reduce; NCCL's double binary tree between nodes, a chain within each):
  ``t = base + 2((k-1) l_intra + floor(log2 m) l_inter) + 2 b / (f 0.92 B)``, ``b`` the
  payload; on two nodes each node sends the buffer across once each way (half in each
  tree), so ``B`` is the smaller of the node's link (what NCCL's tuner credits there) and
  twice the NICs';
- **point to point** (all-to-all, gather, scatter, send, receive): one step, the wire
  bytes split between the GPU's link (peers in its node) and its share of the NICs;
- **protocols**: Simple (``f = 1``) and, on NVLink nodes, LL128 (``f = 0.92``; tree
  ``0.92 * 7/9`` within a node, ``0.92 * 120/128`` across), each with NCCL's own base and
  per-step latencies, scaled by the cluster's (the Simple ring's).

The cheapest algorithm and protocol is taken, a stand-in for NCCL's tuner, which does
the same over its own model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``: the
formulas above are its, with its constants). Not modelled: NCCL's LL protocol (the
smallest messages; NCCL's lowest latency, half the bandwidth; with it NCCL's tuner
predicts about half the small-message latency measured, ``docs/plan.md``), NVLink SHARP
(NVLS) and CollNet, PAT, per-channel bandwidth caps, the network's congestion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning.cluster import BASE_LATENCY, SIMPLE_STEP, Cluster

#: NCCL's latencies, seconds (``tuning.cc``, ``ncclTunerConstantsDefaults``): base per
#: (algorithm, protocol), and per step by hop
_BASE = {("ring", "simple"): 8.4e-6, ("ring", "ll128"): 14.0e-6,
         ("tree", "simple"): 8.4e-6, ("tree", "ll128"): 14.0e-6}  # fmt: skip
_STEP = {
    ("ring", "simple"): {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 14.0e-6},
    ("ring", "ll128"): {"nvlink": 1.9e-6, "pcie": 2.5e-6, "net": 4.0e-6},
    ("tree", "simple"): {"nvlink": 4.0e-6, "pcie": 4.0e-6, "net": 14.0e-6},
    ("tree", "ll128"): {"nvlink": 1.25e-6, "pcie": 1.9e-6, "net": 8.5e-6},
}
#: the fraction of the Simple protocol's bandwidth each reaches (``tuning.cc``)
_TREE = 0.92
_LL128 = 0.92
POINT_TO_POINT = ("all_to_all", "gather", "scatter", "send", "recv", "other")
RINGS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


@dataclass(frozen=True)
class Link:
    """Where a collective's group sits: ``size`` GPUs on ``nodes`` nodes of ``cluster``,
    ``per_node`` of them in each (the fewest, where nodes differ)."""

    cluster: Cluster
    size: int
    per_node: int
    nodes: int

    @property
    def bandwidth(self) -> float:
        """Bytes/s one GPU of the group moves in a ring or tree (module doc)."""
        if self.nodes == 1:
            return self.cluster.intra
        return self.nics if self.per_node == 1 else min(self.cluster.intra, self.nics)

    @property
    def nics(self) -> float:
        """Bytes/s of the group's share of its nodes' NICs (module doc)."""
        c = self.cluster
        return c.node_nics * self.per_node / c.gpus_per_node

    @property
    def nic_share(self) -> float:
        """Bytes/s of NIC one GPU has when every GPU of its node sends at once."""
        return self.cluster.node_nics / self.cluster.gpus_per_node


def consecutive(cluster: Cluster, size: int) -> Link:
    """A group of ``size`` consecutive ranks, ranks filling nodes in order."""
    g = cluster.gpus_per_node
    if size <= g:
        return Link(cluster, size, max(size, 1), 1)
    return Link(cluster, size, size % g or g, -(-size // g))


def strided(cluster: Cluster, size: int, stride: int) -> Link:
    """A group of ``size`` ranks ``stride`` apart (HSDP's replicate group over shard
    groups of ``stride`` consecutive ranks)."""
    g = cluster.gpus_per_node
    per_node = min(size, max(1, g // stride) if stride < g else 1)
    return Link(cluster, size, per_node, -(-size // per_node))


def _latency(link: Link, algo: str, proto: str, intra: int, inter: int) -> float:
    """Base plus ``intra`` steps within a node and ``inter`` between nodes, NCCL's
    figures for ``(algo, proto)`` scaled by the cluster's (its Simple ring's)."""
    c = link.cluster
    hop = c.intra_kind
    step = _STEP[algo, proto]
    base = _BASE[algo, proto] * c.base_latency / BASE_LATENCY
    l_intra = step[hop] * c.intra_latency / SIMPLE_STEP[hop]
    l_inter = step["net"] * c.inter_latency / SIMPLE_STEP["net"]
    return base + intra * l_intra + inter * l_inter


def _ring_steps(kind: str, n: int, m: int) -> tuple[int, int]:
    """(steps within a node, steps between nodes) of a ring collective."""
    if kind == "all_reduce":
        return 2 * (n - 1) - 2 * (m - 1), 2 * (m - 1)
    return (n - 1) - (m - 1), m - 1


def times(kind: str, payload: int, link: Link) -> dict[str, float]:
    """Seconds of one collective of ``kind`` with ``payload`` bytes (``commkinds``'
    convention) over ``link``, per ``"algorithm/protocol"`` NCCL could pick (module
    doc); empty when nothing crosses a link."""
    n, m = link.size, link.nodes
    if n < 2 or not payload:
        return {}
    protos = ("simple", "ll128") if link.cluster.intra_kind == "nvlink" else ("simple",)
    if kind in POINT_TO_POINT:
        return {"p2p/simple": _p2p(kind, payload, link)}
    if kind not in RINGS:
        raise ValueError(f"unknown kind of collective {kind!r}")
    wire = wire_bytes(kind, payload, n)
    out: dict[str, float] = {}
    intra, inter = _ring_steps(kind, n, m)
    for proto in protos:
        f = _LL128 if proto == "ll128" else 1.0
        out[f"ring/{proto}"] = _latency(link, "ring", proto, intra, inter) + wire / (
            f * link.bandwidth
        )
    if kind == "all_reduce":
        k = link.per_node
        bw = min(link.cluster.intra, 2 * link.nics) if m == 2 and k > 1 else link.bandwidth
        for proto in protos:
            f = _TREE * ((7 / 9 if m == 1 else 120 / 128) if proto == "ll128" else 1.0)
            lat = _latency(link, "tree", proto, 2 * (k - 1), 2 * int(math.log2(m)))
            out[f"tree/{proto}"] = lat + 2 * payload / (f * bw)
    return out


def _p2p(kind: str, payload: int, link: Link) -> float:
    """All-to-all, gather, scatter and point-to-point: one step; the wire bytes split
    by where the peers are, over the GPU's link and its NIC share at once."""
    n, k, m = link.size, link.per_node, link.nodes
    root = kind in ("gather", "scatter")
    wire = wire_bytes(kind, payload, n, root=root, received=payload)
    if kind in ("send", "recv", "other"):
        inside, outside = (wire, 0.0) if m == 1 else (0.0, wire)
    else:
        inside = wire * (k - 1) / (n - 1)
        outside = wire - inside
    latency = _latency(link, "ring", "simple", 1 if inside else 0, 1 if outside else 0)
    intra = inside / link.cluster.intra if inside else 0.0
    return latency + max(intra, outside / link.nic_share if outside else 0.0)


def collective_time(kind: str, payload: int, link: Link) -> float:
    """Seconds of the cheapest algorithm and protocol (module doc); 0 when nothing
    crosses a link."""
    return min(times(kind, payload, link).values(), default=0.0)


def algorithm(kind: str, payload: int, link: Link) -> str:
    """The ``"algorithm/protocol"`` ``collective_time`` takes ("" when none)."""
    options = times(kind, payload, link)
    return min(options, key=options.__getitem__) if options else ""


def bus_bandwidth(kind: str, payload: int, link: Link) -> float:
    """nccl-tests' bus bandwidth of the modelled collective, bytes/s: the wire bytes
    per GPU over the time (``busbw = algbw * 2(n-1)/n`` for all-reduce, ``(n-1)/n`` for
    all-gather and reduce-scatter, of the whole buffer)."""
    return wire_bytes(kind, payload, link.size) / collective_time(kind, payload, link)


__all__ = [
    "POINT_TO_POINT",
    "RINGS",
    "Link",
    "algorithm",
    "bus_bandwidth",
    "collective_time",
    "consecutive",
    "strided",
    "times",
]
