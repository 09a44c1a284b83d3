"""Loading is safe: every malformed input is a SchemaError naming the file and the JSON
path of the bad value, no RecursionError at any depth, and whatever loads can be printed,
checked, rendered in every view and saved again."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import pickle
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch import nn

import layerscope as ls
from layerscope.analysis.fold import fold
from layerscope.cli import main
from layerscope.export import jsonread
from layerscope.export.formats import FORMATS, export_text
from layerscope.export.json import MAX_BYTES, MAX_DEPTH, MAX_NESTING, comparable
from layerscope.export.jsonread import MEMORY_FACTOR, available_memory, default_max_bytes
from layerscope.render.units import nbytes

VIEWS = ("table", "tree", "repr", "top", "ops")


@cache
def small() -> dict[str, Any]:
    """A plain profile of Linear(3, 2) inside a Sequential, as parsed JSON."""
    prof = ls.profile(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    data = json.loads(prof.to_json(indent=None))
    assert isinstance(data, dict)
    return data


def edited(path: list[str | int], value: Any) -> dict[str, Any]:
    """``small()`` with the value at ``path`` replaced (or deleted, for ``DELETE``)."""
    return _replaced(small(), path, value)


def _replaced(original: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    """A copy of ``original`` with the value at ``path`` replaced (or deleted)."""
    data = copy.deepcopy(original)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


DELETE = object()
CHILD: list[str | int] = ["root", "children", 0]

#: (where, new value) -> the SchemaError's exact message.
MALFORMED: list[tuple[list[str | int], Any, str]] = [
    (
        [*CHILD, "metrics", "flops"],
        "many",
        "$.root.children[0].metrics.flops: expected a finite number, got the string 'many'",
    ),
    (
        [*CHILD, "self_metrics", "forward_time"],
        "fast",
        "$.root.children[0].self_metrics.forward_time: expected a number or "
        '"NaN", "Infinity" or "-Infinity", got the string \'fast\'',
    ),
    (
        ["root", "metrics", "params"],
        True,
        "$.root.metrics.params: expected a finite number, got true",
    ),
    (
        ["root", "metrics", "flops"],
        "NaN",
        "$.root.metrics.flops: expected a finite number, got the string 'NaN'",
    ),
    (["root", "calls"], "many", "$.root.calls: expected an integer >= 0, got the string 'many'"),
    (
        [*CHILD, "calls"],
        -1,
        "$.root.children[0].calls: expected an integer >= 0, got the integer -1",
    ),
    (
        [*CHILD, "calls"],
        2**63,
        "$.root.children[0].calls: expected an integer >= 0, got the integer 9223372036854775808",
    ),
    (
        [*CHILD, "depth"],
        "1",
        "$.root.children[0].depth: expected an integer from 0 to 256, got the string '1'",
    ),
    (
        [*CHILD, "depth"],
        2,
        "$.root.children[0].depth: expected 1 (its parent's depth + 1), got the integer 2",
    ),
    (["root", "depth"], 1, "$.root.depth: expected 0 (the root), got the integer 1"),
    (["unsupported_ops"], [], "$.unsupported_ops: expected an object, got an empty array"),
    (
        ["unsupported_ops"],
        {"aten::foo": {"count": 1}},
        "$.unsupported_ops[\"aten::foo\"]: missing key 'modules'",
    ),
    (CHILD, 5, "$.root.children[0]: expected a module node (an object), got the integer 5"),
    (CHILD, None, "$.root.children[0]: expected a module node (an object), got null"),
    (
        ["root", "children"],
        {"0": {}},
        "$.root.children: expected an array of module nodes, got an object",
    ),
    ([*CHILD, "name"], DELETE, "$.root.children[0]: missing key 'name' of a module node"),
    ([*CHILD, "path"], 0, "$.root.children[0].path: expected a string, got the integer 0"),
    (
        [*CHILD, "inputs"],
        {"0": []},
        "$.root.children[0].inputs: expected an array of call signatures, got an object",
    ),
    (
        [*CHILD, "inputs", 0],
        "x",
        "$.root.children[0].inputs[0]: expected an array of leaves (one call's inputs or "
        "outputs), got the string 'x'",
    ),
    (
        [*CHILD, "inputs", 0, 0, "shape", 1],
        "3",
        "$.root.children[0].inputs[0][0].shape[1]: expected an integer >= 0, got the string '3'",
    ),
    (
        [*CHILD, "inputs", 0, 0, "dtype"],
        DELETE,
        "$.root.children[0].inputs[0][0]: missing key 'dtype'",
    ),
    (
        [*CHILD, "outputs", 0, 0],
        ["path", "shape"],
        "$.root.children[0].outputs[0][0]: expected an object, got an array of 2 items",
    ),
    (
        [*CHILD, "by_dtype", "float32", "params"],
        1.5,
        "$.root.children[0].by_dtype.float32.params: expected an integer >= 0, got the number 1.5",
    ),
    (
        [*CHILD, "repeat"],
        0,
        "$.root.children[0].repeat: expected an integer >= 1, got the integer 0",
    ),
    ([*CHILD, "shared"], "w", "$.root.children[0].shared: expected an array, got the string 'w'"),
    (
        [*CHILD, "numerics"],
        {"nan": -2},
        "$.root.children[0].numerics.nan: expected an integer >= 0, got the integer -2",
    ),
    (
        ["numerics"],
        {
            "origin": {
                "path": "",
                "type": "M",
                "call": 0,
                "where": "inside",
                "shapes": [],
                "nan": 0,
                "inf": 1,
            }
        },
        "$.numerics.origin.where: expected one of 'output', 'grad_output', 'grad_input', "
        "got the string 'inside'",
    ),
    (
        ["timing"],
        {"latency": {"median": 1.0, "p90": 1.0, "iqr": 0.0}},
        "$.timing: missing key 'timer' (needed with 'latency')",
    ),
    (
        ["memory", "forward_peak_bytes"],
        "1 KiB",
        "$.memory.forward_peak_bytes: expected a 64-bit integer, got the string '1 KiB'",
    ),
    (["model", "ran"], "yes", "$.model.ran: expected true or false, got the string 'yes'"),
    (["model", "device"], 0, "$.model.device: expected a string or null, got the integer 0"),
    (["notices"], ["ok", 3], "$.notices[1]: expected a string, got the integer 3"),
    (
        ["model", "extension"],
        {"a": [{"b": ls}]},
        "$.model.extension.a[0].b: expected JSON data (an object, array, string, number, true, "
        "false or null), got a module object",
    ),
    (["root"], DELETE, "$: missing key 'root' (the module tree)"),
    (["root"], [], "$.root: expected a module node (an object), got an empty array"),
    (
        ["schema"],
        "layerscope/99",
        "$.schema: unsupported profile schema 'layerscope/99'; this layerscope reads "
        "'layerscope/1'",
    ),
    (["schema"], DELETE, "$: missing key 'schema': not a layerscope profile ('layerscope/1')"),
]


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED)
def test_malformed_values_name_their_json_path(
    path: list[str | int], value: Any, message: str, tmp_path: Path
) -> None:
    data = edited(path, value)
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict(data)
    assert str(info.value) == message
    if "module object" in message:
        return  # not JSON: no file can hold it
    file = tmp_path / "p.json"
    file.write_text(json.dumps(data))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == f"{file}: {message}"


def test_node_from_dict_names_paths_from_the_node() -> None:
    with pytest.raises(ls.SchemaError) as info:
        ls.Node.from_dict({"path": ""})
    assert str(info.value) == "$: missing key 'name' of a module node"
    node = copy.deepcopy(small()["root"])
    node["children"][0]["metrics"]["macs"] = [1]
    with pytest.raises(ls.SchemaError) as info:
        ls.Node.from_dict(node)
    assert str(info.value) == (
        "$.children[0].metrics.macs: expected a finite number, got an array of 1 items"
    )
    again = ls.Node.from_dict(small()["root"]["children"][0])
    assert again.path == "0" and again.metrics["params"] == 8


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict([])  # type: ignore[arg-type]
    assert str(info.value) == "$: a saved profile must be a JSON object, got an empty array"


def chain(levels: int) -> dict[str, Any]:
    """A profile whose module tree is a chain ``levels`` deep below the root."""
    root: dict[str, Any] = {
        "path": "",
        "name": "M",
        "type": "M",
        "node_id": "0",
        "depth": 0,
        "calls": 1,
        "metrics": {"params": 1},
        "self_metrics": {},
    }
    node = root
    for depth in range(1, levels + 1):
        child = {
            "path": f"{node['path']}.m".lstrip("."),
            "name": "m",
            "type": "M",
            "node_id": ".".join(["1"] * depth),
            "depth": depth,
            "calls": 1,
            "metrics": {"params": 1},
            "self_metrics": {},
        }
        node["children"] = [child]
        node = child
    node["self_metrics"] = {"params": 1}
    return {"schema": "layerscope/1", "root": root}


def test_trees_up_to_the_depth_limit_round_trip(tmp_path: Path) -> None:
    prof = ls.Profile.from_dict(chain(MAX_DEPTH))
    assert max(n.depth for n in prof.nodes()) == MAX_DEPTH == 256
    prof.save(tmp_path / "deep.json")
    again = ls.load(tmp_path / "deep.json")
    assert again == prof
    again.self_check()
    for view in VIEWS:
        again.render(view=view, width=100)


def test_deeper_trees_are_refused_without_recursion_errors(tmp_path: Path) -> None:
    message = "$.root: the module tree is more than 256 levels deep (layerscope reads up to 256)"
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict(chain(MAX_DEPTH + 1))
    assert str(info.value) == message
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict(chain(900))
    assert str(info.value) == message
    file = tmp_path / "deep.json"
    file.write_text(json.dumps(chain(300)))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == f"{file}: {message}"
    # 900 levels nest past what Python's JSON parser reads: refused all the same
    deep = '{"schema": "layerscope/1", "root": ' + '{"children": [' * 900 + "]}" * 900 + "}"
    file.write_text(deep)
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"{file} is nested too deeply to read (layerscope reads module trees up to 256 levels deep)"
    )


def test_saving_a_tree_deeper_than_the_limit_is_refused(tmp_path: Path) -> None:
    prof = ls.Profile.from_dict(chain(MAX_DEPTH))
    leaf = prof.nodes()[-1]
    leaf.children.append(ls.Node(path="x", name="x", type="X", depth=MAX_DEPTH + 1))
    with pytest.raises(ls.ExportError) as info:
        prof.save(tmp_path / "p.json")
    assert str(info.value) == (
        f"cannot write {tmp_path / 'p.json'}: the module tree is 257 levels deep; "
        "layerscope/1 files hold up to 256"
    )


def test_unknown_values_nest_at_most_the_limit() -> None:
    nested: Any = 1
    for _ in range(MAX_NESTING):
        nested = [nested]
    ls.Profile.from_dict(edited(["model", "x"], nested))
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict(edited(["model", "x"], [nested]))
    assert str(info.value).endswith(": nested more than 64 levels deep")
    assert str(info.value).startswith("$.model.x[0][0][0]")


# ---- files that are not profiles -----------------------------------------------------
def test_binary_input_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"{file} is not a layerscope profile: not UTF-8 text (invalid start byte at byte 0)"
    )


def test_a_pickle_is_never_unpickled(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_bytes(pickle.dumps(small()))
    with pytest.raises(ls.SchemaError, match="is not a layerscope profile: not UTF-8 text"):
        ls.load(file)


def test_invalid_utf8_inside_a_string_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_bytes(b'{"schema": "layerscope/1", "model": {"name": "\xff"}}')
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"{file} is not a layerscope profile: not UTF-8 text (invalid start byte at byte 46)"
    )


def test_integers_of_4300_digits_and_more_are_refused(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    text = json.dumps(small())
    assert '"calls": 1,' in text
    file.write_text(text.replace('"calls": 1', '"calls": ' + "9" * 4300, 1))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"{file}: $.root.calls: expected an integer >= 0, got an integer of 4300 digits"
    )
    file.write_text(text.replace('"calls": 1', '"calls": ' + "9" * 4301, 1))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value).startswith(
        f"{file} holds a number too long to read: Exceeds the limit (4300 digits) for "
        "integer string conversion"
    )


def test_invalid_json_and_a_top_level_list(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_text("{not json")
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"{file} is not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )
    file.write_text("")
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == f"{file} is not valid JSON: the file is empty"
    file.write_text(" \n")
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == f"{file} is not valid JSON: the file holds only white space"
    file.write_text("[1, 2]")
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"{file}: $: a saved profile must be a JSON object, got an array of 2 items"
    )


def test_a_missing_file_is_file_not_found_and_a_directory_a_schema_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(FileNotFoundError):
        ls.load(tmp_path / "missing.json")
    with pytest.raises(ls.SchemaError) as info:
        ls.load(tmp_path)
    assert str(info.value) == f"cannot read {tmp_path}: it is a directory"


def test_a_device_with_no_end_is_refused_at_the_size_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # /dev/zero has no size and no end: at most max_bytes + 1 = 1,001 bytes are read.
    with pytest.raises(ls.SchemaError) as info:
        ls.load("/dev/zero", max_bytes=1000)
    assert str(info.value) == (
        "cannot read /dev/zero: it holds more than 1,000 bytes, the most ls.load reads "
        "(raise it with max_bytes= or $LAYERSCOPE_MAX_BYTES)"
    )
    monkeypatch.setenv("LAYERSCOPE_MAX_BYTES", "4096")
    assert main(["show", "/dev/zero"]) == 2
    assert capsys.readouterr().err.strip() == (
        "layerscope: error: cannot read /dev/zero: it holds more than 4,096 bytes, the most "
        "ls.load reads (raise it with max_bytes= or $LAYERSCOPE_MAX_BYTES)"
    )


def test_the_size_limit_on_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_BYTES == 1024**3  # the default: 1 GiB
    file = tmp_path / "p.json"
    file.write_text(json.dumps(small()))
    size = file.stat().st_size
    assert ls.load(file, max_bytes=size).root.type == "Sequential"  # exactly the limit
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file, max_bytes=size - 1)
    assert str(info.value) == (
        f"cannot read {file}: it holds more than {size - 1:,} bytes, the most ls.load "
        "reads (raise it with max_bytes= or $LAYERSCOPE_MAX_BYTES)"
    )
    monkeypatch.setenv("LAYERSCOPE_MAX_BYTES", str(size - 1))
    with pytest.raises(ls.SchemaError, match=f"more than {size - 1:,} bytes"):
        ls.load(file)
    assert ls.load(file, max_bytes=size).root.type == "Sequential"  # the keyword wins
    monkeypatch.setenv("LAYERSCOPE_MAX_BYTES", "lots")
    with pytest.raises(ls.InvalidInputError) as bad:
        ls.load(file)
    assert str(bad.value) == "$LAYERSCOPE_MAX_BYTES must be an int >= 1, got 'lots'"
    with pytest.raises(ls.InvalidInputError) as bad:
        ls.load(file, max_bytes=0)
    assert str(bad.value) == "max_bytes must be an int >= 1, got 0"


def test_the_default_limit_is_a_share_of_the_memory_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MEMORY_FACTOR == 12
    assert default_max_bytes(None) == MAX_BYTES  # unknown: 1 GiB
    assert default_max_bytes(12 * 2**30) == MAX_BYTES  # 12 GiB / 12 = 1 GiB, the cap
    assert default_max_bytes(13 * 2**30) == MAX_BYTES
    assert default_max_bytes(12 * 2**30 - 12) == 2**30 - 1
    assert default_max_bytes(6 * 2**30) == 2**29  # 6 GiB / 12 = 512 MiB
    assert default_max_bytes(0) == 1
    available = available_memory()
    assert available is None or available > 0
    file = tmp_path / "p.json"
    file.write_text(json.dumps(small()))
    size = file.stat().st_size
    # 12 x (size - 1) bytes available: the default limit is size - 1 bytes
    monkeypatch.setattr(jsonread, "available_memory", lambda: 12 * (size - 1))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == (
        f"cannot read {file}: it holds more than {size - 1:,} bytes, the most ls.load "
        f"reads with {nbytes(12 * (size - 1))} of memory available (1/12 of it: a document "
        "takes up to 12 times its size to load and show) (raise it with max_bytes= or "
        "$LAYERSCOPE_MAX_BYTES)"
    )
    assert ls.load(file, max_bytes=size).root.type == "Sequential"  # the keyword wins
    monkeypatch.setenv("LAYERSCOPE_MAX_BYTES", str(size))
    assert ls.load(file).root.type == "Sequential"  # and the environment
    monkeypatch.delenv("LAYERSCOPE_MAX_BYTES")
    monkeypatch.setattr(jsonread, "available_memory", lambda: 12 * size)
    assert ls.load(file).root.type == "Sequential"  # exactly the limit


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_bytes(b"\xef\xbb\xbf" + json.dumps(small()).encode())
    assert ls.load(file).root.type == "Sequential"


def test_big_metric_integers_load_as_floats_and_past_a_float_are_refused() -> None:
    prof = ls.Profile.from_dict(edited(["root", "metrics", "flops"], 2**70))
    assert prof.root.metrics["flops"] == float(2**70)
    prof.render(width=100)
    with pytest.raises(ls.SchemaError) as info:
        ls.Profile.from_dict(edited(["root", "metrics", "flops"], 10**400))
    assert str(info.value) == (
        "$.root.metrics.flops: expected a finite number (within a float's range), "
        "got an integer of 401 digits"
    )


# ---- what exporters read: refused at load, or exported ------------------------------
@cache
@cache
def timed_dict() -> dict[str, Any]:
    """Linear(3, 2) + ReLU with memory=True and one timed repeat, as parsed JSON."""
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    prof = ls.profile(model, torch.randn(1, 3), memory=True, timing={"warmup": 0, "repeats": 1})
    data = json.loads(prof.to_json(indent=None))
    assert isinstance(data, dict)
    # enter '', enter '0', exit '0', enter '1', exit '1', exit '', end: 7 events, 3 paths
    assert len(data["memory"]["timeline"]["op"]) == 7
    assert data["timing"]["trace"]["paths"] == ["", "0", "1"]
    return data


def hostile(path: list[str | int], value: Any) -> dict[str, Any]:
    """``timed_dict()`` with the value at ``path`` replaced (or deleted, for ``DELETE``)."""
    return _replaced(timed_dict(), path, value)


TIMELINE: list[str | int] = ["memory", "timeline"]
SPAN: list[str | int] = ["timing", "trace", "forward", 0]

#: (where, new value) -> the SchemaError's exact message: what made to_html raise a
#: KeyError and to_trace a ValueError or OverflowError before the format said so.
EXPORTER_INPUTS: list[tuple[list[str | int], Any, str]] = [
    ([*TIMELINE, "bytes"], DELETE, "$.memory.timeline: missing key 'bytes'"),
    ([*TIMELINE, "path"], DELETE, "$.memory.timeline: missing key 'path'"),
    ([*TIMELINE, "event"], DELETE, "$.memory.timeline: missing key 'event'"),
    (
        [*TIMELINE, "bytes"],
        [0, 8],
        "$.memory.timeline.bytes: expected an array of 7 items (one per item of 'op'), "
        "got an array of 2 items",
    ),
    (
        [*SPAN, 2],
        "Infinity",
        "$.timing.trace.forward[0][2]: expected a number from -1e9 to 1e9, "
        "got the string 'Infinity'",
    ),
    (
        [*SPAN, 3],
        1e308,
        "$.timing.trace.forward[0][3]: expected a number from -1e9 to 1e9, got the number 1e+308",
    ),
    (
        [*SPAN, 0],
        3,  # paths has 3 entries: indices 0, 1, 2
        "$.timing.trace.forward[0][0]: expected an index into 'paths' (an integer below 3), "
        "got the integer 3",
    ),
    (
        [*SPAN, 1],
        "Infinity",
        "$.timing.trace.forward[0][1]: expected an integer >= 0, got the string 'Infinity'",
    ),
    (
        SPAN,
        [0, 0, 0.0],
        "$.timing.trace.forward[0]: expected an array of 4 items, got an array of 3 items",
    ),
    (["timing", "trace", "paths"], DELETE, "$.timing.trace: missing key 'paths'"),
    (
        ["timing", "trace", "duration"],
        "NaN",
        "$.timing.trace.duration: expected a number from 0 to 1e9, got the string 'NaN'",
    ),
]


@pytest.mark.parametrize(("path", "value", "message"), EXPORTER_INPUTS)
def test_what_exporters_read_is_checked_at_load(
    path: list[str | int], value: Any, message: str, tmp_path: Path
) -> None:
    file = tmp_path / "p.json"
    file.write_text(json.dumps(hostile(path, value)))
    with pytest.raises(ls.SchemaError) as info:
        ls.load(file)
    assert str(info.value) == f"{file}: {message}"


def test_exporters_refuse_a_malformed_section_made_in_python(tmp_path: Path) -> None:
    prof = ls.Profile.from_dict(copy.deepcopy(timed_dict()))
    del prof.memory["timeline"]["bytes"]
    prof.timing["trace"]["forward"][0][2] = math.inf
    with pytest.raises(ls.ExportError) as info:
        prof.to_html(tmp_path / "p.html")
    assert str(info.value) == (
        "the profile's memory['timeline'] is malformed: $.memory.timeline: missing key 'bytes'"
    )
    with pytest.raises(ls.ExportError) as info:
        prof.to_trace(tmp_path / "p.trace.json")
    assert str(info.value) == (
        f"cannot write {tmp_path / 'p.trace.json'}: the profile's timing['trace'] is "
        "malformed: $.timing.trace.forward[0][2]: expected a number from -1e9 to 1e9, "
        "got the number inf"
    )
    assert not (tmp_path / "p.html").exists() and not (tmp_path / "p.trace.json").exists()


def test_a_non_finite_median_latency_is_left_out_of_the_trace(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_text(json.dumps(hostile(["timing", "latency", "median"], "Infinity")))
    prof = ls.load(file)  # any number: a statistic may be non-finite
    assert prof.timing["latency"]["median"] == math.inf
    prof.to_trace(tmp_path / "p.trace.json")  # JSON has no Infinity: the value left out
    other = json.loads((tmp_path / "p.trace.json").read_text())["otherData"]
    assert "latency_median_s" not in other and other["repeats"] == 1


# ---- whatever loads is safe to use ---------------------------------------------------
class Overflow(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e39


class Net(nn.Module):
    """Repeated blocks (folding), a tied weight, a non-tensor argument, values that
    overflow to Inf and NaN (numerics events), and work outside submodules."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.big = Overflow()
        self.out = nn.Linear(4, 4)
        self.out.weight = self.inp.weight

    def forward(self, x: torch.Tensor, flag: bool = True) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = torch.tanh(layer(h))
        if flag:
            h = self.big(h) - self.big(h)  # inf - inf = nan
        out: torch.Tensor = self.out(h)
        return out


