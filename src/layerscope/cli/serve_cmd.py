"""How many sequences a decoder model serves on one GPU you do not have, and at
what latency and throughput per batch size (ls.plan_serving, docs/generate.md):
the memory split as a server sizes it (weights, a prefill's workspace, a
reserve, the KV cache), the paged KV cache's capacity in tokens and blocks, the
most sequences of --max-context tokens that fit, and a row per batch size.
Nothing runs: the model is analysed on meta.

Examples:
  layerscope serve transformers:LlamaForCausalLM --dtype bfloat16 \\
      --target h100 --max-context 4096
  layerscope serve transformers:LlamaForCausalLM --dtype bfloat16 \\
      --target l4 --max-context 4096 --weights int4 --kv-dtype fp8 --json s.json
"""

from __future__ import annotations

import argparse

from layerscope.cli.common import add_model_arguments, check_outputs, gpu_names, write_outputs
from layerscope.cli.generate_cmd import parse_batches
from layerscope.cli.inputs import parse_json_object, parse_model_dtype
from layerscope.errors import InvalidInputError
from layerscope.generation.predicted import MODES
from layerscope.generation.serving import BLOCK_SIZE, KV_WIDTHS, plan_serving
from layerscope.generation.weights import GROUP_SIZE, SCHEMES
from layerscope.hardware import GPUS
from layerscope.validate import check_choice, check_int, check_number

NAME = "serve"
HELP = "how many sequences a decoder serves on a GPU, at what latency (docs/generate.md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    s = p.add_argument_group("the server")
    s.add_argument(
        "--target", default="h100", metavar="GPU", help=f"the GPU: {gpu_names()} (default h100)"
    )
    s.add_argument(
        "--max-context", type=int, metavar="N",
        help="the longest sequence served, prompt and output (default: the model's positions)",
    )  # fmt: skip
    s.add_argument(
        "--prompt", type=int, metavar="N",
        help="prompt tokens of the latency rows' requests (default min(2048, what fits))",
    )  # fmt: skip
    s.add_argument(
        "--new-tokens", type=int, default=256, metavar="N",
        help="output tokens of the latency rows' requests (default 256)",
    )  # fmt: skip
    s.add_argument(
        "--batch", metavar="B,B,...",
        help="batch sizes for the rows (default 1, 8, 32, 128, 256 that fit, and the most)",
    )  # fmt: skip
    s.add_argument(
        "--weights", metavar="SCHEME",
        help=f"the linears' weights as deployed: {', '.join(SCHEMES)} (default: as built); "
        "int8 and int4 weight-only (matmuls at the compute dtype), fp8 W8A8 (matmuls at "
        "the target's FP8 peak where it has one)",
    )  # fmt: skip
    s.add_argument(
        "--group-size", type=int, default=GROUP_SIZE, metavar="N",
        help=f"with --weights int4, its scale group (default {GROUP_SIZE})",
    )  # fmt: skip
    s.add_argument(
        "--kv-dtype", metavar="DTYPE",
        help=f"the KV cache's width: {', '.join(KV_WIDTHS)} (default: the model's)",
    )  # fmt: skip
    s.add_argument(
        "--block-size", type=int, default=BLOCK_SIZE, metavar="N",
        help=f"the paged cache's block, in tokens (default {BLOCK_SIZE})",
    )  # fmt: skip
    s.add_argument(
        "--memory-utilization", type=float, default=0.9, metavar="F",
        help="the share of the GPU's usable memory the server takes (default 0.9)",
    )  # fmt: skip
    s.add_argument(
        "--mode", default="eager", metavar="MODE",
        help="how the host issues a decode step: eager (a launch per kernel; the default) or "
        "graphs (CUDA graphs: one launch per step)",
    )  # fmt: skip
    s.add_argument(
        "--dtype", metavar="DTYPE", help="the compute dtype (e.g. bfloat16; default the model's)"
    )
    s.add_argument(
        "--tp", type=int, default=1, metavar="N",
        help="GPUs of one node the model is split over by its own tensor-parallel plan "
        "(default 1): memory per GPU, latency and throughput of the N together",
    )  # fmt: skip
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="PATH", help="also save the plan as JSON")
    out.add_argument(
        "--html", metavar="PATH",
        help="also write the HTML report (.html): the plan above its first prefill's analysis",
    )  # fmt: skip
    out.add_argument(
        "-o", "--output", metavar="PATH", help="also write what is printed to a text file (.txt)"
    )
    out.add_argument("--width", type=int, default=None, help="console width in characters")


def check_flags(args: argparse.Namespace) -> None:
    """The server's flags, checked before the model is built, each refusal naming its
    flag (``plan_serving`` checks them again by their parameters' names)."""
    check_choice("--target", str(args.target).strip().lower(), list(GPUS))
    if args.max_context is not None:
        check_int("--max-context", args.max_context, 2)
    if args.prompt is not None:
        check_int("--prompt", args.prompt, 1)
    check_int("--new-tokens", args.new_tokens, 1)
    if args.weights is not None:
        check_choice("--weights", args.weights, list(SCHEMES))
    check_int("--group-size", args.group_size, 1)
    if args.group_size != GROUP_SIZE and args.weights != "int4":
        given = "is not given" if args.weights is None else f"is {args.weights}"
        raise InvalidInputError(
            f"--group-size {args.group_size} is int4's scale group: give --weights int4 with "
            f"it (--weights {given})"
        )
    if args.kv_dtype is not None:
        check_choice("--kv-dtype", args.kv_dtype, list(KV_WIDTHS))
    check_int("--block-size", args.block_size, 1)
    check_number("--memory-utilization", args.memory_utilization, 0.0, 1.0, positive=True)
    check_choice("--mode", args.mode, list(MODES))
    check_int("--tp", args.tp, 1)


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    if args.width is not None:
        check_int("--width", args.width, 1)
    check_outputs(args.html, args.json, text=args.output)
    dtype = parse_model_dtype(args.dtype) if args.dtype else None
    batches = parse_batches(args.batch) if args.batch else None
    model_args = parse_json_object(args.model_args, "--model-args") if args.model_args else None
    from layerscope.cli.specs import load_model

    model = load_model(args.model, model_args, meta=True).model
    plan = plan_serving(
        model, target=str(args.target).strip().lower(), max_context=args.max_context,
        prompt=args.prompt, new_tokens=args.new_tokens, batch=batches, weights=args.weights,
        group_size=args.group_size, kv_dtype=args.kv_dtype, block_size=args.block_size,
        memory_utilization=args.memory_utilization, mode=args.mode, dtype=dtype, tp=args.tp,
    )  # fmt: skip
    plan.show(width=args.width)
    write_outputs(args, plan, plan.render(width=args.width) if args.output else "")
    return 0
