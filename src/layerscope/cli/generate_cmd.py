"""Prefill and decode time of a decoder model. On meta (the default): roofline
lower bounds on a GPU you do not have, per batch size, from analyses steered
to its kernels (ls.estimate_generate). On a real device: generate() run and
measured per stage and step (ls.profile_generate). docs/generate.md.

The model is named as for `profile` (transformers:LlamaForCausalLM is
Llama-2-7B's shape); --input-shape is BATCH,PROMPT: sequences and prompt
tokens each (--batch lists several batch sizes instead). On a real device,
--view top or ops shows every stage's modules in one table, --stage one
stage in any view.

Examples:
  layerscope generate transformers:LlamaForCausalLM --dtype bfloat16 \\
      --model-args '{"max_position_embeddings": 4096}' \\
      --input-shape 1,2048 --max-new-tokens 256 --batch 1,8,32,128
  layerscope generate transformers:LlamaForCausalLM --dtype bfloat16 \\
      --input-shape 1,1792 --cache static --target h200 --json gen.json
  layerscope generate transformers:LlamaForCausalLM --model-args \\
      '{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "vocab_size": 128}' --device cpu \\
      --input-shape 2,16 --max-new-tokens 8
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn

from layerscope.cli.common import (
    VIEW_FLAGS,
    add_model_arguments,
    check_outputs,
    flags_given,
    gpu_names,
    write_outputs,
)
from layerscope.cli.inputs import parse_json_object, parse_model_dtype, parse_shape
from layerscope.errors import InvalidInputError
from layerscope.generation.cachekinds import BLOCK_SIZE, CACHES, KV_WIDTHS
from layerscope.generation.estimate import estimate_generate
from layerscope.generation.predicted import MODES
from layerscope.generation.result import STAGES
from layerscope.hardware import GPUS
from layerscope.render import config as display_config
from layerscope.render.layout import terminal_width
from layerscope.render.options import VIEWS, check_view
from layerscope.render.stageviews import STAGED_VIEWS
from layerscope.validate import check_choice, check_int, refuse

NAME = "generate"
HELP = "prefill and decode time of a decoder model, on a GPU you do not have (docs/generate.md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    gen = p.add_argument_group("the generation")
    gen.add_argument(
        "--input-shape", metavar="BATCH,PROMPT",
        help="sequences and prompt tokens per sequence (e.g. 1,2048)",
    )  # fmt: skip
    gen.add_argument(
        "--max-new-tokens", type=int, default=256, metavar="N",
        help="tokens each sequence generates (default 256)",
    )  # fmt: skip
    gen.add_argument(
        "--batch", metavar="B,B,...",
        help="on meta, the batch sizes to estimate, a row each (instead of BATCH)",
    )  # fmt: skip
    gen.add_argument(
        "--cache", default="dynamic", metavar="KIND",
        help="the KV cache: dynamic (grown by torch.cat at every step; the default), "
        "static (preallocated for prompt + new tokens) or, on meta, paged (a server's: "
        "read in place once at the current length in whole blocks, written once)",
    )  # fmt: skip
    gen.add_argument(
        "--block-size", type=int, default=BLOCK_SIZE, metavar="N",
        help=f"with --cache paged, the block in tokens (default {BLOCK_SIZE})",
    )  # fmt: skip
    gen.add_argument(
        "--mode", default="eager", metavar="MODE",
        help="on meta, how the predicted calls are launched: eager (each kernel; the "
        "default) or graphs (CUDA graphs, pointwise kernels fused)",
    )  # fmt: skip
    gen.add_argument(
        "--kv-dtype", default=None, metavar="DTYPE",
        help="on meta, the KV cache's width: fp8, int8, bf16, fp16 or fp32 (default the "
        "model's dtype)",
    )  # fmt: skip
    gen.add_argument(
        "--dtype", metavar="DTYPE", help="cast the model first (e.g. bfloat16, float16)"
    )
    gen.add_argument(
        "--tp", type=int, default=1, metavar="N",
        help="on meta, GPUs of one node the model is split over by its own tensor-parallel "
        "plan (default 1): every figure one GPU's",
    )  # fmt: skip
    gen.add_argument(
        "--device", default="meta",
        help="meta (the default: estimate on --target, nothing runs), or cpu, cuda, cuda:N "
        "(run generate() there and measure it)",
    )  # fmt: skip
    gen.add_argument(
        "--target", default=None, metavar="GPU",
        help=f"with --device meta, the GPU: {gpu_names()} "
        "(default h100)",
    )  # fmt: skip
    gen.add_argument(
        "--time", action="store_true",
        help="with a real device, time every model call too (3 repeats)",
    )  # fmt: skip
    out = p.add_argument_group("output")
    out.add_argument(
        "--view", metavar="VIEW",
        help="with a real device, a view instead of the summary: top or ops (every stage "
        "in one table, with a Stage column), or with --stage any view of that stage: "
        f"{', '.join(VIEWS)}",
    )  # fmt: skip
    out.add_argument(
        "--stage", metavar="STAGE",
        help="with a real device, one stage's Profile (prefill or decode) in --view "
        "(default table)",
    )  # fmt: skip
    out.add_argument(
        "--columns", metavar="KEY,...",
        help="with --view, the metric columns to show, in order (e.g. macs,macs_pct)",
    )  # fmt: skip
    out.add_argument("--sort", metavar="KEY", help="with --view, rank rows by this metric")
    out.add_argument("--top", type=int, metavar="K", help="with --view, keep the K largest rows")
    out.add_argument("--json", metavar="PATH", help="also save the result as JSON")
    out.add_argument(
        "-o", "--output", metavar="PATH",
        help="also write what is printed to a text file (.txt)",
    )  # fmt: skip
    out.add_argument(
        "--html", metavar="PATH",
        help="also write the HTML report (.html): the generation's, or on meta the "
        "estimate's, above its first prefill's analysis",
    )  # fmt: skip
    out.add_argument("--width", type=int, default=None, help="console width in characters")
    out.add_argument("--config", metavar="YAML", help="display configuration (styles)")


def parse_batches(text: str) -> list[int]:
    """``1,8,32``: batch sizes, each a positive integer."""
    pieces = [p.strip() for p in text.split(",")]
    if not all(p.isdecimal() and int(p) > 0 for p in pieces):
        refuse("--batch", text, "batch sizes such as 1,8,32 (positive integers)")
    return [int(p) for p in pieces]


def parse_prompt_shape(text: str) -> tuple[int, int]:
    """``--input-shape BATCH,PROMPT`` (``1,2048``): sequences and prompt tokens each."""
    shape = parse_shape(text, example="1,2048", what="BATCH,PROMPT")
    if len(shape) != 2:
        refuse("--input-shape", text, "BATCH,PROMPT (two positive integers, e.g. 1,2048)")
    return shape[0], shape[1]


def _device(text: str) -> torch.device:
    from layerscope.cli.profile_cmd import parse_device

    device = parse_device(text)
    assert device is not None
    return device


def _shape(args: argparse.Namespace, loaded: Any) -> tuple[int, int]:
    """(batch, prompt) from --input-shape, else from the token ids the spec brought."""
    if args.input_shape:
        return parse_prompt_shape(args.input_shape)
    ids = (loaded.args or (None,))[0]
    if not isinstance(ids, torch.Tensor) or ids.is_floating_point():
        raise InvalidInputError(
            "generate needs the prompt's shape: give --input-shape BATCH,PROMPT (e.g. 1,2048)"
        )
    shape = tuple(ids.shape)
    if len(shape) != 2:
        raise InvalidInputError(
            f"generate needs the prompt's shape: the spec's token ids are of shape {shape}, "
            "not (batch, prompt); give --input-shape BATCH,PROMPT (e.g. 1,2048)"
        )
    return shape[0], shape[1]


def _target(args: argparse.Namespace) -> str:
    return str(args.target or "h100").strip().lower()


def _check_flags(args: argparse.Namespace) -> torch.device:
    """The flags that need no model, checked before it is built; the device."""
    if args.input_shape:
        parse_prompt_shape(args.input_shape)
    check_int("--max-new-tokens", args.max_new_tokens, 1)
    check_choice("--cache", args.cache, list(CACHES))
    check_int("--block-size", args.block_size, 1)
    check_choice("--mode", args.mode, list(MODES))
    if args.kv_dtype is not None:
        check_choice("--kv-dtype", args.kv_dtype, list(KV_WIDTHS))
    if args.width is not None:
        check_int("--width", args.width, 1)
    if args.dtype:
        parse_model_dtype(args.dtype)
    device = _device(args.device)
    blocks = args.block_size != BLOCK_SIZE
    if device.type == "meta":
        check_choice("--target", _target(args), list(GPUS))
        if args.time:
            raise InvalidInputError("--time needs a real device: nothing runs on meta")
        if blocks and args.cache != "paged":
            raise InvalidInputError(
                f"--block-size is a paged cache's block: give --cache paged (the cache is "
                f"{args.cache})"
            )
    else:
        if args.cache == "paged" or args.kv_dtype is not None or args.tp != 1:
            raise InvalidInputError(
                "--cache paged, --kv-dtype and --tp are estimates' (on meta); on a real "
                "device generate() runs a dynamic or a static cache at the model's dtype, "
                "on one GPU"
            )
        if blocks or args.mode != "eager":
            raise InvalidInputError(
                "--block-size and --mode are estimates' (on meta); on a real device "
                "generate() runs eagerly, as measured"
            )
        if args.batch:
            raise InvalidInputError(
                "--batch lists batch sizes to estimate on meta; on a real device give one "
                "in --input-shape BATCH,PROMPT"
            )
        if args.target is not None:
            raise InvalidInputError("--target is the GPU estimated on meta: give --device meta")
    if args.batch:
        parse_batches(args.batch)
    _check_view_flags(args, device)
    check_outputs(args.html, args.json, text=args.output)
    if args.config:
        display_config.load(args.config)
    return device


def _measure(model: nn.Module, args: argparse.Namespace, batch: int, prompt: int) -> int:
    """generate() on a real device, measured per stage and step."""
    from layerscope.generation.modelcheck import check_generative, check_positions
    from layerscope.generation.run import check_generates, profile_generate

    # before anything runs, in the flags' words (profile_generate checks the same)
    tokens = prompt + args.max_new_tokens
    check_positions(model, tokens, "--input-shape's PROMPT and --max-new-tokens")
    check_generative(model, tokens)
    check_generates(model, args.model)
    device = _device(args.device)
    model = model.to(device).eval()
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 2
    ids = torch.randint(0, int(vocab), (batch, prompt), device=device)
    extra: dict[str, Any] = {"cache_implementation": "static"} if args.cache == "static" else {}
    result = profile_generate(
        model, ids, args.max_new_tokens, attention_mask=torch.ones_like(ids),
        timing=bool(args.time), **extra,
    )  # fmt: skip
    if args.stage is not None and args.stage not in result.stages:
        check_choice("--stage", args.stage, list(result.stages))
    options = _view_options(args)
    result.show(stage=args.stage, **options)
    # -o holds what was printed: at the terminal's width unless --width says otherwise
    written = {"width": terminal_width(), **options}
    text = result.render(stage=args.stage, **written) if args.output else ""
    write_outputs(args, result, text)
    return 0


#: The flag that gives each view option, for refusals that name it (``--view`` here).
_FLAGS = VIEW_FLAGS | {"view": "--view"}


def _view_options(args: argparse.Namespace) -> dict[str, Any]:
    """The view flags as ``Generation.show``'s options (those given)."""
    view = args.view or ("table" if args.stage is not None else None)
    given = flags_given(args, columns="columns", sort="sort_by", top="top", width="width")
    return ({"view": view} if view is not None else {}) | given


