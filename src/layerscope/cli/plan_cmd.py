"""Plan one GPU of a training run that cannot run here: its memory at the peak
(model states, unsharded parameters, gradients, activations, buffers of
collectives) against a budget, and the step time predicted from the target's
achievable rates beside its roofline lower bound, from one analysis of the model
on meta steered to the target GPU (docs/plan.md). --target also takes a device
profile that `layerscope calibrate` wrote.

The model is named as for `profile` (examples:NAME, package.module:attr,
path/to/file.py:attr, transformers:NAME); --input-shape is one GPU's
micro-batch (an example brings its own). --sweep tabulates plans over lists of
options, one row per combination.

Examples:
  layerscope plan examples:tiny_gpt --world-size 8 --sharding fsdp
  layerscope plan transformers:llama --input-shape 2,8192 --target h100 \\
      --world-size 64 --checkpoint auto --budget 80GB
  layerscope plan examples:tiny_gpt --sweep world_size=8,16 \\
      checkpoint=none,blocks
  layerscope plan examples:tiny_gpt --checkpoint blocks --json plan.json
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from decimal import Decimal
from typing import Any

from torch import nn

from layerscope.cli.common import (
    add_model_arguments,
    check_outputs,
    gpu_names,
    route_output,
    write_outputs,
    write_printed,
)
from layerscope.cli.inputs import (
    InputMaker,
    check_shape_flags,
    parse_dtype,
    parse_json_object,
    parse_shape,
)
from layerscope.errors import InvalidInputError
from layerscope.hardware import device_spec, is_profile_path
from layerscope.planning import plan, plan_sweep
from layerscope.planning.loss import LOSSES
from layerscope.planning.mesh import parse_mesh
from layerscope.planning.options import DEFAULTS as OPTION_DEFAULTS
from layerscope.planning.options import check_options, check_sharding, check_target
from layerscope.planning.states import OPTIMIZER_STATES, PRECISIONS
from layerscope.planning.strategies import SHARDINGS
from layerscope.planning.sweep import AXES, Source, Sweep, row_options
from layerscope.render import config as display_config
from layerscope.render.layout import terminal_width
from layerscope.render.wrap import wrap_words
from layerscope.validate import check_choice, check_int, check_number, refuse

NAME = "plan"
HELP = "plan one GPU of a training run: memory at the peak and step time (docs/plan.md)"

#: Byte units of --budget and --reserve: decimal (GB) and binary (GiB).
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
#: The flags that give one value of an axis --sweep can list instead.
AXIS_FLAGS = {"world_size": "--world-size", "sharding": "--sharding", "checkpoint": "--checkpoint",
              "precision": "--precision", "optimizer": "--optimizer",
              "grad_accum": "--grad-accum"}  # fmt: skip
#: ``ls.plan``'s defaults of those options.
DEFAULTS = {a: OPTION_DEFAULTS[a] for a in AXIS_FLAGS}


def _add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    net = p.add_argument_group("the cluster")
    net.add_argument(
        "--mesh", metavar="AXIS=N,...",
        help="the device mesh, torchtitan's axes (e.g. dp_shard=32,tp=8, dp_shard=4,pp=4, "
        "dp_shard=8,cp=2 or dp_shard=8,ep=4), instead of --world-size/--sharding/--hsdp",
    )  # fmt: skip
    net.add_argument(
        "--microbatches", type=int, metavar="M",
        help="with pp in --mesh: microbatches per step, each the input given (default: "
        "as many as stages)",
    )  # fmt: skip
    net.add_argument(
        "--schedule", metavar="NAME",
        help="with pp in --mesh: the pipeline schedule, gpipe, 1f1b (the default), "
        "interleaved_1f1b, zero_bubble or zbv (ZB-V: 2 stages a rank in a V)",
    )  # fmt: skip
    net.add_argument(
        "--virtual-stages", type=int, metavar="V",
        help="with --schedule interleaved_1f1b or zero_bubble: the stages each rank "
        "holds (default 2 and 1)",
    )  # fmt: skip
    net.add_argument(
        "--pp-split", metavar="PATH,...",
        help="with pp in --mesh: the module each later stage starts at (default: the "
        "cut whose slowest stage is fastest, the even split of the blocks if none is)",
    )  # fmt: skip
    net.add_argument(
        "--no-return-outputs", dest="return_outputs", action="store_false",
        help="with pp in --mesh: the last stage does not keep the microbatches' outputs "
        "(schedule.step(return_outputs=False), as torchtitan runs it)",
    )  # fmt: skip
    net.add_argument(
        "--stage", type=int, metavar="S",
        help="with pp in --mesh: the stage to plan (default: the one whose peak is highest)",
    )  # fmt: skip
    net.add_argument(
        "--tp-plan", metavar="JSON",
        help="with tp in --mesh: the tensor-parallel plan, module path patterns to styles, "
        "e.g. '{\"layers.*.mlp.up_proj\": \"colwise\", \"layers.*.mlp.down_proj\": "
        "\"rowwise\"}' (default: the model's own, a transformers config's "
        "base_model_tp_plan)",
    )  # fmt: skip
    net.add_argument(
        "--sequence-parallel", action="store_true",
        help="with tp in --mesh: shard the activations between the tensor-parallel regions "
        "along the sequence, as torchtitan does",
    )  # fmt: skip
    net.add_argument(
        "--gpus-per-node", type=int, metavar="N",
        help="GPUs per node (default: the target's reference system, 8)",
    )  # fmt: skip
    net.add_argument(
        "--nics-per-node", type=int, metavar="N",
        help="NICs per node that carry the collectives (default: 8, one per GPU)",
    )  # fmt: skip
    net.add_argument(
        "--nic-gbps", type=float, metavar="GBPS",
        help="one NIC's bandwidth in Gb/s (default: 400; 200 for the A100)",
    )  # fmt: skip


LOSS_HELP = (
    "plain (default: the model's logits and loss as analysed) or fused (a chunked fused "
    "linear cross-entropy, as Liger's: no full-vocabulary logits held)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    inputs = p.add_argument_group("inputs (one GPU's micro-batch)")
    inputs.add_argument(
        "--input-shape", action="append", metavar="D1,D2,...",
        help="shape of one positional input (e.g. 2,8192); repeat for several",
    )  # fmt: skip
    inputs.add_argument(
        "--input-dtype", metavar="DTYPE",
        help="dtype of the --input-shape inputs (default: token ids (long) when the model "
        "starts with an embedding, else the model's dtype)",
    )  # fmt: skip
    inputs.add_argument("--kwargs", metavar="JSON", help="keyword inputs, as for `profile`")
    run = p.add_argument_group("the training run")
    run.add_argument(
        "--target", default="h100", metavar="GPU",
        help=f"the GPU: {gpu_names()} (default h100), or a device profile's .json "
        "(layerscope calibrate)",
    )  # fmt: skip
    run.add_argument("--world-size", type=int, metavar="N", help="GPUs in the run (8)")
    run.add_argument("--sharding", metavar="KIND", help=f"{', '.join(SHARDINGS)} (fsdp: FSDP2)")
    run.add_argument(
        "--checkpoint", metavar="WHAT",
        help="activation checkpointing: none (default), blocks (every repeated block), op "
        "(every block under torchtitan's per-op policy), auto (the least recompute that fits "
        "the budget) or module paths (a,b)",
    )  # fmt: skip
    run.add_argument("--precision", metavar="P", help=f"{', '.join(PRECISIONS)} (bf16-mixed)")
    run.add_argument("--optimizer", metavar="OPT", help=f"{', '.join(OPTIMIZER_STATES)} (adamw)")
    run.add_argument("--grad-accum", type=int, metavar="N", help="micro-batches per step (1)")
    run.add_argument(
        "--budget", metavar="SIZE",
        help="memory per GPU, e.g. 80GB or 79.6GiB (default: the target's memory)",
    )  # fmt: skip
    run.add_argument(
        "--reserve", metavar="SIZE",
        help="kept aside from the budget for what the plan leaves out: CUDA context, "
        "workspaces, fragmentation (default 2GiB)",
    )  # fmt: skip
    run.add_argument(
        "--rank", type=int, default=0, metavar="N", help="the rank to plan (0: the largest shards)"
    )
    run.add_argument(
        "--no-reshard", action="store_true",
        help="FSDP2 keeps the unsharded parameters from the forward to the backward "
        "(reshard_after_forward=False)",
    )  # fmt: skip
    run.add_argument(
        "--units", metavar="PATH,...", help="FSDP2 units (default: the repeated blocks)"
    )
    _add_step_arguments(run)
    run.add_argument(
        "--hsdp", metavar="R,S",
        help="FSDP2 on a 2-D mesh: shard over groups of S GPUs, replicate over R of them "
        "(R x S = --world-size)",
    )  # fmt: skip
    run.add_argument(
        "--device", default=None,
        help="where the model is analysed: meta, the only choice (a plan runs no kernels)",
    )  # fmt: skip
    _add_cluster_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument(
        "--sweep", nargs="+", metavar="AXIS=V,V",
        help=f"a table of plans over every combination: AXIS one of {', '.join(AXES)}; "
        "checkpoint values none, blocks, op, auto or paths joined by + (e.g. world_size=8,16 "
        "checkpoint=none,blocks micro_batch=1,2)",
    )  # fmt: skip
    out.add_argument(
        "--json", metavar="PATH",
        help="also save the plan (ls.load_plan reads it; ls.load its analysis); with "
        "--sweep, the sweep's rows",
    )  # fmt: skip
    out.add_argument(
        "--html", metavar="PATH",
        help="also write the plan's HTML report (memory by part, the step's timeline, the "
        "step time; with --sweep, the plan of the sweep's best row, named, and the sweep)",
    )  # fmt: skip
    out.add_argument(
        "-o", "--output", metavar="PATH",
        help="also write the plan to PATH, as its extension says: .html (as --html), .json "
        "(as --json) or .txt (what is printed)",
    )  # fmt: skip
    out.add_argument(
        "-q", "--quiet", action="store_true",
        help="no status line on stderr (on a terminal one appears when planning takes 2 s)",
    )  # fmt: skip
    out.add_argument("--max-rows", type=int, metavar="N", help="rows of the module table")
    out.add_argument("--width", type=int, default=None, help="console width in characters")
    out.add_argument("--config", metavar="YAML", help="display configuration (styles)")


def _add_step_arguments(run: argparse._ArgumentGroup) -> None:
    """How the step runs (``_step_options`` reads them): the loss, FSDP2's reduce dtype,
    compile and float8."""
    run.add_argument("--loss", metavar="KIND", help=LOSS_HELP)
    run.add_argument(
        "--reduce-dtype", metavar="DTYPE",
        help="FSDP2's reduce dtype: fp32, bf16 or fp16 (default: fp32 under mixed "
        "precision, else the parameters')",
    )  # fmt: skip
    run.add_argument(
        "--compile", action="store_true",
        help="the model under torch.compile: each module's pointwise kernels fused, priced "
        "as one, and what its partitioner recomputes not kept for the backward "
        "(docs/plan.md)",
    )  # fmt: skip
    run.add_argument(
        "--float8", action="store_true",
        help="the linears trained in float8 as torchao does (tensorwise scaling; a target "
        "with float8 tensor cores)",
    )  # fmt: skip
    run.add_argument(
        "--float8-all-gather", action="store_true",
        help="with --float8 under FSDP2: the float8 linears' weights all-gathered and "
        "held unsharded in float8 (torchao's enable_fsdp_float8_all_gather)",
    )  # fmt: skip


def parse_size(text: str, flag: str) -> int:
    """``80GB``, ``2GiB``, ``1500000`` (bytes) as a whole number of bytes."""
    m = _SIZE.match(text)
    scale = _SIZE_UNITS.get(m.group(2).lower()) if m else None
    if m is None or scale is None:
        refuse(flag, text, "a size such as 80GB, 79.6GiB, 512MiB or a number of bytes")
    size = round(Decimal(m.group(1)) * scale)  # exact: 400 digits are refused by range
    if not m.group(2) and 0 < size < 2**20:
        refuse(flag, text, f"a size with its unit (a bare number is bytes): e.g. {text}GB")
    return size


#: What --checkpoint takes besides none and module paths.
CHECKPOINT_WORDS = ("blocks", "op", "auto")


def parse_checkpoint(text: str, flag: str = "--checkpoint") -> Any:
    """none, blocks, op, auto, or module paths separated by commas."""
    word = text.strip()
    if word.lower() == "none":
        return None
    if word in CHECKPOINT_WORDS:
        return word
    paths = [p.strip() for p in word.split(",") if p.strip()]
    if not paths or word.lower() in CHECKPOINT_WORDS:
        refuse(flag, text, "none, blocks, op, auto or module paths (a,b)",
               close=[word.lower()] if paths else [])  # fmt: skip
    return paths


def _check_paths(flag: str, paths: list[str], model: nn.Module) -> None:
    """Every path names a module of the model (a refusal says which are close)."""
    known = [name for name, _ in model.named_modules() if name]
    for path in paths:
        if path not in known:
            close = difflib.get_close_matches(path, known, n=3)
            words = "none, blocks, op, auto or " if flag.endswith("checkpoint") else ""
            refuse(flag, path, f"{words}a module path of the model", close=close)


def _axis_value(axis: str, text: str) -> Any:
    label = f"--sweep {axis}"
    if axis in ("micro_batch", "world_size", "grad_accum", "tp", "pp"):
        if not text.strip().isdecimal():
            refuse(label, text, "a whole number >= 1")
        return check_int(label, int(text), 1)
    if axis == "checkpoint":
        value = parse_checkpoint(text.replace("+", ","), label)
        return value
    if axis == "sharding":
        return check_sharding(label, text.strip(), cli=True)
    choices = {"precision": PRECISIONS, "optimizer": OPTIMIZER_STATES}
    return check_choice(label, text.strip(), list(choices[axis]))


def parse_sweep(items: list[str]) -> dict[str, list[Any]]:
    """``AXIS=V,V`` items as {axis: values}: each axis once, each value checked."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        axis, sep, values = item.partition("=")
        axis = axis.strip()
        if not sep or axis not in AXES or not values.strip():
            refuse("--sweep", item, f"AXIS=V1,V2,... with AXIS one of {', '.join(AXES)}")
        if axis in grid:
            raise InvalidInputError(f"--sweep lists {axis} twice; give its values once")
        texts = [v for v in values.split(",") if v.strip()]
        grid[axis] = [_axis_value(axis, v) for v in texts]
    return grid