@cache
def rich_dicts() -> tuple[dict[str, Any], ...]:
    """A profile with every section (and its folded view), as parsed JSON."""
    torch.manual_seed(0)
    prof = ls.profile(
        Net(),
        args=(torch.randn(2, 4),),
        kwargs={"flag": True},
        backward=True,
        memory=True,
        numerics="record",
        timing={"warmup": 0, "repeats": 1},
    )
    ls.record_training_footprint(prof)
    prof.unsupported_ops["custom::op"] = {
        "count": 2,
        "forward": 2,
        "backward": 0,
        "modules": {"layers.0": 2},
    }
    prof.notices.append("a notice")
    assert prof.numerics["origin"] is not None and prof.root.children[-1].shared
    return tuple(json.loads(p.to_json(indent=None)) for p in (prof, fold(prof)))


def places(data: Any) -> dict[tuple[str | int, ...], list[tuple[Any, str | int]]]:
    """Every (container, key) in ``data``, grouped by its path with list indices as -1,
    so each kind of place is as likely as any other (not each element of a long list)."""
    out: dict[tuple[str | int, ...], list[tuple[Any, str | int]]] = {}
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, pattern = stack.pop()
        items: Any = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            p = (*pattern, -1 if isinstance(value, list) else key)
            out.setdefault(p, []).append((value, key))
            if isinstance(item, dict | list):
                stack.append((item, p))
    return out