def _check_view_flags(args: argparse.Namespace, device: torch.device) -> None:
    """--view, --stage, --columns, --sort and --top: a measured generation's views,
    checked before the model is built."""
    flags = {
        "--view": args.view, "--stage": args.stage, "--columns": args.columns,
        "--sort": args.sort, "--top": args.top,
    }  # fmt: skip
    given = [flag for flag, value in flags.items() if value is not None]
    if not given:
        return
    if device.type == "meta":
        raise InvalidInputError(
            f"{' '.join(given)} {'shows' if len(given) == 1 else 'show'} a measured "
            "generation's modules: give --device cpu (or cuda); an estimate has no views"
        )
    if args.stage is not None:
        check_choice("--stage", args.stage, list(STAGES))
    if args.view is None and args.stage is None:
        applies = "applies" if len(given) == 1 else "apply"
        raise InvalidInputError(f"{' '.join(given)} {applies} to a view: give --view top or ops")
    options = _view_options(args)
    check_view(options, _FLAGS)
    if args.stage is None and options["view"] not in STAGED_VIEWS:
        raise InvalidInputError(
            f"--view {options['view']} shows one stage at a time: give --stage prefill or "
            "decode (or --view top or ops for every stage in one table)"
        )


def run(args: argparse.Namespace) -> int:
    device = _check_flags(args)
    model_args = parse_json_object(args.model_args, "--model-args") if args.model_args else None
    from layerscope.cli.specs import load_model

    torch.manual_seed(0)  # random weights and prompt of a real run
    loaded = load_model(args.model, model_args, meta=device.type == "meta")
    model = loaded.model
    batch, prompt = _shape(args, loaded)
    dtype = parse_model_dtype(args.dtype) if args.dtype else None
    if device.type != "meta":
        return _measure(model.to(dtype) if dtype is not None else model, args, batch, prompt)
    result = estimate_generate(
        model, target=_target(args), prompt=prompt,
        new_tokens=args.max_new_tokens,
        batch=parse_batches(args.batch) if args.batch else [batch], cache=args.cache,
        dtype=dtype, block_size=args.block_size, kv_dtype=args.kv_dtype, mode=args.mode,
        tp=args.tp,
    )  # fmt: skip
    result.show(width=args.width)
    write_outputs(args, result, result.render(width=args.width) if args.output else "")
    return 0
