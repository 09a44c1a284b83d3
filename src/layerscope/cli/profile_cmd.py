"""Profile a model: build it, run it on random inputs (built-in examples bring their own),
print a view (the tree and table by default).

TARGET names a model: `examples:NAME` for a built-in example (see `--list-examples`),
`package.module:attr` or `path/to/file.py:attr`, where attr is an nn.Module or a function
that returns one when called with no arguments.

Examples:
  layerscope profile examples:tiny_resnet --input-shape 2,3,32,32
  layerscope profile examples:tiny_gpt --input-shape 2,16 --json gpt.json
  layerscope profile mypkg.models:build --input-shape 1,3,224,224 --input-shape 1,10
  layerscope profile examples:tiny_gpt --format tree --columns params,flops,flops_pct
  layerscope profile examples:tiny_resnet --time --format ops --sort forward_time --top 10
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import Any

import torch
from torch import nn

from layerscope.cli.common import add_view_arguments, check_view_arguments, print_profile
from layerscope.collect.session import profile
from layerscope.errors import InvalidInputError

NAME = "profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target", nargs="?", help="the model: examples:NAME, module:attr or file.py:attr"
    )
    p.add_argument(
        "--input-shape",
        action="append",
        metavar="D1,D2,...",
        help="shape of one random input; repeat for several inputs (e.g. 2,3,32,32)",
    )
    p.add_argument(
        "--input-dtype",
        default=None,
        help="dtype of the random inputs (e.g. long, float16); default: the model's, "
        "or token ids when the model starts with an embedding",
    )
    p.add_argument(
        "--device", default=None, help="move the model there first (e.g. cpu, cuda, meta)"
    )
    p.add_argument(
        "--backward",
        action="store_true",
        help="also run backward on the sum of the outputs and measure it too (FLOPs; "
        "gradient bytes with --memory; backward time with --time)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="per-module bytes saved for backward, output bytes and peak live bytes",
    )
    p.add_argument(
        "--numerics",
        choices=("record", "warn", "raise"),
        default=None,
        help="check every module's outputs (and gradients) for NaN/Inf and record "
        "activation statistics; 'raise' stops at the module where they first appear",
    )
    p.add_argument(
        "--underflow",
        action="store_true",
        help="with --numerics: also flag values too small for float16/bfloat16 "
        "(three more passes over every output)",
    )
    timing = p.add_argument_group("timing pass")
    timing.add_argument(
        "--time", action="store_true", help="add the timing pass (per-module latency)"
    )
    timing.add_argument(
        "--timer",
        choices=("hooks", "kineto", "fx"),
        default=None,
        help="hooks: cheap module timers (default); kineto: torch.profiler, with device "
        "time; fx: torch.fx node timing, with functional ops",
    )
    timing.add_argument("--warmup", type=int, default=None, help="untimed runs first (3)")
    timing.add_argument("--repeats", type=int, default=None, help="timed repeats (10)")
    timing.add_argument("--sync", action="store_true", help="CUDA: synchronize around every module")
    timing.add_argument(
        "--grad-mode",
        choices=("enabled", "no_grad", "inference_mode"),
        default=None,
        help="autograd mode of the timed forward (enabled)",
    )
    timing.add_argument(
        "--ops", action="store_true", help="kineto/fx: the ops under each module as rows"
    )
    timing.add_argument("--batch-size", type=int, default=None, help="for throughput")
    p.add_argument("--json", metavar="PATH", help="also save the profile as JSON")
    p.add_argument("--list-examples", action="store_true", help="list built-in examples")
    add_view_arguments(p)


def run(args: argparse.Namespace) -> int:
    if args.list_examples:
        from layerscope.examples import EXAMPLES

        for name, ex in EXAMPLES.items():
            shape = ",".join(str(d) for d in ex.input_shape)
            print(f"examples:{name:<16} --input-shape {shape:<12} {ex.description}")
        return 0
    if not args.target:
        raise InvalidInputError("give a TARGET model (or --list-examples)")
    check_view_arguments(args)
    model, default_input = load_target(args.target)
    if args.device:
        try:
            device = torch.device(args.device)
        except RuntimeError as e:
            raise InvalidInputError(f"bad --device {args.device!r}: {e}") from None
        model = model.to(device)
        if default_input is not None:
            default_input = default_input.to(device)
    kwargs: dict[str, Any] = {}
    if args.input_shape:
        kwargs["input_shape"] = [parse_shape(s) for s in args.input_shape]
        if args.input_dtype:
            kwargs["input_dtype"] = parse_dtype(args.input_dtype)
    elif default_input is not None:
        kwargs["args"] = (default_input,)
    elif args.input_dtype:
        raise InvalidInputError("--input-dtype needs --input-shape")
    if args.underflow and not args.numerics:
        raise InvalidInputError("--underflow needs --numerics")
    if args.numerics:
        kwargs["numerics"] = {"nonfinite": args.numerics, "underflow": args.underflow}
    if args.memory:
        kwargs["memory"] = True
    timing = {
        name: getattr(args, name)
        for name in ("timer", "warmup", "repeats", "grad_mode", "batch_size")
        if getattr(args, name) is not None
    }
    timing.update({name: True for name in ("sync", "ops") if getattr(args, name)})
    if timing and not args.time:
        raise InvalidInputError(f"--{next(iter(timing)).replace('_', '-')} needs --time")
    if args.time:
        kwargs["timing"] = timing or True
    if args.backward:
        if not (args.input_shape or default_input is not None):
            raise InvalidInputError("--backward needs an input (--input-shape)")
        kwargs["backward"] = True
    prof = profile(model, **kwargs)
    print_profile(prof, args)
    if args.json:
        prof.save(args.json)
    return 0


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise InvalidInputError(
            f"bad --input-shape {text!r}: use integers like 2,3,32,32"
        ) from None
    if not dims or any(d < 0 for d in dims):
        raise InvalidInputError(f"bad --input-shape {text!r}: use integers like 2,3,32,32")
    return dims


def parse_dtype(text: str) -> torch.dtype:
    dtype = getattr(torch, text.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise InvalidInputError(f"unknown dtype {text!r} (try float32, float16, bfloat16, long)")
    return dtype


def load_target(target: str) -> tuple[nn.Module, torch.Tensor | None]:
    """The model named by TARGET and, for built-in examples, their default input."""
    if target.startswith("examples:"):
        from layerscope.examples import get

        ex = get(target.split(":", 1)[1])
        return ex.build(), ex.example_input()
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise InvalidInputError(
            f"TARGET must look like module:attr or file.py:attr, got {target!r}"
        )
    if module_name.endswith(".py"):
        if not os.path.isfile(module_name):
            raise InvalidInputError(f"no such file: {module_name}")
        spec = importlib.util.spec_from_file_location("_layerscope_target", module_name)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    else:
        try:
            mod = importlib.import_module(module_name)
        except ImportError as e:
            raise InvalidInputError(f"cannot import {module_name!r}: {e}") from e
    obj = getattr(mod, attr, None)
    if obj is None:
        raise InvalidInputError(f"{module_name!r} has no attribute {attr!r}")
    if not isinstance(obj, nn.Module) and callable(obj):
        obj = obj()
    if not isinstance(obj, nn.Module):
        raise InvalidInputError(f"{target} is a {type(obj).__name__}, not an nn.Module")
    return obj, None