#: The form --hsdp takes, for its refusals.
HSDP_FORM = {"what": "R,S: R replicas of S-way shards", "example": "2,4"}


def parse_hsdp(text: str) -> tuple[int, ...]:
    """``--hsdp R,S`` (or ``RxS``): two positive integers."""
    shape = parse_shape(text, "--hsdp", **HSDP_FORM)
    if len(shape) != 2:
        refuse("--hsdp", text, "{what} (positive integers, e.g. {example})".format(**HSDP_FORM))
    return shape


def _fsdp_options(args: argparse.Namespace) -> dict[str, Any]:
    """FSDP2's options from their flags (--no-reshard, --units, --hsdp, --reduce-dtype)."""
    opts: dict[str, Any] = {}
    if args.no_reshard:
        opts["reshard_after_forward"] = False
    if args.units is not None:
        opts["units"] = [u.strip() for u in args.units.split(",") if u.strip()]
    if args.hsdp is not None:
        opts["hsdp"] = parse_hsdp(args.hsdp)
    if args.reduce_dtype is not None:
        opts["reduce_dtype"] = check_choice("--reduce-dtype", args.reduce_dtype,
                                            ["fp32", "bf16", "fp16"])  # fmt: skip
    return opts


def _options(args: argparse.Namespace, grid: dict[str, list[Any]]) -> dict[str, Any]:
    """The plan's options from the flags (``planning.Options``'s names), checked; a swept
    axis from --sweep instead."""
    given = {
        "world_size": args.world_size, "sharding": args.sharding, "precision": args.precision,
        "optimizer": args.optimizer, "grad_accum": args.grad_accum,
        "checkpoint": parse_checkpoint(args.checkpoint) if args.checkpoint is not None else None,
    }  # fmt: skip
    for axis, flag in AXIS_FLAGS.items():
        if axis in grid and getattr(args, axis) is not None:
            raise InvalidInputError(f"{flag} and --sweep {axis}=... both give {axis}; give one")
    opts: dict[str, Any] = {a: (v if v is not None else DEFAULTS[a]) for a, v in given.items()}
    if args.world_size is not None:
        check_int("--world-size", args.world_size, 1)
    if args.grad_accum is not None:
        check_int("--grad-accum", args.grad_accum, 1)
    check_sharding("--sharding", opts["sharding"], cli=True)
    check_choice("--precision", opts["precision"], list(PRECISIONS))
    check_choice("--optimizer", opts["optimizer"], list(OPTIMIZER_STATES))
    if is_profile_path(args.target):  # a device profile (layerscope calibrate's)
        opts["target"] = args.target.strip()
        device_spec(opts["target"])
    else:
        check_target("--target", args.target)
        opts["target"] = args.target.strip().lower()
    if "world_size" not in grid:
        check_int("--rank", args.rank, 0, opts["world_size"] - 1)
        if opts["sharding"] == "none" and opts["world_size"] != 1 and "sharding" not in grid:
            raise InvalidInputError("--sharding none is one GPU: give --world-size 1")
    opts["rank"] = args.rank
    if args.budget is not None:
        opts["budget"] = parse_size(args.budget, "--budget")
    if args.reserve is not None:
        opts["reserve_bytes"] = parse_size(args.reserve, "--reserve")
    opts |= _fsdp_options(args) | _step_options(args)
    if args.mesh is not None:
        opts["mesh"] = parse_mesh(args.mesh)
        for key in ("world_size", "sharding"):
            if getattr(args, key) is None:
                opts.pop(key)  # the mesh gives it
    cluster = _cluster(args)
    if cluster:
        opts["cluster"] = cluster
    if args.device is not None and args.device.strip().lower() != "meta":
        refuse("--device", args.device, "meta",
               why="a plan analyses a meta copy of the model, steered to --target's kernels; "
               "nothing runs on a device")  # fmt: skip
    return opts


