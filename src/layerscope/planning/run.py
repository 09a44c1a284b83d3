"""``ls.plan``: one GPU's memory timeline and step time in a training run that cannot run
here, by arithmetic over one analysis on ``meta`` steered to the target
(``docs/plan.md``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from layerscope.busy import ProgressSetting, busy, check_progress
from layerscope.collect.inputs import normalise_shapes
from layerscope.collect.signature import iter_tensors
from layerscope.errors import InvalidInputError
from layerscope.planning.headless import headless_notes
from layerscope.planning.options import check_options
from layerscope.planning.pipelineplan import analysed, build_plan
from layerscope.planning.result import Plan
from layerscope.planning.sweep import Source
from layerscope.profile import Profile


def plan(
    model_or_profile: nn.Module | Profile,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    input_shape: Any = None,
    target: Any = "h100",
    world_size: int | None = None,
    sharding: str | None = None,
    checkpoint: str | Sequence[str] | Callable[..., Any] | None = None,
    budget: int | None = None,
    optimizer: str = "adamw",
    precision: str = "bf16-mixed",
    grad_accum: int = 1,
    input_dtype: Any = None,
    loss_fn: Any = None,
    progress: ProgressSetting = None,
    **options: Any,
) -> Plan:
    """Plan one GPU of a training run (``docs/plan.md``). ``args``/``kwargs``/
    ``input_shape`` are one GPU's micro-batch, as in ``ls.profile``; one analysis on
    ``meta`` steered to ``target`` (a given profile is reused), then arithmetic.

    ``world_size``: GPUs in the run (8); ``sharding``: "none", "ddp", "fsdp" (FSDP2, the
    default), "zero1", "zero2"; ``mesh``: both as a device mesh's axis sizes instead
    (``{"dp_replicate": 2, "dp_shard": 4}``: ``planning.mesh``); ``checkpoint``: None,
    "blocks", "op" (torchtitan's per-op policy), "auto", module paths, or a policy
    function as ``create_selective_checkpoint_contexts`` takes (``planning.oppolicy``),
    each block under it; ``precision``: "fp32", "bf16", "bf16-mixed",
    "fp16-mixed"; ``optimizer``: "adamw", "adam", "sgd", "sgd_momentum"; ``budget``:
    bytes per GPU (default: the target's memory). Options: ``units`` (FSDP2 unit paths;
    default the repeated blocks), ``reshard_after_forward`` (True), ``rank`` (0: the
    largest shards), ``reserve_bytes`` (2 GiB: ``options.RESERVE_BYTES``),
    ``cluster`` (the cluster the collectives run on: a mapping of
    ``planning.cluster.Cluster``'s fields or one; default the target's reference system),
    ``inter_node_bandwidth`` (NIC bytes/s per GPU; default the cluster's),
    ``bucket_cap_mb`` (DDP's, 25), ``reduce_dtype`` (FSDP2's), ``loss`` ("plain": the
    analysis's logits and loss; "fused": a chunked fused linear cross-entropy,
    ``planning.loss``); with ``pp`` in the mesh, ``microbatches``, ``schedule``
    ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"), ``virtual_stages``,
    ``pp_split``, ``stage`` and ``return_outputs`` (``planning.pipeline``).
    ``progress``: a status line on stderr once planning has taken 2 s, on a terminal
    (None), always (True), never (False), or a callable given each status text
    (``layerscope.busy``)."""
    progress = check_progress(progress)
    _check_not_empty(args, kwargs, input_shape)
    given = {"world_size": world_size, "sharding": sharding}
    opts = check_options({
        "target": target, **{k: v for k, v in given.items() if v is not None},
        "checkpoint": checkpoint, "budget": budget, "optimizer": optimizer,
        "precision": precision, "grad_accum": grad_accum, **options,
    })  # fmt: skip
    profile_options: dict[str, Any] = {}
    if input_dtype is not None:
        profile_options["input_dtype"] = input_dtype
    if loss_fn is not None:
        profile_options["loss_fn"] = loss_fn
    with busy("layerscope: planning: analysing the model on meta", progress) as status:
        profs = analysed(model_or_profile, args, kwargs, input_shape, opts, profile_options)
        status.update("layerscope: planning: the step's memory and time")
        result = build_plan(profs, opts)
    if isinstance(model_or_profile, nn.Module):  # to analyse other micro-batches
        result.source = Source(model_or_profile, args, kwargs, input_shape, profile_options, opts)
        result.notes += headless_notes(model_or_profile)
    return result


def _check_not_empty(args: tuple[Any, ...], kwargs: Any, input_shape: Any) -> None:
    """A micro-batch with no elements (a batch or sequence of 0) is refused, as the CLI
    refuses it, rather than reported as the model's error when it cannot reshape it."""
    shapes = [tuple(t.shape) for t in (*iter_tensors(args), *iter_tensors(kwargs or {}))]
    if input_shape is not None:
        shapes += normalise_shapes(input_shape)
    empty = next((s for s in shapes if 0 in s), None)
    if empty is not None:
        raise InvalidInputError(
            f"ls.plan plans a training micro-batch: an input of shape {list(empty)} has no "
            "elements; give at least one sample of at least one token"
        )


__all__ = ["plan"]
