"""The cluster a plan's collectives run on (``docs/plan.md``, "Collectives"): GPUs per
node and the link joining them, the NICs each node has, the fraction of each link's
line rate NCCL reaches, and NCCL's latencies. ``default_cluster(spec)`` answers the
built-in parts' reference systems; ``ls.plan(cluster=...)`` takes another.

Sources of the defaults (bandwidths per direction; 1 GB/s = 1e9 B/s):

- DGX H100 / H200 (and HGX boards built like them): 8 GPUs joined by NVLink 4 and
  NVSwitch, 900 GB/s bidirectional per GPU (450 per direction: 18 links of 25 GB/s);
  eight single-port ConnectX-7 at up to 400 Gb/s (50 GB/s) for the compute fabric, one
  per GPU (NVIDIA DGX BasePOD reference architecture, "Core Components", DGX H200 and
  H100 key specifications; NVIDIA DGX H100 User Guide, 1.2.3 "Network Modules", Table 6:
  each ConnectX-7 port's GPU). The two dual-port ConnectX-7 for storage and management
  carry no collectives and are left out.
- DGX A100: 8 GPUs, NVLink 3 and NVSwitch, 600 GB/s bidirectional per GPU (12 links of
  25 GB/s per direction: NVIDIA developer blog "Introducing NVIDIA HGX A100", 2020);
  8 x 200 Gb/s HDR InfiniBand for the compute fabric (NVIDIA's NCCL team, NVIDIA/nccl
  issue 812, 2023-03-31: "On an Nvidia DGX-A100 system we have 8x200Gbit/s IB cards").
- PCIe parts (H100 PCIe, L4, L40S, RTX 4090): no reference system is assumed by a
  datasheet. Assumed here, and labelled so: 8 GPUs per node talking over their PCIe x16
  slot (the spec's ``interconnect``), one 400 Gb/s NIC per GPU (layerscope's earlier
  default ``inter_node_bandwidth``). Give ``cluster=`` for a real system.
- Efficiencies: NCCL's topology model credits an NVLink 4 link with 20.6 GB/s of its 25
  (0.824), an NVLink 3 link with 20.0 (0.8), a PCIe Gen3 x16 link with 12 of 16 (0.75)
  and a NIC with 12 GB/s per 100 Gb/s (0.96) (NCCL ``src/graph/topo.h``:
  ``SM90_NVLINK_BW``, ``SM80_NVLINK_BW``, ``PCI_BW``, ``NET_BW``).
- Latencies: NCCL's tuner constants for the Simple protocol's ring (``src/graph/
  tuning.cc``, ``ncclTunerConstantsDefaults``): a base of 8.4 us per collective, per
  step 3.4 us over NVLink, 5.7 us over PCIe, 14 us over the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from layerscope.validate import check_choice, check_int, check_keys, check_number, refuse

if TYPE_CHECKING:
    from layerscope.hardware import DeviceSpec

#: NCCL's per-step latency of the Simple protocol's ring, seconds, by hop (tuning.cc)
SIMPLE_STEP = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 14.0e-6}
#: NCCL's base latency of a ring collective (Simple protocol), seconds (tuning.cc)
BASE_LATENCY = 8.4e-6
#: the fraction of a link's line rate NCCL reaches (topo.h: per-link bandwidth NCCL
#: credits over the line rate): NVLink 4 20.6/25, NVLink 3 20.0/25, PCIe 12/16, NIC 12/12.5
EFFICIENCY = {"sm90": 0.824, "sm80": 0.8, "pcie": 0.75, "net": 0.96}
#: one 400 Gb/s NIC, bytes/s per direction
NDR = 400e9 / 8
#: one 200 Gb/s NIC (HDR InfiniBand), bytes/s per direction
HDR = 200e9 / 8

_DGX_H100 = (
    "NVIDIA DGX BasePOD reference architecture, Core Components (DGX H100/H200: 8x "
    "single-port ConnectX-7, 400 Gb/s) and DGX H100 User Guide 1.2.3, Table 6 (one per GPU)"
)
_DGX_A100 = (
    "DGX A100: 8x 200 Gb/s HDR InfiniBand (NVIDIA/nccl issue 812); NVLink 3, 600 GB/s "
    "bidirectional per GPU (NVIDIA blog, Introducing NVIDIA HGX A100)"
)
_ASSUMED = "assumed (no reference system): 8 GPUs per node over PCIe x16, one 400 Gb/s NIC per GPU"
_NCCL = "NCCL src/graph/topo.h (link efficiencies) and src/graph/tuning.cc (latencies)"


@dataclass(frozen=True)
class Cluster:
    """A training cluster as the collectives see it (module doc); bandwidths in bytes/s
    per direction at line rate, latencies in seconds."""

    #: GPUs in one node
    gpus_per_node: int
    #: one GPU's link to the other GPUs of its node (NVLink through NVSwitch, or PCIe)
    intra_bandwidth: float
    #: "nvlink" or "pcie": which NCCL latency and protocol set the node's link has
    intra_kind: str
    #: NICs per node that carry collectives (the compute fabric)
    nics_per_node: int
    #: one NIC's bandwidth
    nic_bandwidth: float
    #: the fraction of ``intra_bandwidth`` NCCL reaches
    intra_efficiency: float
    #: the fraction of ``nic_bandwidth`` NCCL reaches
    nic_efficiency: float = EFFICIENCY["net"]
    #: seconds every collective costs (launch, set-up)
    base_latency: float = BASE_LATENCY
    #: seconds per ring step between two GPUs of a node (Simple protocol)
    intra_latency: float = SIMPLE_STEP["nvlink"]
    #: seconds per ring step between two nodes (Simple protocol)
    inter_latency: float = SIMPLE_STEP["net"]
    sources: tuple[str, ...] = ()

    @property
    def intra(self) -> float:
        """Bytes/s NCCL moves over one GPU's link within the node."""
        return self.intra_bandwidth * self.intra_efficiency

    @property
    def node_nics(self) -> float:
        """Bytes/s NCCL moves over one node's NICs together."""
        return self.nics_per_node * self.nic_bandwidth * self.nic_efficiency

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sources"] = list(self.sources)
        return out

    def with_nic_per_gpu(self, bandwidth: float) -> Cluster:
        """This cluster with ``bandwidth`` bytes/s of NIC line rate per GPU (what
        ``inter_node_bandwidth=`` gives): the node's NICs together carry
        ``gpus_per_node`` times it."""
        return replace(
            self,
            nic_bandwidth=bandwidth * self.gpus_per_node / self.nics_per_node,
            sources=(*self.sources, f"inter_node_bandwidth={bandwidth:g} B/s per GPU, given"),
        )


