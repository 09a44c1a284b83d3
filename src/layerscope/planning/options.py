"""``ls.plan``'s options, typed and checked at the boundary: one ``Options`` holds every
option of a plan, and ``ls.plan``, ``ls.plan_sweep``, ``Plan.max_micro_batch``, the
document's ``options`` section and ``layerscope plan`` all build and read it, so no
option is lost on the way."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from layerscope import hardware
from layerscope.errors import InvalidInputError
from layerscope.hardware import BY_NAME, DeviceSpec, device_spec
from layerscope.metrics.memory.records import policy_name
from layerscope.planning.cluster import Cluster, as_mapping, check_cluster, default_cluster
from layerscope.planning.loss import LOSSES
from layerscope.planning.mesh import Mesh, check_mesh
from layerscope.planning.states import OPTIMIZER_STATES, PRECISIONS, REDUCE_DTYPES
from layerscope.planning.strategies import STRATEGIES
from layerscope.planning.strategy import Strategy
from layerscope.validate import (
    MAX_TENSOR_BYTES as MAX_BYTES,
)
from layerscope.validate import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    close_matches,
    refuse,
)

#: Default bytes kept aside from the budget for what the timeline leaves out: the CUDA
#: context, cuBLAS/cuDNN workspaces, the caching allocator's fragmentation.
RESERVE_BYTES = 2 * 2**30
#: The inter-node bandwidth per GPU that plans used before ``cluster=``, bytes/s per
#: direction (400 Gb/s: one NIC per GPU); ``inter_node_bandwidth=`` now defaults to the
#: cluster's NICs (``planning.cluster``).
INTER_NODE_BANDWIDTH = 400e9 / 8
OUT_OF_SCOPE = (
    "not modelled: asynchronous tensor parallelism, DualPipeV (overlapped forward and "
    "backward pipeline steps), uneven expert routing"
)

_COMPUTE = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16,
            "fp16-mixed": torch.float16}  # fmt: skip


@dataclass(frozen=True)
class Options:
    """Every option of ``ls.plan``, checked (``check_options``); ``to_dict``/``from_dict``
    for their plain form."""

    target: DeviceSpec
    world_size: int
    sharding: str
    precision: str
    optimizer: str
    grad_accum: int
    #: bytes per GPU: the target's memory unless given (None: a target without a size)
    budget: int | None
    reserve_bytes: int
    rank: int
    reshard_after_forward: bool
    #: FSDP2 unit paths (None: the repeated blocks)
    units: tuple[str, ...] | None
    #: NIC line rate per GPU, bytes/s (None: the cluster's NICs over its GPUs per node)
    inter_node_bandwidth: float | None
    bucket_cap_mb: float
    #: HSDP: (replicate, shard) group sizes, their product the world size; None: plain
    hsdp: tuple[int, int] | None = None
    #: None, "blocks", "op", "auto", module paths (a tuple) or a selective-checkpointing
    #: policy function (``planning.oppolicy``)
    checkpoint: str | tuple[str, ...] | Callable[..., Any] | None = None
    #: the cluster the collectives run on (None: the target's reference system)
    cluster: Cluster | None = None
    #: FSDP2's ``MixedPrecisionPolicy.reduce_dtype``: the dtype gradients are reduced in
    #: (None: float32 under mixed precision, else the parameters')
    reduce_dtype: str | None = None
    #: the model under ``torch.compile``: pointwise kernels fused (``kernels.fused``)
    compile: bool = False
    #: the linears in float8 as torchao trains them (``kernels.float8``)
    float8: bool = False
    #: FSDP2 all-gathers the float8 linears' weights in float8 (torchao's
    #: ``enable_fsdp_float8_all_gather``: ``strategies.fsdp``)
    float8_all_gather: bool = False
    #: "plain" (the analysis's logits and loss) or "fused" (``planning.loss``)
    loss: str = "plain"
    #: the device mesh the run was given as (``planning.mesh``; None: ``sharding``,
    #: ``world_size`` and ``hsdp`` as given)
    mesh: Mesh | None = None
    #: tensor parallelism's plan (``planning.tensorparallel``): (module path pattern,
    #: style) pairs; None: the model's own
    tp_plan: tuple[tuple[str, Any], ...] | None = None
    #: sequence parallelism in the tensor-parallel blocks (``planning.tensorparallel``)
    sequence_parallel: bool = False
    #: pipeline parallelism (``planning.pipeline``): microbatches per step (None: as many
    #: as stages), the schedule, the piece each later stage starts at (None: the blocks
    #: split evenly), the stage planned (None: the one whose peak is highest)
    microbatches: int | None = None
    schedule: str = "1f1b"
    pp_split: tuple[str, ...] | None = None
    stage: int | None = None
    #: ``interleaved_1f1b``: the model chunks (stages) each rank holds (None: 2)
    virtual_stages: int | None = None
    #: the last stage keeps each microbatch's output to return them merged (torch's
    #: ``schedule.step(return_outputs=True)``, its default; torchtitan passes False)
    return_outputs: bool = True

    @property
    def tp(self) -> int:
        """GPUs each tensor-parallel layer is split over (the mesh's ``tp``; 1: none)."""
        return self.mesh.tp if self.mesh else 1

    @property
    def pp(self) -> int:
        """Pipeline stages (the mesh's ``pp``; 1: none)."""
        return self.mesh.pp if self.mesh else 1

    @property
    def cp(self) -> int:
        """Ranks the sequence is split over (the mesh's ``cp``; 1: none)."""
        return self.mesh.cp if self.mesh else 1

    @property
    def ep(self) -> int:
        """Ranks each MoE layer's experts are split over (the mesh's ``ep``; 1: none)."""
        return self.mesh.ep if self.mesh else 1

    @property
    def virtual(self) -> int:
        """Model chunks each pipeline rank holds (``interleaved_1f1b``: 2 unless given;
        ``zero_bubble``: 1 unless given; ``zbv``: 2)."""
        if self.schedule == "interleaved_1f1b":
            return self.virtual_stages or 2
        if self.schedule == "zbv":
            return 2
        return (self.virtual_stages or 1) if self.schedule == "zero_bubble" else 1

    @property
    def dp_size(self) -> int:
        """GPUs data parallelism runs over: the world size over the tensor-parallel
        groups and the pipeline's stages."""
        return self.world_size // (self.tp * self.pp)  # FSDP2 over dp_shard x cp

    @property
    def shard_size(self) -> int:
        """GPUs a tensor is sharded over by data parallelism (FSDP2: all the
        data-parallel ranks; HSDP: one shard group)."""
        return self.hsdp[1] if self.hsdp else self.dp_size

    @property
    def replicas(self) -> int:
        """Copies of each shard (HSDP's replicate groups; 1 otherwise)."""
        return self.hsdp[0] if self.hsdp else 1

    @property
    def network(self) -> Cluster:
        """The cluster the collectives run on: ``cluster`` or the target's reference
        system (``planning.cluster``), with ``inter_node_bandwidth`` as its NICs when
        given."""
        out = self.cluster or default_cluster(self.target)
        if self.inter_node_bandwidth is not None:
            out = out.with_nic_per_gpu(self.inter_node_bandwidth)
        return out

    @property
    def mixed(self) -> bool:
        return self.precision.endswith("-mixed")

    @property
    def autocast(self) -> bool:
        """Mixed precision as autocast runs it (DDP's): float32 weights, 16-bit copies."""
        return self.mixed and self.strategy.autocast

    @property
    def compute_dtype(self) -> torch.dtype:
        return _COMPUTE[self.precision]

    @property
    def strategy(self) -> Strategy:
        """The parallelism strategy the plan is made with (``planning.strategies``)."""
        return STRATEGIES[self.sharding]

    # ---- plain form ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every option as ``ls.plan`` takes it (``ls.plan(model, x, **o.to_dict())``): a
        known target by name, another as its spec's mapping; tuples as lists."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        spec = self.target
        out["target"] = spec.name if BY_NAME.get(spec.name) == spec else spec.to_dict()
        for key in ("units", "hsdp", "checkpoint", "pp_split"):
            if isinstance(out[key], tuple):
                out[key] = list(out[key])
        out["tp_plan"] = dict(self.tp_plan) if self.tp_plan is not None else None
        out["cluster"] = as_mapping(self.cluster)
        out["mesh"] = self.mesh.to_dict() if self.mesh else None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Options:
        """Options from ``to_dict``'s form (or any part of it: the rest as ``ls.plan``'s
        defaults), checked."""
        return check_options(data)

    def replace(self, **changes: Any) -> Options:
        """These options with ``changes``, checked again together."""
        return check_options({**self.to_dict(), **changes})

    def section(
        self, fsdp_units: list[str], tp_plan: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The document's ``options`` section (``Plan.options``): the options in its keys
        and order, with the FSDP2 units and the tensor-parallel plan (its patterns and
        style names) the plan used (budget and reserve are the plan's own fields)."""
        asked = self.checkpoint
        net = self.network
        return {
            "target": self.target.name, "world_size": self.world_size,
            "sharding": self.sharding, "precision": self.precision,
            "optimizer": self.optimizer, "grad_accum": self.grad_accum, "rank": self.rank,
            "reshard_after_forward": self.reshard_after_forward,
            "checkpoint": _checkpoint_words(asked),
            "units": list(self.units) if self.units is not None else None,
            "fsdp_units": fsdp_units,
            "inter_node_bandwidth": net.nics_per_node * net.nic_bandwidth / net.gpus_per_node,
            "bucket_cap_mb": self.bucket_cap_mb,
            "hsdp": list(self.hsdp) if self.hsdp else None, "cluster": net.to_dict(),
            **({"reduce_dtype": self.reduce_dtype} if self.reduce_dtype else {}),
            **({"compile": True} if self.compile else {}),
            **({"float8": True} if self.float8 else {}),
            **({"float8_all_gather": True} if self.float8_all_gather else {}),
            **({"loss": self.loss} if self.loss != "plain" else {}),
            **({"mesh": self.mesh.to_dict()} if self.mesh else {}),
            **({"sequence_parallel": True} if self.sequence_parallel else {}),
            **({"tp_plan": dict(tp_plan)} if tp_plan else {}),
            **({"microbatches": self.microbatches or self.pp, "schedule": self.schedule,
                "pp_split": list(self.pp_split) if self.pp_split else None,
                "return_outputs": self.return_outputs, "virtual_stages": self.virtual}
               if self.pp > 1 else {}),
        }  # fmt: skip


#: ``ls.plan``'s defaults of every option (``budget`` None: the target's memory).
DEFAULTS: dict[str, Any] = {
    "target": "h100", "world_size": 8, "sharding": "fsdp", "precision": "bf16-mixed",
    "optimizer": "adamw", "grad_accum": 1, "budget": None, "reserve_bytes": RESERVE_BYTES,
    "rank": 0, "reshard_after_forward": True, "units": None,
    "inter_node_bandwidth": None, "bucket_cap_mb": 25, "hsdp": None,
    "checkpoint": None, "cluster": None, "reduce_dtype": None, "compile": False,
    "float8": False, "float8_all_gather": False, "loss": "plain", "mesh": None, "tp_plan": None,
    "sequence_parallel": False, "microbatches": None, "schedule": "1f1b", "pp_split": None,
    "stage": None, "return_outputs": True, "virtual_stages": None,
}  # fmt: skip

NAMES = tuple(f.name for f in fields(Options))


def check_options(given: Mapping[str, Any]) -> Options:
    """``Options`` from the options given (``ls.plan``'s keywords; the rest default),
    each checked; an unknown name is refused."""
    unknown = sorted(set(given) - set(NAMES))
    if unknown:
        raise InvalidInputError(
            f"unknown option {unknown[0]!r} for ls.plan; known: {', '.join(sorted(NAMES))}"
        )
    o = {**DEFAULTS, **given}
    mesh = None if o["mesh"] is None else check_mesh(o["mesh"])
    if mesh is not None:
        o |= _from_mesh(mesh, given)
    spec = device_spec(check_target("target", o["target"]))
    if spec.kind != "gpu":
        raise InvalidInputError(f"target must be a GPU spec, got {spec.name!r} ({spec.kind})")
    world = check_int("world_size", o["world_size"], 1)
    tp = mesh.tp if mesh else 1
    pp = mesh.pp if mesh else 1
    dp = world // (tp * pp)
    sharding = o["sharding"]
    check_sharding("sharding", sharding)
    check_choice("precision", o["precision"], list(PRECISIONS))
    check_choice("optimizer", o["optimizer"], list(OPTIMIZER_STATES))
    STRATEGIES[sharding].check(dp)
    units = o["units"]
    if units is not None:
        if not isinstance(units, list | tuple) or not all(isinstance(u, str) for u in units):
            refuse("units", units, "a list of module paths")
        units = tuple(units)
    hsdp = _hsdp(o["hsdp"], sharding, dp)
    for name, used, flag in (("units", bool(units), "--units"),
                              ("reshard_after_forward", o["reshard_after_forward"] is False,
                               "--no-reshard")):  # fmt: skip
        if used and sharding != "fsdp":
            raise InvalidInputError(
                f"{name} ({flag}) is FSDP2's: it needs sharding='fsdp', got {sharding!r}"
            )
    budget = o["budget"]
    # bytes as a saved plan holds them (``ls.load_plan`` reads the same range)
    budget = spec.budget_bytes if budget is None else check_int("budget", budget, 0, MAX_BYTES)
    reserve = check_int("reserve_bytes", o["reserve_bytes"], 0, MAX_BYTES)
    if reserve != RESERVE_BYTES and budget is not None and reserve >= budget > 0:
        raise InvalidInputError(  # a reserve chosen; the default one may exceed a small GPU
            f"reserve_bytes ({reserve:,}) is not below the budget ({budget:,}): nothing would "
            "be left for the run; lower the reserve or raise the budget"
        )
    check_choice("loss", o["loss"], list(LOSSES))
    checkpoint = o["checkpoint"]
    if checkpoint is not None and not isinstance(checkpoint, str) and not callable(checkpoint):
        if not isinstance(checkpoint, list | tuple) or not all(
            isinstance(c, str) for c in checkpoint
        ):
            refuse(
                "checkpoint", checkpoint,
                '"blocks", "op", "auto", a list of module paths or a policy function',
            )  # fmt: skip
        checkpoint = tuple(checkpoint)
    return Options(
        target=spec,
        world_size=world,
        sharding=sharding,
        precision=o["precision"],
        optimizer=o["optimizer"],
        grad_accum=check_int("grad_accum", o["grad_accum"], 1),
        budget=budget,
        reserve_bytes=reserve,
        rank=check_int("rank", o["rank"], 0, (hsdp[1] if hsdp else dp) - 1),
        reshard_after_forward=check_bool("reshard_after_forward", o["reshard_after_forward"]),
        units=units,
        inter_node_bandwidth=None
        if o["inter_node_bandwidth"] is None
        else check_number("inter_node_bandwidth", o["inter_node_bandwidth"], positive=True),
        bucket_cap_mb=check_number("bucket_cap_mb", o["bucket_cap_mb"], positive=True),
        hsdp=hsdp,
        checkpoint=checkpoint,
        cluster=check_cluster(o["cluster"], spec),
        reduce_dtype=_reduce_dtype(o["reduce_dtype"], sharding),
        compile=check_bool("compile", o["compile"]),
        float8=_float8(o["float8"], spec),
        float8_all_gather=_float8_all_gather(o, sharding, hsdp[1] if hsdp else dp),
        loss=str(o["loss"]),
        mesh=mesh,
        tp_plan=_tp_plan(o["tp_plan"], tp),
        sequence_parallel=_sequence_parallel(o["sequence_parallel"], tp),
        **_pipeline(o, pp),
    )


def _checkpoint_words(asked: Any) -> Any:
    """``checkpoint`` as a document holds it: a policy function as ``"policy NAME"``."""
    if callable(asked):
        return f"policy {policy_name(asked)}"
    return asked if isinstance(asked, str | type(None)) else list(asked)


def _pipeline(o: Mapping[str, Any], pp: int) -> dict[str, Any]:
    """The pipeline's options, for a mesh with ``pp`` above 1 (``planning.pipeline``)."""
    from layerscope.planning.pipeline import MULTI_CHUNK, SCHEDULES

    given = [k for k in ("microbatches", "pp_split", "stage", "virtual_stages") if o[k] is not None]
    given += [k for k, v in (("schedule", "1f1b"), ("return_outputs", True)) if o[k] != v]
    if pp == 1:
        if given:
            raise InvalidInputError(
                f"{given[0]} is pipeline parallelism's: give a mesh with pp above 1, e.g. "
                "mesh={'dp_shard': 8, 'pp': 4} (--mesh dp_shard=8,pp=4)"
            )
        return {}
    check_choice("schedule", o["schedule"], list(SCHEDULES))
    split = o["pp_split"]
    if split is not None:
        if not isinstance(split, list | tuple) or not all(isinstance(p, str) for p in split):
            refuse("pp_split", split, "a list of module paths, each the first of a stage")
        split = tuple(split)
    micro = None if o["microbatches"] is None else check_int("microbatches", o["microbatches"], 1)
    stage = o["stage"]
    virtual = o["virtual_stages"]
    if virtual is not None:
        virtual = check_int("virtual_stages", virtual, 1)
        if o["schedule"] == "zbv" and virtual != 2:
            raise InvalidInputError(
                f"virtual_stages={virtual}: schedule='zbv' runs 2 stages a rank (torch's "
                "ScheduleZBVZeroBubble), in a V"
            )
        if o["schedule"] not in (*MULTI_CHUNK, "zbv") and virtual != 1:
            raise InvalidInputError(
                f"virtual_stages={virtual}: a rank holds several stages under "
                "schedule='interleaved_1f1b' or 'zero_bubble' only"
            )
    if o["schedule"] == "1f1b" and micro is not None and micro < pp:
        raise InvalidInputError(
            f"microbatches={micro}: torch's Schedule1F1B needs at least as many "
            f"microbatches as stages ({pp}); give {pp} or more, or schedule='gpipe'"
        )
    if o["schedule"] in MULTI_CHUNK:
        m = micro or pp
        rounds = max(1, m // pp)
        if m % rounds:
            name = {"interleaved_1f1b": "Interleaved1F1B"}.get(
                o["schedule"], "InterleavedZeroBubble"
            )
            raise InvalidInputError(
                f"microbatches={m}: {o['schedule']} runs them in {rounds} rounds of "
                f"{pp} or more (torch's Schedule{name}), so it needs a multiple "
                f"of {rounds}, e.g. {rounds * (m // rounds + 1)}"
            )
    return {
        "microbatches": micro,
        "virtual_stages": virtual,
        "schedule": str(o["schedule"]),
        "pp_split": split,
        "stage": None if stage is None else check_int("stage", stage, 0, pp - 1),
        "return_outputs": check_bool("return_outputs", o["return_outputs"]),
    }


def _tp_plan(value: Any, tp: int) -> tuple[tuple[str, Any], ...] | None:
    """``tp_plan``: a mapping of module path patterns to styles, for a mesh with
    ``tp`` above 1 (each style is checked against the model when it is applied)."""
    if value is None:
        return None
    if tp == 1:
        raise InvalidInputError(
            "tp_plan is tensor parallelism's plan: give a mesh with tp above 1, e.g. "
            "mesh={'dp_shard': 8, 'tp': 2} (--mesh dp_shard=8,tp=2)"
        )
    if not isinstance(value, Mapping) or not value:
        refuse(
            "tp_plan",
            value,
            "a mapping of module path patterns to styles, e.g. "
            "{'layers.*.mlp.up_proj': 'colwise', 'layers.*.mlp.down_proj': 'rowwise'}",
        )
    return tuple(value.items())


def _sequence_parallel(value: Any, tp: int) -> bool:
    if check_bool("sequence_parallel", value) and tp == 1:
        raise InvalidInputError(
            "sequence_parallel shards activations over the tensor-parallel ranks: give a "
            "mesh with tp above 1"
        )
    return bool(value)


def _from_mesh(mesh: Mesh, given: Mapping[str, Any]) -> dict[str, Any]:
    """The data-parallel options a mesh stands for (``Mesh.strategy``); one given beside
    it must agree."""
    derived = mesh.strategy()
    for key, value in derived.items():
        asked = given.get(key)
        if asked is not None and (list(asked) if key == "hsdp" else asked) != (
            list(value) if key == "hsdp" else value
        ):
            raise InvalidInputError(
                f"mesh {mesh.words()} means {key}={_said(value)} ({_FLAGS[key]} "
                f"{_said(value, cli=True)}), but {key}={_said(asked)} was given: give the "
                "mesh alone"
            )
    return derived


def check_target(label: str, value: Any) -> Any:
    """A plan's target as given, when it names a GPU: a built-in (or registered) GPU spec,
    a device profile's path (``*.json``), or a spec (a mapping, a ``DeviceSpec``), which
    ``device_spec`` checks; the CPU and unknown names are refused, naming the GPUs."""
    if not isinstance(value, str) or hardware.is_profile_path(value):
        return value
    name = value.strip().lower()
    if name in hardware.GPUS:
        return value
    why = "a plan prices a GPU's training step" if name in hardware.BY_NAME or name == "cpu" else ""
    refuse(label, value, f"a GPU ({', '.join(hardware.GPUS)}) or a device profile's path "
           "(*.json, layerscope calibrate's)", why=why,
           close=[] if why else close_matches(name, hardware.GPUS))  # fmt: skip


#: The CLI's flag of each option a mesh stands for.
_FLAGS = {"world_size": "--world-size", "sharding": "--sharding", "hsdp": "--hsdp"}


def _said(value: Any, cli: bool = False) -> str:
    """An option's value as Python (``'fsdp'``, ``(2, 4)``) or the CLI (``fsdp``, ``2,4``)
    spells it."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) if cli else repr(tuple(value))
    return str(value) if cli else repr(value)


#: Shardings asked for by another name: (the names, why, the Python and the CLI hint).
_OTHER_SHARDINGS = (
    (("zero3", "zero-3", "zero_3", "fsdp2"), "ZeRO-3 is 'fsdp': FSDP2 shards parameters, "
     "gradients and optimizer states", "", ""),
    (("hsdp",), "HSDP is 'fsdp' on a 2-D mesh",
     "sharding='fsdp' with hsdp=(R, S), or mesh={'dp_replicate': R, 'dp_shard': S}",
     "--sharding fsdp --hsdp R,S, or --mesh dp_replicate=R,dp_shard=S"),
)  # fmt: skip


def check_sharding(label: str, value: Any, *, cli: bool = False) -> str:
    """``value`` if it is a sharding strategy's name; ZeRO-3 and HSDP are refused with
    how to ask for them (as the CLI spells it, with ``cli``)."""
    choices = list(STRATEGIES)
    word = value.strip().lower() if isinstance(value, str) else None
    for names, why, python, flags in _OTHER_SHARDINGS:
        if word in names and value not in choices:
            hint = flags if cli else python
            refuse(label, value, f"one of {', '.join(map(repr, choices))}",
                   why=f"{why}: give {hint}" if hint else why, close=["fsdp"])  # fmt: skip
    return str(check_choice(label, value, choices))


def _float8(value: Any, spec: DeviceSpec) -> bool:
    """``float8``: needs a target with float8 tensor cores."""
    if check_bool("float8", value) and "float8_e4m3fn" not in spec.peak_flops:
        raise InvalidInputError(
            f"float8 trains the linears on float8 tensor cores, which {spec.name} does not "
            "have (H100, H200, L4, L40S and newer do): drop float8 or pick such a target"
        )
    return bool(value)


def _float8_all_gather(o: Mapping[str, Any], sharding: str, shard: int) -> bool:
    """``float8_all_gather``: FSDP2's, of float8 linears, over at least 2 GPUs."""
    if not check_bool("float8_all_gather", o["float8_all_gather"]):
        return False
    if not o["float8"]:
        raise InvalidInputError(
            "float8_all_gather all-gathers the float8 linears' weights in float8: it needs "
            "float8=True (--float8)"
        )
    if sharding != "fsdp" or shard < 2:
        raise InvalidInputError(
            f"float8_all_gather is FSDP2's all-gather in float8: it needs sharding='fsdp' "
            f"over 2 or more GPUs, got sharding={sharding!r} over {shard}"
        )
    return True


def _reduce_dtype(value: Any, sharding: str) -> str | None:
    """``reduce_dtype``: FSDP2's (``MixedPrecisionPolicy.reduce_dtype``) only."""
    if value is None:
        return None
    check_choice("reduce_dtype", value, list(REDUCE_DTYPES))
    if sharding != "fsdp":
        raise InvalidInputError(
            f"reduce_dtype is FSDP2's MixedPrecisionPolicy.reduce_dtype: it needs "
            f"sharding='fsdp', got {sharding!r} (DDP's compression hooks and ZeRO's "
            "reduce dtypes are not modelled)"
        )
    return str(value)


def _hsdp(value: Any, sharding: str, world: int) -> tuple[int, int] | None:
    """``hsdp=(replicate, shard)``: FSDP2 over a 2-D mesh, sharded within each group of
    ``shard`` GPUs and replicated over ``replicate`` such groups."""
    if value is None:
        return None
    if sharding != "fsdp":
        raise InvalidInputError(
            f"hsdp is FSDP2 on a 2-D mesh: it needs sharding='fsdp', got {sharding!r}"
        )
    if not isinstance(value, tuple | list) or len(value) != 2:
        refuse("hsdp", value, "(replicate, shard): two positive ints")
    replicate, shard = (check_int("hsdp", v, 1) for v in value)
    if replicate * shard != world:
        raise InvalidInputError(
            f"hsdp={replicate, shard}: replicate x shard = {replicate * shard}, but "
            f"world_size is {world}"
        )
    return replicate, shard


__all__ = [
    "DEFAULTS",
    "INTER_NODE_BANDWIDTH",
    "NAMES",
    "OUT_OF_SCOPE",
    "RESERVE_BYTES",
    "Options",
    "check_options",
]