def _step_options(args: argparse.Namespace) -> dict[str, Any]:
    """How the step runs, from --compile, --float8, --loss, --sequence-parallel,
    --tp-plan and the pipeline's --microbatches, --schedule, --virtual-stages,
    --pp-split, --no-return-outputs and --stage."""
    opts: dict[str, Any] = {}
    if args.compile:
        opts["compile"] = True
    if args.float8:
        opts["float8"] = True
    if args.float8_all_gather:
        opts["float8_all_gather"] = True
    if args.loss is not None:
        opts["loss"] = check_choice("--loss", args.loss.strip().lower(), list(LOSSES))
    if args.sequence_parallel:
        opts["sequence_parallel"] = True
    for key in ("microbatches", "schedule", "stage", "virtual_stages"):
        if getattr(args, key) is not None:
            opts[key] = getattr(args, key)
    if not args.return_outputs:
        opts["return_outputs"] = False
    if args.pp_split is not None:
        opts["pp_split"] = [p.strip() for p in args.pp_split.split(",") if p.strip()]
    if args.tp_plan is not None:
        try:
            opts["tp_plan"] = json.loads(args.tp_plan)
        except json.JSONDecodeError as e:
            refuse("--tp-plan", args.tp_plan, "a JSON object of module path patterns to styles",
                   why=str(e))  # fmt: skip
    return opts


