"""Context parallelism in plans (``mesh={"dp_shard": D, "cp": C}``), as torchtitan runs
it with torch's ``context_parallel``: every activation split along the sequence over
``C`` ranks, attention's keys and values all-gathered so that each rank's queries meet
the whole sequence, the causal work balanced over the ranks (``docs/plan.md``, "Context
parallelism").

A rule, not the real path: torch's ``context_parallel`` replaces SDPA by its ring
attention on CUDA kernels only and needs an ``is_causal`` call without a mask, which a
meta analysis of most models cannot give it. So the model is analysed on one rank's
share of the sequence (``S / C`` tokens: every activation, every linear's FLOPs and the
parameters' gradients are that rank's), and the plan adds what the split changes:

- **attention's work**: a rank's ``S / C`` queries against all ``S`` keys, causally and
  load-balanced (torch's head-tail chunks), is ``1 / C`` of the whole causal attention:
  ``C`` times what the analysis's ``S / C``-token attention did. Its kernels are priced
  at ``C`` times their FLOPs and bytes (``kernels.predict``'s ``attention_scale``);
- **the keys and values' collectives**: per attention call, the forward all-gathers the
  rank's keys and values (the bytes its attention kernels read, recorded by the
  analysis) from the ``C`` ranks; the backward all-gathers them again and
  reduce-scatters their gradients; on the context-parallel group's link (ranks ``tp``
  apart), on the critical path;
- **the gradients**: reduced over ``dp_shard x cp`` (FSDP2 over both, as torchtitan
  shards): the data-parallel strategy's size includes ``cp``.

Not modelled: the gathered keys and values' own bytes (a transient of one layer), the
ring's overlap of its exchanges with attention (all exposed), mask and position code
that reads the whole sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from layerscope.errors import InvalidInputError
from layerscope.metrics.commkinds import wire_bytes
from layerscope.planning.kernels import kernels_of
from layerscope.profile import Profile


def local_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any] | None, input_shape: Any, cp: int
) -> tuple[tuple[Any, ...], dict[str, Any] | None, Any, int]:
    """The micro-batch as one context-parallel rank holds it: dimension 1 (the
    sequence) of ``input_shape``, or of every given tensor as long as the first
    input's, cut to ``1 / cp``; refused unless ``2 cp`` divides the sequence (torch's
    load balancer splits it into ``2 cp`` chunks). Last, the whole sequence's length."""
    if input_shape is not None:
        shape = list(input_shape[0] if input_shape and isinstance(input_shape[0], list | tuple)
                     else input_shape)  # fmt: skip
        _check(shape, cp)
        whole = shape[1]
        shape[1] //= cp
        return args, kwargs, tuple(shape), whole
    tensors = [t for t in (*args, *(kwargs or {}).values()) if isinstance(t, torch.Tensor)]
    if not tensors:
        raise InvalidInputError("mesh cp: the micro-batch has no tensor to split")
    seq = list(tensors[0].shape)
    _check(seq, cp)

    def cut(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() > 1 and t.shape[1] == seq[1]:
            return t.narrow(1, 0, seq[1] // cp)
        return t

    return (
        tuple(cut(a) for a in args),
        {k: cut(v) for k, v in kwargs.items()} if kwargs else kwargs,
        None,
        seq[1],
    )


def _check(shape: list[int], cp: int) -> None:
    if len(shape) < 2 or shape[1] % (2 * cp):
        raise InvalidInputError(
            f"mesh cp={cp}: the micro-batch's sequence (dimension 1 of {shape}) must split "
            f"into {2 * cp} equal chunks (torch's causal load balancing, 2 a rank)"
        )


def kv_comm(prof: Profile, cp: int) -> dict[str, Any]:
    """Each attention module's key and value collectives per micro-batch, in
    ``profile.comm``'s form (module doc)."""
    kernels = kernels_of(prof)
    if kernels is None:
        return {}
    if not kernels.kv:  # nothing for the ring to pass: the plan would price no collective
        raise InvalidInputError(
            f"context parallel {cp} runs ring attention in scaled_dot_product_attention's "
            "fused kernels (flash, efficient, cudnn), and this model's attention ran none "
            "(eager attention, or SDPA's math path, which float32 with grouped key/value "
            "heads takes): load the model with attn_implementation='sdpa' and plan in "
            "bfloat16 (precision='bf16' or 'bf16-mixed'), or plan without cp"
        )
    out: dict[str, Any] = {}
    for path, local in kernels.kv.items():

        def row(kind: str, payload: int) -> dict[str, int]:
            return {"calls": 1, "bytes": payload, "wire_bytes": int(wire_bytes(kind, payload, cp))}

        out[path] = {
            "forward": {"all_gather": row("all_gather", local)},
            "backward": {
                "all_gather": row("all_gather", local),
                "reduce_scatter": row("reduce_scatter", cp * local),
            },
        }
    return out


def cp_notes(cp: int, sequence: Mapping[str, int] | None) -> list[str]:
    """What a context-parallel plan assumes, beside its figures."""
    tokens = f" of {sequence['whole']} tokens, {sequence['local']} a rank" if sequence else ""
    return [
        f"context parallel {cp}: the sequence{tokens} split over {cp} GPUs, analysed on "
        "one rank's share; attention priced at its share of the whole causal attention "
        f"({cp}x the analysis's, load-balanced), keys and values all-gathered forward and "
        "backward and their gradients reduce-scattered, on the critical path (the ring's "
        "overlap with attention and the gathered tensors' bytes are not counted)"
    ]


__all__ = ["cp_notes", "kv_comm", "local_inputs"]