NAMES = tuple(f.name for f in fields(Cluster))


def _nvlink(spec: DeviceSpec, nic: float, source: str) -> Cluster:
    assert spec.interconnect is not None
    return Cluster(
        spec.node_size, spec.interconnect, "nvlink", spec.node_size, nic,
        EFFICIENCY["sm80" if spec.arch == "sm80" else "sm90"], sources=(source, _NCCL),
    )  # fmt: skip


def default_cluster(spec: DeviceSpec) -> Cluster:
    """The reference system of a part (module doc): a DGX for the SXM parts, the stated
    assumption for PCIe parts and custom specs (their ``interconnect`` and
    ``node_size``; a spec without an interconnect is taken to talk within its node at
    one 400 Gb/s NIC's line rate)."""
    if spec.interconnect_kind == "nvlink" and spec.interconnect is not None:
        if spec.arch == "sm80":
            return _nvlink(spec, HDR, _DGX_A100)
        return _nvlink(spec, NDR, _DGX_H100)
    link = spec.interconnect if spec.interconnect is not None else NDR
    return Cluster(
        spec.node_size, link, "pcie", spec.node_size, NDR, EFFICIENCY["pcie"],
        intra_latency=SIMPLE_STEP["pcie"], sources=(_ASSUMED, _NCCL),
    )  # fmt: skip


def check_cluster(value: Any, spec: DeviceSpec) -> Cluster | None:
    """``cluster=``: None (the target's reference system), a ``Cluster``, or a mapping of
    its fields (the rest the target's)."""
    if value is None or isinstance(value, Cluster):
        return value
    given = check_keys("cluster", value, NAMES, what="a mapping of the cluster's fields")
    base = default_cluster(spec)
    out: dict[str, Any] = {}
    for key, v in given.items():
        label = f"cluster[{key!r}]"
        if key in ("gpus_per_node", "nics_per_node"):
            out[key] = check_int(label, v, 1)
        elif key == "intra_kind":
            check_choice(label, v, ["nvlink", "pcie"])
            out[key] = v
        elif key == "sources":
            if isinstance(v, str) or not all(isinstance(s, str) for s in v):
                refuse(label, v, "a list of strings")
            out[key] = tuple(v)
        elif key.endswith("efficiency"):
            out[key] = check_number(label, v, 0, 1, positive=True)
        else:
            out[key] = check_number(label, v, 0, positive=key.endswith("bandwidth"))
    if "sources" not in out:
        out["sources"] = ("given by the user",)
    return replace(base, **out)


def as_mapping(value: Cluster | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A cluster option in its plain form (``Options.to_dict``)."""
    if isinstance(value, Cluster):
        return value.to_dict()
    return None if value is None else dict(value)


__all__ = [
    "BASE_LATENCY",
    "EFFICIENCY",
    "HDR",
    "NDR",
    "SIMPLE_STEP",
    "Cluster",
    "as_mapping",
    "check_cluster",
    "default_cluster",
]
