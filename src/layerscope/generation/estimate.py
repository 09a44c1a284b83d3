"""``ls.estimate_generate``: prefill and decode time of a decoder model on a GPU you do
not have, from analyses on ``meta`` steered to that GPU's kernels (``docs/generate.md``).

``generate()`` cannot run on meta (it reads token values), so the stages are driven
directly, each an ``ls.profile`` under ``torch.no_grad()`` with a transformers cache:

- the **prefill**: the prompt, ``(batch, prompt)`` token ids, into an empty cache, with
  ``logits_to_keep=1`` as ``generate()`` asks;
- a **decode step**: one token per row on a cache that holds ``L`` tokens. Its cost is
  affine in ``L`` (``decodefit``): three lengths are analysed (the prefill's cache serves
  the first; a plain forward of ``L`` tokens on meta fills the others, which computes
  nothing), and the fit's mean over the decode steps is the decode time per token.

Every batch size is analysed on its own: the kernels the target chooses may depend on
it. Times are roofline lower bounds per module (``analysis.roofline``) for the model's
dtype; the KV cache is read from the cache after the last step (``generation.cache``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import layerscope.metricspec as ms
from layerscope.analysis.roofline import Roof, roof_of, roof_times
from layerscope.collect.hfmeta import meta_values
from layerscope.collect.meta import meta_copy
from layerscope.collect.observer import Observer
from layerscope.collect.target import parse_target
from layerscope.errors import InvalidInputError, LayerscopeError, MissingDependencyError, ModelError
from layerscope.generation.cache import CacheFacts, cache_facts
from layerscope.generation.cachekinds import (
    BLOCK_SIZE,
    CACHES,
    KV_WIDTHS,
    attention_paths,
    narrow_kv,
    new_cache,
    paged_facts,
    ring,
)
from layerscope.generation.decodefit import AffineFit, Point, decode_lengths
from layerscope.generation.estimate_notes import notes_for
from layerscope.generation.estimate_result import GenerateEstimate, SweepRow
from layerscope.generation.modelcheck import check_generative
from layerscope.generation.moe import Routing, experts_kernel, moe_note, route, routing_of
from layerscope.generation.predicted import MODES, Step, priced
from layerscope.generation.weights import (
    Quantized,
    WeightScheme,
    check_groups,
    check_scheme,
    narrow,
    quantized_weights,
    stored_bytes,
)
from layerscope.hardware import GPUS, DeviceSpec, device_spec
from layerscope.planning.cluster import default_cluster
from layerscope.planning.collectives import consecutive
from layerscope.planning.kernels import KernelRecorder, Kernels
from layerscope.planning.tensorparallel import comm_seconds
from layerscope.profile import Profile
from layerscope.render.units import nbytes
from layerscope.session.options import check_dtype
from layerscope.session.run import profile
from layerscope.validate import check_choice, check_instance, check_int, refuse


@dataclass(frozen=True)
class Options:
    spec: DeviceSpec
    target: str
    prompt: int
    new_tokens: int
    batches: tuple[int, ...]
    cache: str
    dtype: torch.dtype | None
    kwargs: Mapping[str, Any]
    #: the quantized linears' storage (None: the model's own weights)
    weights: WeightScheme | None = None
    #: a paged cache's block in tokens; the KV cache's width (None: the model's)
    block_size: int = BLOCK_SIZE
    kv_dtype: str | None = None
    #: how the host issues a call's kernels (``generation.predicted``)
    mode: str = "eager"
    #: GPUs each layer is split over by the model's tensor-parallel plan (1: none)
    tp: int = 1


def check_options(
    target: Any,
    prompt: Any,
    new_tokens: Any,
    batch: Any,
    cache: Any,
    dtype: Any,
    kwargs: Any,
    weights: Any = None,
    group_size: Any = 128,
    block_size: Any = BLOCK_SIZE,
    kv_dtype: Any = None,
    mode: Any = "eager",
    tp: Any = 1,
) -> Options:
    """Every option of ``estimate_generate`` checked, before the model is touched."""
    name = target.strip().lower() if isinstance(target, str) else target
    check_choice("target", name, list(GPUS))
    parse_target(name)
    if isinstance(batch, int) and not isinstance(batch, bool):
        batch = (batch,)
    if not isinstance(batch, Sequence) or isinstance(batch, str) or not batch:
        refuse("batch", batch, "a batch size or a non-empty list of them (ints >= 1)")
    batches = tuple(sorted({check_int(f"batch[{i}]", b, 1) for i, b in enumerate(batch)}))
    if kwargs is not None and not isinstance(kwargs, Mapping):
        refuse("kwargs", kwargs, "a dict of keyword inputs or None")
    if dtype is not None and not check_dtype("dtype", dtype).is_floating_point:
        refuse("dtype", dtype, "a floating-point dtype such as bfloat16, float16 or float32")
    return Options(
        spec=device_spec(name),
        target=name,
        prompt=check_int("prompt", prompt, 1),
        new_tokens=check_int("new_tokens", new_tokens, 1),
        batches=batches,
        cache=check_choice("cache", cache, list(CACHES)),
        dtype=None if dtype is None else check_dtype("dtype", dtype),
        kwargs=dict(kwargs or {}),
        weights=check_scheme(weights, group_size),
        block_size=check_int("block_size", block_size, 1),
        kv_dtype=None if kv_dtype is None else check_choice("kv_dtype", kv_dtype, list(KV_WIDTHS)),
        mode=check_choice("mode", mode, list(MODES)),
        tp=_check_tp(tp, device_spec(name)),
    )


def _check_tp(value: Any, spec: DeviceSpec) -> int:
    """``tp``: GPUs of one node (tensor parallelism's collectives run on its link)."""
    tp = check_int("tp", value, 1)
    if tp > 1 and spec.node_size and tp > spec.node_size:
        raise InvalidInputError(
            f"tp={tp} spans more than one node of {spec.node_size} {spec.name} GPUs: "
            f"tensor parallelism is planned within a node (tp <= {spec.node_size})"
        )
    return tp


def _floating_dtype(model: nn.Module) -> torch.dtype:
    """The floating dtype that holds most of the model's parameter elements."""
    counts: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return max(counts, key=lambda d: counts[d]) if counts else torch.get_default_dtype()


def meta_model(
    model: nn.Module, dtype: torch.dtype | None, copy: bool = False
) -> tuple[nn.Module, list[str]]:
    """The model to analyse: itself when it is on meta in ``dtype`` (and not ``copy``:
    tensor parallelism splits it), else a meta copy (``meta_copy``) in ``dtype``, with
    the notices of the code left out of the copy. The user's model is never changed."""
    tensors = [*model.parameters(), *model.buffers()]
    on_meta = all(t.is_meta for t in tensors)
    if on_meta and not copy and (dtype is None or _floating_dtype(model) == dtype):
        return model, []
    copied, not_run = meta_copy(model)
    return (copied.to(dtype) if dtype is not None else copied), not_run


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


@dataclass
class BatchAnalysis:
    """What one batch size's analyses give: the prefill's profile, the decode fit, the
    KV cache after the last decode step and the kernels chosen."""

    batch: int
    prefill: Profile
    prefill_time: float
    fit: AffineFit
    kv: CacheFacts
    kernels: dict[str, Any]
    #: the prefill and the decode step at the mean cache length, predicted
    #: (``generation.predicted``)
    predicted: tuple[Step, Step]
    #: a mixture of experts: the decode fit and the prefill time with every expert read
    worst: AffineFit | None = None
    prefill_worst: float | None = None


class Driver:
    """Runs the stages of one model on meta: caches, the prefill and decode steps."""

    def __init__(self, model: nn.Module, opts: Options, roof: Roof) -> None:
        self.model, self.opts, self.roof = model, opts, roof
        config = getattr(model, "config", None)
        params = inspect.signature(model.forward).parameters
        name = next((n for n in ("cache", "past_key_values") if n in params), None)
        if config is None or name is None:
            raise InvalidInputError(
                f"estimate_generate needs a transformers decoder whose forward takes a KV "
                f"cache (cache= or past_key_values=) and a config to build it; "
                f"{type(model).__name__} has {'no config' if config is None else 'no cache'}"
            )
        self.config, self.cache_name = config, name
        self.call: dict[str, Any] = dict(opts.kwargs)
        if "use_cache" in params:
            self.call["use_cache"] = True
        self.keeps_one = "logits_to_keep" in params
        if self.keeps_one:
            self.call["logits_to_keep"] = 1
        self.quantized = quantized_weights(model) if opts.weights is not None else {}
        check_groups(self.quantized, opts.weights)
        if opts.weights is not None and not self.quantized:
            raise InvalidInputError(
                f"weights={opts.weights.name!r}: {type(model).__name__} has no weights it "
                "stores narrower (nn.Linear, transformers' Conv1D or fused experts, "
                "other than the output projection); leave weights unset"
            )
        #: FP8 weights on a target with FP8 tensor cores: the linears' matmuls run at the
        #: FP8 peak (W8A8), this multiple of the compute dtype's
        self.fp8: float | None = None
        scheme, spec = opts.weights, opts.spec
        if scheme is not None and scheme.name == "fp8" and "float8_e4m3fn" in spec.peak_flops:
            self.fp8 = spec.peak("float8_e4m3fn") / roof.peak
        width = torch.empty((), dtype=_floating_dtype(model)).element_size()
        self.kv_ratio = KV_WIDTHS[opts.kv_dtype] / width if opts.kv_dtype else 1.0
        self.attention = attention_paths(model) if self.kv_ratio != 1.0 else {}
        narrowed = {
            p: q.saved(scheme) for p, q in self.quantized.items() if scheme and q.kind == "experts"
        }
        self.routing: Routing | None = routing_of(model, _floating_dtype(model), narrowed)
        #: a mixture of experts: each analysis's time (its collectives included, as
        #: ``point``'s) and bytes with every expert read
        self.worst: dict[int, tuple[float, float]] = {}
        #: tensor parallelism's group on the target's node (None: one GPU), and how its
        #: analyses observe ops on DTensors (one GPU's work: ``collect.dtensors``)
        self.link = consecutive(default_cluster(opts.spec), opts.tp) if opts.tp > 1 else None
        self.dtensor = "local" if opts.tp > 1 else "logical"

    def priced(self, prof: Profile, kernels: Kernels) -> Step:
        """One analysed call predicted (``generation.predicted``)."""
        o = self.opts
        return priced(prof, kernels, o.mode, o.spec, self.roof, self.faster(prof), self.comm(prof))

    def comm(self, prof: Profile) -> float:
        """Seconds of the analysis's collectives (tensor parallelism's, DTensor's) on the
        group's link; none hidden under compute."""
        return comm_seconds(prof.comm, self.link)[0] if self.link is not None else 0.0

    def new_cache(self, held: int | None = None) -> Any:
        """A cache of ``cache=``'s kind for a call that leaves ``held`` tokens in it
        (default prompt + new tokens; only a paged cache's length depends on it)."""
        try:
            import transformers
        except ImportError as e:  # pragma: no cover - a test dependency
            raise MissingDependencyError(
                "estimate_generate needs transformers: pip install transformers"
            ) from e
        o = self.opts
        total = o.prompt + o.new_tokens
        return new_cache(transformers, self.config, o.cache, total, held or total, o.block_size)

    def ids(self, batch: int, tokens: int) -> torch.Tensor:
        return torch.zeros(batch, tokens, dtype=torch.long, device="meta")

    def analyse(self, ids: torch.Tensor, cache: Any, observers: Sequence[Observer] = ()) -> Profile:
        """One model call on ``cache``, analysed and steered to the target (with
        ``observers`` riding along), its weights, KV cache and experts as the options say."""
        kwargs = {**self.call, self.cache_name: cache}
        with torch.no_grad(), experts_kernel(self.model, self.routing):
            prof = profile(
                self.model, ids, kwargs=kwargs, target=self.opts.target, mode="eval",
                record_shapes=False, observers=observers, dtensor=self.dtensor,
            )  # fmt: skip
        if self.opts.weights is not None:
            narrow(prof, self.quantized, self.opts.weights)
        if self.kv_ratio != 1.0:
            facts = cache_facts(cache)
            narrow_kv(prof, self.attention, facts, self.opts.cache, ids.shape[1], self.kv_ratio)
        if self.routing is not None:
            self._route(prof, ids.numel(), self.routing)
        return prof

    def _route(self, prof: Profile, tokens: int, routing: Routing) -> None:
        """Every expert read (kept as the worst case, its collectives priced as the
        expected case's: routing moves no collective), then the expected ones (``moe``)."""
        route(prof, routing, routing.counted(tokens), routing.experts)
        time = roof_times(prof, self.roof, "forward", self.faster(prof))[id(prof.root)]
        time += self.comm(prof)
        self.worst[id(prof)] = (time, float(prof.root.metrics.get(ms.BYTES_ACCESSED) or 0))
        route(prof, routing, routing.experts, routing.expected(tokens), stored=True)

    def faster(self, prof: Profile) -> dict[int, float] | None:
        """The analysis's nodes that run faster than the compute dtype's peak: the FP8
        linears (None: none)."""
        if self.fp8 is None:
            return None
        out = {}
        for path in self.quantized:
            try:
                out[id(prof.node(path))] = self.fp8
            except KeyError:
                continue
        return out

    def fill(self, batch: int, length: int) -> Any:
        """A new cache holding ``length`` tokens per row (room for one more): a plain
        forward on meta."""
        cache = self.new_cache(length + 1)
        kwargs = {**self.call, self.cache_name: cache}
        try:
            with (
                torch.no_grad(),
                meta_values(),
                _eval_mode(self.model),
                experts_kernel(self.model, self.routing),
            ):
                self.model(self.ids(batch, length), **kwargs)
        except LayerscopeError:
            raise
        except Exception as e:
            raise ModelError(
                f"{type(self.model).__name__} raised while filling a cache of {length} "
                f"tokens on meta: {type(e).__name__}: {e}"
            ) from e
        if self.opts.cache == "paged":
            ring(cache)
        return cache

    def point(self, prof: Profile, length: int) -> Point:
        m = prof.root.metrics
        return Point(
            length=length,
            time=roof_times(prof, self.roof, "forward", self.faster(prof))[id(prof.root)]
            + self.comm(prof),
            flops=float(m.get(ms.FLOPS) or 0),
            macs=float(m.get(ms.MACS) or 0),
            bytes=float(m.get(ms.BYTES_ACCESSED) or 0),
        )

    def held(self, cache: Any) -> CacheFacts:
        """The cache after the last decode step as stored: a paged one's layers in whole
        blocks, a sliding window's too (``paged_facts``, the rule ``ls.plan_serving``
        sizes a sequence by)."""
        facts = cache_facts(cache)
        if self.opts.cache != "paged":
            return facts
        o = self.opts
        return paged_facts(facts, cache, o.prompt + o.new_tokens, o.block_size)

    def batch(self, batch: int) -> BatchAnalysis:
        """The prefill and the decode steps at every cache length the fit needs."""
        o = self.opts
        cache = self.new_cache(o.prompt)
        recorder = KernelRecorder()
        prefill = self.analyse(self.ids(batch, o.prompt), cache, [recorder])
        prefill_step = self.priced(prefill, recorder.kernels)
        middle = o.prompt + o.new_tokens // 2  # one of the decode lengths
        kernels = _merge_kernels({}, prefill)
        block = o.block_size if o.cache == "paged" else 0
        fit = AffineFit(batch, o.prompt, o.prompt + o.new_tokens - 1, block=block)
        worst = AffineFit(batch, o.prompt, o.prompt + o.new_tokens - 1, block=block)
        for length in decode_lengths(o.prompt, o.new_tokens):
            if length != o.prompt or block:
                cache = self.fill(batch, length)
            recorder = KernelRecorder()
            step = self.analyse(self.ids(batch, 1), cache, [recorder])
            if length == middle:
                decode_step = self.priced(step, recorder.kernels)
            kernels = _merge_kernels(kernels, step)
            fit.points.append(self.point(step, length))
            if id(step) in self.worst:
                time, nbytes = self.worst[id(step)]
                p = fit.points[-1]
                worst.points.append(Point(length, time, p.flops, p.macs, nbytes))
        faster = self.faster(prefill)
        prefill_time = roof_times(prefill, self.roof, "forward", faster)[id(prefill.root)]
        prefill_time += self.comm(prefill)
        analysis = BatchAnalysis(
            batch, prefill, prefill_time, fit, self.held(cache), kernels,
            (prefill_step, decode_step),
        )  # fmt: skip
        if self.routing is not None:
            analysis.worst, analysis.prefill_worst = worst, self.worst[id(prefill)][0]
        return analysis


def _merge_kernels(kernels: dict[str, Any], prof: Profile) -> dict[str, Any]:
    """The kernels chosen ({op: {kernel: calls}}), the profile's added."""
    out = {op: dict(k) for op, k in kernels.items()}
    for op, chosen in (prof.model.get("kernels") or {}).items():
        for kernel, calls in chosen.items():
            out.setdefault(op, {})[kernel] = out.get(op, {}).get(kernel, 0) + int(calls)
    return out


def _row(
    a: BatchAnalysis,
    roof: Roof,
    weights: int,
    memory: int | None,
    kv_ratio: float = 1.0,
    routing: Routing | None = None,
) -> SweepRow:
    per_token = a.fit.mean("time")
    kv = round(a.kv.total * kv_ratio)
    flops, nbytes = a.fit.mean("flops"), a.fit.mean("bytes")
    prefill = a.prefill.root.metrics
    row = SweepRow(
        batch=a.batch,
        prefill_time=a.prefill_time,
        decode_time_per_token=per_token,
        tokens_per_s_per_sequence=1.0 / per_token,
        tokens_per_s=a.batch / per_token,
        bound=roof.bound(flops, nbytes) or "memory",
        weight_bytes=weights,
        kv_bytes=kv,
        fits=None if memory is None else weights + kv <= memory,
        decode_flops=flops,
        decode_bytes=nbytes,
        prefill_flops=float(prefill.get(ms.FLOPS) or 0),
        prefill_bytes=float(prefill.get(ms.BYTES_ACCESSED) or 0),
    )
    if routing is not None and a.worst is not None:
        row.experts_per_layer = routing.expected(a.batch)
        row.decode_time_all_experts = a.worst.mean("time")
        row.decode_bytes_all_experts = a.worst.mean("bytes")
        row.prefill_time_all_experts = a.prefill_worst
    return row


def predicted(row: SweepRow, prefill: Step, step: Step) -> SweepRow:
    """``row`` with its predicted prefill and decode step (``generation.predicted``):
    each never below its bound, less what fusing (graphs) does not move."""
    prefill_bound = max(row.prefill_time - prefill.fused_off, 0.0)
    step_bound = max(row.decode_time_per_token - step.fused_off, 0.0)
    row.prefill_time_predicted = max(prefill.time, prefill_bound)
    row.decode_time_predicted = max(step.time, step_bound)
    row.launch_time, row.kernels = step.launch, step.kernels
    return row


def estimate_generate(
    model: nn.Module,
    *,
    target: str = "h100",
    prompt: int = 2048,
    new_tokens: int = 256,
    batch: int | Sequence[int] = (1, 8, 32, 128),
    cache: str = "dynamic",
    dtype: torch.dtype | str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    weights: str | None = None,
    group_size: int = 128,
    block_size: int = BLOCK_SIZE,
    kv_dtype: str | None = None,
    mode: str = "eager",
    tp: int = 1,
) -> GenerateEstimate:
    """Prefill and decode time of a decoder ``model`` on ``target`` (a GPU spec's name),
    per batch size: roofline lower bounds from analyses on ``meta`` steered to the
    target's kernels (module doc, ``docs/generate.md``).

    ``prompt``: tokens per sequence in the prompt; ``new_tokens``: tokens each sequence
    generates (decode steps at cache lengths ``prompt`` .. ``prompt + new_tokens - 1``);
    ``batch``: the batch sizes (sequences generated together); ``cache``: "dynamic"
    (``DynamicCache``, grown by ``torch.cat`` at every step), "static" (``StaticCache``
    of ``prompt + new_tokens`` tokens, attended over whole) or "paged" (a server's: read
    in place once at the current length rounded up to blocks of ``block_size`` tokens,
    written once; ``generation.cachekinds``); ``kv_dtype``: the KV cache's width ("fp8",
    "int8", "bf16", "fp16", "fp32"; default the model's); ``dtype``: the dtype to
    estimate in (default: the model's; a meta copy is converted, the model is not), whose
    peak the roofline uses; ``kwargs``: more keyword inputs for every model call;
    ``weights``: the linears' weights as deployed, weight-only ("int4" with ``group_size``,
    "int8", "fp8", "bf16", "fp16"; ``generation.weights``), read at that width;
    ``mode``: how the predicted calls' kernels are launched, "eager" (each) or "graphs"
    (CUDA graphs, pointwise kernels fused; ``generation.predicted``); ``tp``: GPUs of one
    node each layer is split over by the model's own tensor-parallel plan (a transformers
    config's ``base_model_tp_plan``; ``planning.tensorparallel``): every figure one
    GPU's, each call's collectives priced on the node's link. A model
    with real weights is copied to meta first (``to_meta``), without the code that would
    reach the original (``meta_copy``, named in the notes)."""
    check_instance("model", model, nn.Module, "an nn.Module (a transformers decoder)")
    opts = check_options(
        target, prompt, new_tokens, batch, cache, dtype, kwargs, weights, group_size,
        block_size, kv_dtype, mode, tp,
    )  # fmt: skip
    return estimated(model, opts)[0]


def estimated(model: nn.Module, opts: Options) -> tuple[GenerateEstimate, list[tuple[Step, Step]]]:
    """The estimate for checked options, with each batch's predicted prefill and decode
    step (``ls.plan_serving`` reads their fused bytes)."""
    check_generative(model, opts.prompt + opts.new_tokens)
    meta, not_run = meta_model(model, opts.dtype, copy=opts.tp > 1)
    run_dtype = str(_floating_dtype(meta)).removeprefix("torch.")
    roof = roof_of(opts.spec, run_dtype)
    with split(meta, opts.tp):
        driver = Driver(meta, opts, roof)
        stored = stored_bytes(meta, opts.weights)
        analyses = [driver.batch(b) for b in opts.batches]
    steps = [a.predicted for a in analyses]
    rows = [
        predicted(
            _row(a, roof, stored, opts.spec.budget_bytes, driver.kv_ratio, driver.routing),
            *step,
        )
        for a, step in zip(analyses, steps, strict=True)
    ]
    first = rows[0]
    result = GenerateEstimate(
        model=type(model).__name__,
        target=opts.target,
        device={
            "name": opts.spec.name,
            "label": opts.spec.label,
            "peak_flops": roof.peak,
            "bandwidth": roof.bandwidth,
            "memory_bytes": opts.spec.memory_bytes,
            "usable_bytes": opts.spec.usable_memory_bytes,
        },
        dtype=run_dtype,
        prompt=opts.prompt,
        new_tokens=opts.new_tokens,
        cache=opts.cache,
        prefill_time=first.prefill_time,
        decode_time_per_token=first.decode_time_per_token,
        tokens_per_s_per_seq=first.tokens_per_s_per_sequence,
        sweep=rows,
        fit=[a.fit for a in analyses],
        kernels=analyses[0].kernels,
        analysis=analyses[0].prefill,
        kv_dtype=opts.kv_dtype,
        block_size=opts.block_size if opts.cache == "paged" else None,
        moe=driver.routing.to_dict() if driver.routing is not None else None,
        mode=opts.mode,
        tp=opts.tp,
    )
    result.notes = [*notes_for(result, [a.prefill for a in analyses], driver.keeps_one), *not_run]
    if opts.weights is not None:
        result.notes.append(weights_note(opts.weights, meta, driver.quantized, stored))
    if driver.routing is not None:
        result.notes.insert(1, moe_note(driver.routing, rows))
    if opts.tp > 1:
        result.notes.append(tp_note(opts.tp, opts.spec.name))
    return result, steps


def split(meta: nn.Module, tp: int) -> AbstractContextManager[Any]:
    """Inside: ``meta`` (a meta copy) split by its own tensor-parallel plan over ``tp``
    ranks, analyses observing one rank's work (``planning.tensorparallel``)."""
    if tp == 1:
        return nullcontext()
    from layerscope.planning.tensorparallel import parallelized

    return parallelized(meta, tp, None, False, takes_plan=False)


def tp_note(tp: int, target: str) -> str:
    """What a tensor-parallel estimate's figures are."""
    return (
        f"Tensor parallel {tp}: the model split by its own tensor-parallel plan (torch's "
        f"parallelize_module on meta); weights, KV cache, FLOPs and bytes are one GPU's, "
        f"and each call's collectives (DTensor's) are priced on {target}'s node link, "
        "none hidden under compute."
    )


def weights_note(
    scheme: WeightScheme, model: nn.Module, weights: Mapping[str, Quantized], stored: int
) -> str:
    """What ``weights=`` changed: the scheme, the weights it covers, the bytes stored."""
    own = stored_bytes(model, None)
    experts = sum(1 for q in weights.values() if q.kind == "experts")
    linears = len(weights) - experts
    which = f"{linears} linear(s)" + (f" and {experts} fused experts module(s)" if experts else "")
    return (
        f"Weights as deployed: {scheme.words()}, on {which} (all but the output "
        f"projection{' and the routers' if experts else ''}): {nbytes(stored)} stored "
        f"instead of {nbytes(own)}, each read once per call at that width."
    )


__all__ = ["CACHES", "estimate_generate", "estimated"]