def _cluster(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster's fields the flags give (``ls.plan(cluster=...)``; the rest the
    target's reference system)."""
    out: dict[str, Any] = {}
    for key, flag in (("gpus_per_node", "--gpus-per-node"), ("nics_per_node", "--nics-per-node")):
        if getattr(args, key) is not None:
            out[key] = check_int(flag, getattr(args, key), 1)
    if args.nic_gbps is not None:
        out["nic_bandwidth"] = check_number("--nic-gbps", args.nic_gbps, positive=True) * 1e9 / 8
    return out


def _inputs(model: nn.Module, loaded: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The micro-batch: the flags' inputs on meta, else those the model spec brought."""
    maker = InputMaker(model, 0)
    call: dict[str, Any] = {"args": tuple(loaded.args or ()), "kwargs": dict(loaded.kwargs or {})}
    if args.input_shape:
        dtype = parse_dtype(args.input_dtype, "--input-dtype") if args.input_dtype else None
        call["args"] = tuple(maker.tensor(parse_shape(s), dtype) for s in args.input_shape)
    if args.kwargs:
        for name, spec in parse_json_object(args.kwargs, "--kwargs").items():
            call["kwargs"][name] = maker.kwarg(name, spec)
    if not call["args"] and not call["kwargs"]:
        raise InvalidInputError("a plan needs the micro-batch: give --input-shape (or --kwargs)")
    return call


def _best_plan(sweep: Sweep, model: nn.Module, call: dict[str, Any], opts: dict[str, Any]) -> Any:
    """The plan of the sweep's best row (``Sweep.best``), which the HTML report leads
    with; the row is named on the terminal."""
    from layerscope.planning.html import row_said

    row = sweep.best()
    chosen = row_options(row, opts)
    here = Source(model, call["args"], call["kwargs"] or None, None).at(row.micro_batch)
    text = f"HTML report: {row_said(sweep.axes, row)}."  # the page's words too
    print("\n".join(wrap_words(text, terminal_width(), "  ")))
    return plan(model, *here.args, kwargs=here.kwargs, **chosen)


def _check_flags(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The flags that need no model, checked before it is built; the sweep's grid."""
    check_shape_flags(args)
    for flag, value in (("--width", args.width), ("--max-rows", args.max_rows)):
        if value is not None:
            check_int(flag, value, 1)
    if args.max_rows is not None and args.sweep:
        raise InvalidInputError("--max-rows applies to one plan's module table, not to --sweep")
    route_output(args)  # -o plan.html is --html plan.html
    check_outputs(args.html, args.json, text=args.output)
    if args.config:
        display_config.load(args.config)
    return parse_sweep(args.sweep) if args.sweep else {}


def run(args: argparse.Namespace) -> int:
    grid = _check_flags(args)
    opts = _options(args, grid)
    if not grid:  # one plan: every option checked together before the model is built
        opts = check_options(opts).to_dict()
    model_args = parse_json_object(args.model_args, "--model-args") if args.model_args else None
    from layerscope.cli.specs import load_model

    loaded = load_model(args.model, model_args, meta=True)
    model = loaded.model
    for flag, paths in (("--units", opts.get("units")), ("--checkpoint", opts["checkpoint"])):
        if isinstance(paths, list):
            _check_paths(flag, paths, model)
    for value in grid.get("checkpoint", ()):
        if isinstance(value, list):
            _check_paths("--sweep checkpoint", value, model)
    call = _inputs(model, loaded, args)
    if grid:
        sweep = plan_sweep(model, *call["args"], kwargs=call["kwargs"] or None,
                           progress=False if args.quiet else None, **opts | grid)  # fmt: skip
        sweep.show(width=args.width)
        if args.json:
            sweep.save(args.json)
        if args.output:
            write_printed(args.output, sweep.render(width=args.width))
        if args.html:
            _best_plan(sweep, model, call, opts).to_html(args.html, sweep=sweep)
        return 0
    result = plan(model, *call["args"], kwargs=call["kwargs"] or None,
                  progress=False if args.quiet else None, **opts)  # fmt: skip
    result.show(width=args.width, max_rows=args.max_rows)
    text = result.render(width=args.width, max_rows=args.max_rows) if args.output else ""
    write_outputs(args, result, text)
    return 0