NASTY = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "[/]", "[bold", "\x1b[31m", "", "0"]),
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([10**400, 2**63, 2**63 - 1, -1, 0, 1, 257]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.one_of(st.integers(), st.text(max_size=2)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just({"a": {"b": [1, {"c": None}]}}),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
@pytest.mark.slow
def test_random_damage_is_refused_or_harmless(data: st.DataObject) -> None:
    profile_dict = damaged(data)
    try:
        prof = ls.Profile.from_dict(profile_dict)
    except ls.SchemaError:
        event("refused")
        return
    event("loaded")
    str(prof)
    repr(prof)
    with contextlib.suppress(ls.ProfileCheckError):  # inconsistent numbers may remain
        prof.self_check()
    for view in VIEWS:
        prof.render(view=view, width=100)
    prof.render(raw=True, width=100)
    again = ls.Profile.from_dict(json.loads(prof.to_json(indent=None)))
    assert comparable(again.to_dict()) == comparable(prof.to_dict())


def damaged(data: st.DataObject) -> dict[str, Any]:
    """A profile of ``rich_dicts`` with 1 to 3 values deleted or replaced at random."""
    profile_dict: dict[str, Any] = copy.deepcopy(data.draw(st.sampled_from(rich_dicts())))
    for _ in range(data.draw(st.integers(1, 3))):
        found = places(profile_dict)
        pattern = data.draw(st.sampled_from(sorted(found, key=repr)))
        container, key = data.draw(st.sampled_from(found[pattern]))
        if isinstance(container, dict) and data.draw(st.booleans()):
            del container[key]
        else:
            # A copy: st.just gives the same object every time, and a later mutation
            # inside it would change the strategy itself (or nest it in itself).
            container[key] = copy.deepcopy(data.draw(NASTY))
    return profile_dict


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_random_damage_is_refused_or_exported_in_every_format(data: st.DataObject) -> None:
    try:
        prof = ls.Profile.from_dict(damaged(data))
    except ls.SchemaError:
        event("refused")
        return
    event("loaded")
    for name in FORMATS:
        if name == "trace" and "trace" not in prof.timing:
            with pytest.raises(ls.ExportError, match="a trace needs a timing pass"):
                export_text(prof, name)
            continue
        export_text(prof, name)
