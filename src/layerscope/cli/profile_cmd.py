"""Profile a model: build it, run it once on its inputs under instrumentation,
and print a view (the tree and table by default) or write a file.

TARGET names the model:
  examples:NAME             a built-in example (--list-examples), with its input
  package.module:attr       imported from the current directory or site-packages
  path/to/file.py:attr      its directory is importable: sibling imports work
  transformers:NAME         a Hugging Face model type (gpt2, bert, t5, llama,
                            whisper: the base model) or class (GPT2LMHeadModel)
                            built from its default config with random weights;
                            nothing is downloaded
  transformers:config.json  the same from a config file
attr is an nn.Module, or a callable returning one or a (module, inputs) pair
(inputs: a tensor, a tuple of positional or a dict of keyword inputs).
--model-args passes keyword arguments to it (config fields for transformers).

Inputs are random, on the model's device and repeatable (--seed): --input-shape
for positional tensors (token ids when the model starts with an embedding),
--kwargs for keyword ones, or --input FILE.pt for saved tensors.

The model runs in eval mode unless --train is given (as in torchinfo;
ls.profile keeps the model's own mode); every view states the mode, grad mode,
device and dtype it ran with.

Examples:
  layerscope profile examples:tiny_resnet
  layerscope profile examples:tiny_gpt --format tree --columns params,flops
  layerscope profile examples:tiny_resnet --time --format ops --top 10
  layerscope profile mypkg.models:build --model-args '{"width": 64}' \\
      --input-shape 1,3,224,224
  layerscope profile transformers:gpt2 --model-args '{"n_layer": 2}' \\
      --input-shape 1,128
  layerscope profile transformers:t5 --input-shape 1,32 \\
      --kwargs '{"decoder_input_ids": {"shape": [1, 8]}}'
  layerscope profile transformers:llama --device meta --input-shape 1,2048
  layerscope profile examples:tiny_gpt --backward --memory -o gpt.html
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import torch

from layerscope.cli.common import (
    add_view_arguments,
    check_roof,
    check_view_arguments,
    gpu_names,
    write_profile,
)
from layerscope.cli.inputs import (
    InputMaker,
    check_shape_flags,
    load_input_file,
    parse_dtype,
    parse_json_object,
    parse_model_dtype,
    parse_shape,
    to_device,
)
from layerscope.collect.inputs import model_device_dtype
from layerscope.collect.target.spec import KNOWN_TARGETS, parse_target
from layerscope.collect.timing.options import INT_BOUNDS
from layerscope.errors import InvalidInputError
from layerscope.hardware import is_profile_path
from layerscope.metrics.numerics import NonFiniteWarning
from layerscope.session.run import profile
from layerscope.validate import check_choice, check_int, refuse

#: The seeds torch's generators take.
SEED_BOUNDS = (-(2**63), 2**64 - 1)

NAME = "profile"
HELP = "profile a model (built-in, your own or a transformers config) and show or save it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    # A value such as "-2,4" is a (bad) shape, not a flag: it reaches --input-shape's
    # check, which says what is wrong, instead of argparse's "expected one argument".
    p._negative_number_matcher = re.compile(r"^-\d[\d,x.]*$")
    p.add_argument(
        "target",
        nargs="?",
        help="the model: examples:NAME, package.module:attr, file.py:attr, "
        "transformers:NAME or transformers:config.json",
    )
    p.add_argument(
        "--model-args",
        metavar="JSON",
        help="keyword arguments for the factory, or config fields for transformers: "
        "specs (e.g. '{\"n_layer\": 2}')",
    )
    p.add_argument("--list-examples", action="store_true", help="list the built-in examples")

    inputs = p.add_argument_group("inputs")
    inputs.add_argument(
        "--input-shape",
        action="append",
        metavar="D1,D2,...",
        help="shape of one random positional input (e.g. 2,3,32,32); repeat for several",
    )
    inputs.add_argument(
        "--input-dtype",
        metavar="DTYPE",
        help="dtype of the --input-shape inputs (e.g. long, float16); default: token ids "
        "(long) when the model starts with an embedding, else the model's dtype",
    )
    inputs.add_argument(
        "--kwargs",
        metavar="JSON",
        help='keyword inputs: a random tensor as {"shape": [2, 16], "dtype": "long", '
        '"low": 0, "high": 100} or any JSON value as it is, e.g. '
        '\'{"decoder_input_ids": {"shape": [2, 8]}, "use_cache": false}\'',
    )
    inputs.add_argument(
        "--input",
        metavar="FILE.pt",
        help="saved inputs (torch.save): a tensor, a tuple or list of them, or a dict of "
        "keyword inputs; loaded with weights_only=True",
    )
    inputs.add_argument(
        "--low", type=int, default=None, help="lowest random integer input (default 0)"
    )
    inputs.add_argument(
        "--high",
        type=int,
        default=None,
        help="random integer inputs stay below this (default: the size of the model's "
        "first embedding, else 2)",
    )
    inputs.add_argument(
        "--seed", type=int, default=0, help="seed of the random inputs and weights (0)"
    )

    run = p.add_argument_group("run")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument(
        "--eval",
        dest="mode",
        action="store_const",
        const="eval",
        help="run in eval mode (the default)",
    )
    mode.add_argument(
        "--train", dest="mode", action="store_const", const="train", help="run in train mode"
    )
    run.add_argument(
        "--device",
        default=None,
        help="run there: cpu, cuda, cuda:1, meta (shapes, FLOPs and memory without "
        "running kernels; tied weights stay tied)",
    )
    run.add_argument(
        "--target",
        dest="kernel_target",
        metavar="DEVICE",
        default=None,
        help="with --device meta, follow the kernels (attention, LSTM, BatchNorm) of "
        f"this device: cpu (the default there), cuda, {gpu_names()}, an alias or a "
        "device profile's .json",
    )
    run.add_argument(
        "--dtype", metavar="DTYPE", help="cast the model first (e.g. float16, bfloat16)"
    )
    run.add_argument(
        "--backward",
        action="store_true",
        help="also run backward on the sum of the outputs and measure it (FLOPs; "
        "gradient bytes with --memory; backward time with --time)",
    )
    run.add_argument(
        "--memory",
        action="store_true",
        help="per-module bytes saved for backward, output bytes and peak live bytes",
    )
    run.add_argument(
        "--numerics",
        choices=("record", "warn", "raise"),
        default=None,
        help="check every module's outputs (and gradients) for NaN/Inf and record "
        "activation statistics; 'raise' stops at the module where they first appear",
    )
    run.add_argument(
        "--underflow",
        action="store_true",
        help="with --numerics: also flag values too small for float16/bfloat16 "
        "(three more passes over every output)",
    )
    timing = p.add_argument_group("timing pass")
    timing.add_argument(
        "--time",
        action="store_true",
        help="add the timing pass (per-module latency; not on --device meta)",
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
    add_view_arguments(p)


def run(args: argparse.Namespace) -> int:
    if args.list_examples:
        import textwrap

        from layerscope.examples import EXAMPLES
        from layerscope.render.layout import terminal_width

        width = max(terminal_width(), 40)
        for name, ex in EXAMPLES.items():
            shape = ",".join(str(d) for d in ex.input_shape)
            print(f"examples:{name}  --input-shape {shape}")
            print(textwrap.fill(ex.description, width, initial_indent="  ", subsequent_indent="  "))
        return 0
    if not args.target:
        raise InvalidInputError("give a TARGET model (or --list-examples)")
    options = check_arguments(args)
    device = parse_device(args.device)
    model_args = parse_json_object(args.model_args, "--model-args") if args.model_args else None
    from layerscope.cli.specs import load_model

    torch.manual_seed(args.seed)  # random weights of a model built from a config
    loaded = load_model(args.target, model_args, meta=device is not None and device.type == "meta")
    model = loaded.model
    if args.dtype:
        model = model.to(parse_model_dtype(args.dtype))
    if device is not None and device.type != "meta":
        model = model.to(device)
        if args.memory and device.type == "cuda":
            _warm_cuda_libraries(device)
    call_args, call_kwargs = inputs_for(model, loaded.args, loaded.kwargs, args)
    if args.backward and not (call_args or call_kwargs):
        raise InvalidInputError("--backward needs an input (--input-shape, --kwargs or --input)")
    if call_args or call_kwargs:
        options["args"] = call_args
        options["kwargs"] = call_kwargs
    elif options.get("timing"):
        raise InvalidInputError("--time needs an input (--input-shape, --kwargs or --input)")
    if args.kernel_target is not None:
        _check_target_device(model, args.kernel_target)
        options["target"] = args.kernel_target
    with one_line_warnings():
        prof = profile(model, mode=args.mode or "eval", **options)
    write_profile(prof, args)
    if args.json:
        prof.save(args.json)
    return 0


def _warm_cuda_libraries(device: torch.device) -> None:
    """Create the cuBLAS and cuBLASLt workspaces a first matrix product takes from the
    caching allocator (32 MiB and 1 MiB on an H100, per thread: the forward's and the
    autograd engine's), so that they are this process's memory before the profile
    starts and not part of the first module's forward or backward peak."""
    a = torch.ones(16, 16, device=device, requires_grad=True)
    # a bias vector: cuBLASLt's fused epilogue; its backward runs cuBLAS matrix products
    # on the autograd engine's thread
    torch.addmm(a[0], a, a).sum().backward()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        torch.mm(a, a)
    torch.cuda.synchronize(device)


def gpu_spec(device: str | None) -> str | None:
    """The built-in spec of the CUDA device ``--device`` names, if it has one."""
    if not device or not device.strip().lower().startswith("cuda"):
        return None
    if not torch.cuda.is_available():
        return None  # the run itself says so
    from layerscope.hardware import spec_of_gpu

    try:
        return spec_of_gpu(torch.cuda.get_device_name(torch.device(device.strip())))
    except (RuntimeError, AssertionError, ValueError):
        return None


def check_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """Every flag that needs no model, checked before the model is built; the options
    for ``ls.profile`` they give."""
    check_view_arguments(args)
    if args.kernel_target is not None and args.kernel_target.strip().lower() not in KNOWN_TARGETS:
        if is_profile_path(args.kernel_target):  # a device profile: its arch's kernels
            parse_target(args.kernel_target)
        else:
            check_choice("--target", args.kernel_target, list(KNOWN_TARGETS))
    check_roof(args, args.kernel_target or gpu_spec(args.device))
    _check_input_flags(args)
    options: dict[str, Any] = {}
    if args.underflow and not args.numerics:
        raise InvalidInputError("--underflow needs --numerics")
    if args.numerics:
        options["numerics"] = {"nonfinite": args.numerics, "underflow": args.underflow}
    if args.memory:
        options["memory"] = True
    timing = _timing_flags(args)
    if args.time:
        options["timing"] = timing or True
    if args.backward:
        options["backward"] = True
    return options


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """layerscope's warnings (``--numerics warn``) as one ``layerscope: warning: ...``
    line each, not Python's with the path and line of the code that issued them."""
    with warnings.catch_warnings():
        python_way = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if not issubclass(category, NonFiniteWarning):
                python_way(message, category, filename, lineno, file, line)
                return
            text = re.sub(r"\s*\n\s*", " ", str(message).strip()).removeprefix("layerscope: ")
            (file or sys.stderr).write(f"layerscope: warning: {text}\n")

        warnings.showwarning = show
        yield


def _check_target_device(model: torch.nn.Module, text: str) -> None:
    """``--target`` steers a meta analysis: the model must be on meta, or on the target's
    own kind of device (``--target cpu`` on the CPU)."""
    on = model_device_dtype(model)[0].type
    target = parse_target(text)
    if on not in ("meta", target.device_type):
        raise InvalidInputError(
            f"--target {text} makes a meta analysis follow that device's kernels; the "
            f"model is on {on}, which runs {on} kernels (add --device meta, or leave "
            "--target out)"
        )


def _check_input_flags(args: argparse.Namespace) -> None:
    """The flags that say what the model is given: shapes, dtypes, keyword inputs."""
    check_shape_flags(args)
    if args.dtype:
        parse_model_dtype(args.dtype)
    check_int("--seed", args.seed, *SEED_BOUNDS)
    if args.input and args.input_shape:
        raise InvalidInputError("give --input FILE or --input-shape, not both")


def _timing_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The timing pass's options from its flags, which all need ``--time``."""
    timing = {
        name: getattr(args, name)
        for name in ("timer", "warmup", "repeats", "grad_mode", "batch_size")
        if getattr(args, name) is not None
    }
    for name, (low, high) in INT_BOUNDS.items():
        if name in timing:
            check_int(f"--{name.replace('_', '-')}", timing[name], low, high)
    timing.update({name: True for name in ("sync", "ops") if getattr(args, name)})
    if timing and not args.time:
        raise InvalidInputError(f"--{next(iter(timing)).replace('_', '-')} needs --time")
    if args.time and args.device and args.device.strip().startswith("meta"):
        raise InvalidInputError(
            "--time cannot run on --device meta: meta tensors hold no data and run no "
            "kernels, so there is no time to measure; drop --time (FLOPs, shapes and "
            "memory still work on meta) or time on cpu or cuda"
        )
    return timing


def parse_device(text: str | None) -> torch.device | None:
    """``--device``, refused early when this torch cannot use it."""
    if text is None:
        return None
    try:
        device = torch.device(text)
    except RuntimeError:
        refuse("--device", text, "a device torch knows: cpu, cuda, cuda:N or meta")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch was built without CUDA"
                if torch.version.cuda is None
                else "no CUDA device is visible"
            )
            raise InvalidInputError(f"--device {text}: {why}; use --device cpu or meta")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InvalidInputError(
                f"--device {text}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    return device


def inputs_for(
    model: torch.nn.Module,
    given_args: tuple[Any, ...] | None,
    given_kwargs: dict[str, Any] | None,
    args: argparse.Namespace,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword inputs: the flags' over those the target brought."""
    maker = InputMaker(model, args.seed, low=args.low, high=args.high)
    # --dtype casts the floating inputs that came with the model or the file too
    cast = parse_model_dtype(args.dtype) if args.dtype else None
    call_args = tuple(to_device(given_args or (), maker.device, cast))
    call_kwargs = dict(to_device(given_kwargs or {}, maker.device, cast))
    if args.input:
        file_args, file_kwargs = load_input_file(args.input)
        call_args = tuple(to_device(file_args, maker.device, cast)) or call_args
        call_kwargs.update(to_device(file_kwargs, maker.device, cast))
    if args.input_shape:
        dtype = parse_dtype(args.input_dtype, "--input-dtype") if args.input_dtype else None
        call_args = tuple(maker.tensor(parse_shape(s), dtype) for s in args.input_shape)
    if args.kwargs:
        for name, spec in parse_json_object(args.kwargs, "--kwargs").items():
            call_kwargs[name] = maker.kwarg(name, spec)
    return call_args, call_kwargs
