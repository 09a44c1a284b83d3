"""JSON of schema ``layerscope/1``: a fast, atomic ``save`` and a ``load`` that checks
every known key and names the JSON path of anything wrong.

- **Writing** serialises the whole profile to a string first (C encoder, compact, the
  garbage collector paused), then writes it atomically (``export.files.write_text``): a
  value that is not JSON data fails with an ``ExportError`` naming the file and the JSON
  path of the value, and leaves an existing file untouched. Non-finite floats are written
  as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, so strict parsers read the
  file; they are found without walking the tree in Python unless one exists.
- **Reading** checks the type and value of every key the schema knows, in one pass that
  also builds the nodes (iteratively: no recursion, at most ``MAX_DEPTH`` levels), and
  turns every malformed input into a ``SchemaError`` such as
  ``$.root.children[3].metrics.flops: expected a finite number, got the string 'many'``.
  The strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` (and the bare tokens of older
  files) in numeric places come back as floats. Keys it does not know are checked to be
  JSON data and kept, and ``save`` writes them back: in their own dict where the object
  is one (model, env, the whole-model sections, metrics, node numerics), top-level ones
  in ``Profile.extra``, node ones in ``Node.extra``; only the leaves of call signatures
  (``TensorSpec``/``ValueSpec``) drop them. Each entry of a gathered profile's
  ``ranks`` is read as a whole profile, with the same checks. Nothing is executed.

What every key holds is specified in ``export.jsonspec``, in the check language of
``export.jsoncheck``; the same specification gives the JSON Schema shipped beside these
modules (``SCHEMA_PATH``): ``python -m layerscope.export.jsonspec`` rewrites that file,
and a test checks that the two agree.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

from layerscope.errors import ExportError, SchemaError
from layerscope.export.files import write_text
from layerscope.export.jsoncheck import (
    INT64_MAX,
    MAX_NESTING,
    Invalid,
    Str,
    Where,
    fail,
    json_path,
    json_value,
    value_text,
)
from layerscope.export.jsonread import MAX_BYTES, MAX_BYTES_ENV, other_kind, read_document
from layerscope.export.jsonspec import (
    MAX_DEPTH,
    NODE_FIELDS,
    NODE_REQUIRED,
    PROFILE_FIELDS,
    SCHEMA_PATH,
    Leaf,
    schema_document,
    schema_text,
)
from layerscope.gcpause import gc_paused
from layerscope.profile import (
    SCHEMA,
    Node,
    Profile,
    Signature,
    Spec,
    TensorSpec,
    ValueSpec,
    new_node,
)

__all__ = [
    "MAX_BYTES",
    "MAX_BYTES_ENV",
    "MAX_DEPTH",
    "MAX_NESTING",
    "SCHEMA_PATH",
    "comparable",
    "load",
    "node_from_dict",
    "profile_from_dict",
    "save",
    "schema_document",
    "schema_text",
    "to_json",
]

_MISSING: Any = object()


# ---- reading -------------------------------------------------------------------------
def profile_from_dict(data: Any, source: str | None = None, *, consume: bool = False) -> Profile:
    """The Profile in ``data`` (parsed JSON); ``SchemaError`` naming the JSON path of the
    first malformed value (after ``source``, the file, when given). ``consume``: ``data``
    is the caller's no more, and each module's object is let go once read, so the parsed
    tree and the Profile are not both whole in memory (a file's load)."""
    try:
        with gc_paused():
            return _profile(data, consume=consume)
    except Invalid as e:
        raise _schema_error(e, source) from None


def node_from_dict(data: Any) -> Node:
    """A Node and its subtree from ``data``; errors name JSON paths from ``$`` (this node)."""
    try:
        with gc_paused():
            return _tree(data, "$", None)
    except Invalid as e:
        raise _schema_error(e, None) from None


def _schema_error(e: Invalid, source: str | None) -> SchemaError:
    text = f"{json_path(e.where)}: {e.problem}"
    return SchemaError(f"{source}: {text}" if source is not None else text)


def _profile(data: Any, where: Where = "$", rank: bool = False, consume: bool = False) -> Profile:
    """The profile in ``data`` at ``where``; ``rank``: an entry of ``"ranks"``, which
    holds no ranks of its own."""
    what = "a rank's profile" if rank else "a saved profile"
    if not isinstance(data, dict):
        raise Invalid(where, f"{what} must be a JSON object, got {value_text(data)}")
    if "schema" not in data:
        raise Invalid(where, f"missing key 'schema': not a layerscope profile ({SCHEMA!r})")
    schema = data["schema"]
    if type(schema) is not str or schema != SCHEMA:
        other = other_kind(data)
        raise Invalid(
            (where, "schema"),
            other
            if other is not None
            else f"unsupported profile schema {schema!r}; this layerscope reads {SCHEMA!r}",
        )
    if "root" not in data:
        raise Invalid(where, "missing key 'root' (the module tree)")
    sections: dict[str, Any] = {}
    for key, spec in PROFILE_FIELDS.items():
        if key in data:
            sections[key] = spec.check(data[key], (where, key))
    ranks: list[Profile] = []
    if "ranks" in data:
        value = data["ranks"]
        if rank:
            raise Invalid((where, "ranks"), "a rank's profile cannot hold ranks of its own")
        if not isinstance(value, list | tuple):
            fail((where, "ranks"), "an array of per-rank profiles", value)
        ranks = [
            _profile(entry, ((where, "ranks"), i), True, consume) for i, entry in enumerate(value)
        ]
    return Profile(
        root=_tree(data["root"], (where, "root"), 0, consume),
        model=sections.get("model", {}),
        env=sections.get("env", {}),
        unsupported_ops=sections.get("unsupported_ops", {}),
        memory=sections.get("memory", {}),
        numerics=sections.get("numerics", {}),
        timing=sections.get("timing", {}),
        notices=sections.get("notices", []),
        outside=sections.get("outside", {}),
        dist=sections.get("dist", {}),
        comm=sections.get("comm", {}),
        ranks=ranks,
        schema=SCHEMA,
        extra={
            key: json_value(value, (where, key))
            for key, value in data.items()
            if key not in _PROFILE_KNOWN
        },
    )


def _tree(data: Any, where: Where, depth: int | None, consume: bool = False) -> Node:
    """A node and its subtree, depth first with a stack: no recursion, at most MAX_DEPTH
    levels. ``depth`` is what the top node's ``depth`` must be (None: any); ``consume``:
    each child's object is dropped from its parent's list once read."""
    leaves: dict[tuple[Any, ...], Spec] = {}
    top = _node(data, where, depth, leaves)
    stack: list[tuple[Node, list[Any], Where]] = []
    kids = data.get("children")
    if kids:
        stack.append((top, _children(kids, where), where))
    elif kids is not None:
        _children(kids, where)
    while stack:
        parent, kids, w = stack.pop()
        level = parent.depth + 1
        if level > MAX_DEPTH:
            raise Invalid(
                where,
                f"the module tree is more than {MAX_DEPTH} levels deep "
                f"(layerscope reads up to {MAX_DEPTH})",
            )
        out = parent.children
        kw = (w, "children")
        pending = []
        for i, child in enumerate(kids):
            cw = (kw, i)
            node = _node(child, cw, level, leaves)
            node.parent = parent
            out.append(node)
            grand = child.get("children")
            if grand:
                pending.append((node, _children(grand, cw), cw))
            elif grand is not None:
                _children(grand, cw)
            if consume:
                kids[i] = None
        stack.extend(reversed(pending))
    return top


def _children(value: Any, where: Where) -> list[Any]:
    if not isinstance(value, list | tuple):
        fail((where, "children"), "an array of module nodes", value)
    return value  # type: ignore[return-value]


#: Top-level keys this version reads; any other is kept in ``Profile.extra``.
_PROFILE_KNOWN = frozenset((*PROFILE_FIELDS, "schema", "root", "ranks", "partial_metrics"))
#: Node keys this version reads; any other is kept in ``Node.extra``.
_NODE_KNOWN = frozenset((*NODE_FIELDS, "children"))

#: Node keys read by the generic loop of ``_node`` (the others are read first, inline).
_NODE_OTHER = tuple(
    (k, c)
    for k, c in NODE_FIELDS.items()
    if k
    not in (
        *NODE_REQUIRED,
        "repr",
        "inputs",
        "outputs",
        "grad_inputs",
        "grad_outputs",
        "metrics",
        "self_metrics",
    )
)
_METRICS = NODE_FIELDS["metrics"]
_STR = Str()
_DEPTH = NODE_FIELDS["depth"]
_CALLS = NODE_FIELDS["calls"]


def _node(d: Any, where: Where, depth: int | None, leaves: dict[tuple[Any, ...], Spec]) -> Node:
    """One node without its children; ``depth`` is what its ``depth`` must be (None: any)."""
    if type(d) is not dict and not isinstance(d, dict):
        fail(where, "a module node (an object)", d)
    for key in NODE_REQUIRED:
        if key not in d:
            raise Invalid(where, f"missing key {key!r} of a module node")
    path, name, type_, node_id = d["path"], d["name"], d["type"], d["node_id"]
    if type(path) is not str:
        path = _STR.check(path, (where, "path"))
    if type(name) is not str:
        name = _STR.check(name, (where, "name"))
    if type(type_) is not str:
        type_ = _STR.check(type_, (where, "type"))
    if type(node_id) is not str:
        node_id = _STR.check(node_id, (where, "node_id"))
    got = _DEPTH.check(d["depth"], (where, "depth"))
    if depth is not None and got != depth:
        why = "the root" if depth == 0 else "its parent's depth + 1"
        raise Invalid((where, "depth"), f"expected {depth} ({why}), got {value_text(d['depth'])}")
    calls = d["calls"]
    if type(calls) is not int or not 0 <= calls <= INT64_MAX:
        calls = _CALLS.check(calls, (where, "calls"))
    repr_ = d.get("repr", "")
    if type(repr_) is not str:
        repr_ = _STR.check(repr_, (where, "repr"))
    node = new_node(path, name, type_, got, repr_)
    node.node_id = node_id
    node.calls = calls
    value = d.get("inputs")
    if value is not None:
        node.inputs = _signatures(value, (where, "inputs"), leaves)
    value = d.get("outputs")
    if value is not None:
        node.outputs = _signatures(value, (where, "outputs"), leaves)
    value = d.get("grad_inputs")
    if value is not None:
        node.grad_inputs = _signatures(value, (where, "grad_inputs"), leaves)
    value = d.get("grad_outputs")
    if value is not None:
        node.grad_outputs = _signatures(value, (where, "grad_outputs"), leaves)
    value = d.get("metrics")
    if value is not None:
        node.metrics = _METRICS.check(value, (where, "metrics"))
    value = d.get("self_metrics")
    if value is not None:
        node.self_metrics = _METRICS.check(value, (where, "self_metrics"))
    for key, spec in _NODE_OTHER:
        value = d.get(key, _MISSING)
        if value is _MISSING or (not value and type(value) in (list, dict)):
            continue  # absent or empty: the default
        setattr(node, key, spec.check(value, (where, key)))
    if len(d) > len(_NODE_KNOWN) or not _NODE_KNOWN.issuperset(d):
        unknown = {k: json_value(v, (where, k)) for k, v in d.items() if k not in _NODE_KNOWN}
        if unknown:
            node.extra = unknown
    return node


def _signatures(value: Any, where: Where, leaves: dict[tuple[Any, ...], Spec]) -> list[Signature]:
    """Call signatures as tuples of TensorSpec/ValueSpec (equal leaves shared: immutable)."""
    if not isinstance(value, list | tuple):
        fail(where, "an array of call signatures", value)
    out: list[Signature] = []
    for i, sig in enumerate(value):
        sw = (where, i)
        if not isinstance(sig, list | tuple):
            fail(sw, "an array of leaves (one call's inputs or outputs)", sig)
        out.append(tuple([_leaf(leaf, (sw, j), leaves) for j, leaf in enumerate(sig)]))
    return out


_LEAF = Leaf()


def _leaf(leaf: Any, where: Where, leaves: dict[tuple[Any, ...], Spec]) -> Spec:
    if type(leaf) is dict and len(leaf) == 4:
        # The common case, checked at C speed: a tensor leaf with exactly its 4 keys.
        shape = leaf.get("shape")
        path, dtype, device = leaf.get("path"), leaf.get("dtype"), leaf.get("device")
        if (
            type(shape) is list
            and type(path) is str
            and type(dtype) is str
            and type(device) is str
            and (not shape or (set(map(type, shape)) == {int} and min(shape) >= 0))
            and (not shape or max(shape) <= INT64_MAX)
        ):
            key = (path, dtype, device, *shape)
            spec = leaves.get(key)
            if spec is None:
                spec = leaves[key] = TensorSpec(path, tuple(shape), dtype, device)
            return spec
    checked = _LEAF.check(leaf, where)
    if "shape" in checked:
        return TensorSpec(
            checked["path"], tuple(checked["shape"]), checked["dtype"], checked["device"]
        )
    return ValueSpec(checked["path"], checked["type"], checked.get("value"))


def load(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Profile:
    """Read a profile saved with ``Profile.save`` (``ls.load``), every known key checked.

    At most ``max_bytes`` bytes are read (default: ``$LAYERSCOPE_MAX_BYTES``, else
    ``MAX_BYTES`` or less: a twelfth of the memory available, ``jsonread.MEMORY_FACTOR``),
    so a device or a huge file cannot exhaust memory.
    ``FileNotFoundError`` when there is no such file; ``SchemaError`` for anything else
    that is not a readable ``layerscope/1`` profile (naming the file and the JSON path)."""
    return profile_from_dict(read_document(path, max_bytes=max_bytes), os.fspath(path),
                             consume=True)  # fmt: skip


# ---- writing -------------------------------------------------------------------------
def to_json(profile: Profile, indent: int | None = 2, extra: dict[str, Any] | None = None) -> str:
    """The profile as JSON text (``indent=None``: one line), with the top-level sections
    in ``extra`` added (a plan's); ``ExportError`` naming the JSON path of a value that is
    not JSON data."""
    return _encode(profile, indent, None, "cannot serialise the profile", extra)


def save(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write the profile to ``path`` as compact JSON, atomically: on any failure an
    existing file is left as it was, and the error (``ExportError``) names the file."""
    target = os.fspath(path)
    text = _encode(profile, None, (",", ":"), f"cannot write {target}")
    write_text(target, text + "\n")


def _encode(
    profile: Profile,
    indent: int | None,
    separators: tuple[str, str] | None,
    what: str,
    extra: dict[str, Any] | None = None,
) -> str:
    deepest = max(_deepest(p.root) for p in (profile, *profile.ranks))
    if deepest > MAX_DEPTH:
        raise ExportError(
            f"{what}: the module tree is {deepest} levels deep; layerscope/1 files hold "
            f"up to {MAX_DEPTH}"
        )
    with gc_paused():  # to_dict and the encoder allocate many containers, no cycles
        try:
            data = profile.to_dict()
        except RecursionError:
            raise ExportError(f"{what}: a value is nested too deeply") from None
        except (AttributeError, TypeError, ValueError) as e:
            raise ExportError(f"{what}: the profile holds a value of the wrong kind: {e}") from e
        data.update(extra or {})
        for attempt in range(2):
            try:
                # The encoder fails on the first non-finite float: the cheap way to know
                # that there is none. Else they are replaced where floats can be, and the
                # second attempt succeeds.
                return json.dumps(data, indent=indent, separators=separators, allow_nan=False)
            except ValueError:
                if attempt:
                    break
                _replace_nonfinite(data)
            except (TypeError, RecursionError):
                break
        bad = _not_json(data)
        if bad is not None:
            where, problem = bad
            raise ExportError(f"{what}: the value at {json_path(where)} {problem}")
        try:
            # Non-finite values _replace_nonfinite missed (in a float subclass): the parser
            # turns their tokens into strings.
            text = json.dumps(data, allow_nan=True, separators=(",", ":"))
            data = json.loads(text, parse_constant=str)
            return json.dumps(data, indent=indent, separators=separators, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise ExportError(f"{what}: {e}") from e


def _nonfinite_text(x: float) -> str:
    return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")


def _same_nan(x: float) -> float:
    return math.nan if x != x else x


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    """``to_dict``'s output with every NaN float replaced, in place, by the one object
    ``math.nan``: dicts holding it compare equal (``==`` takes an object as equal to
    itself), so two profiles with NaN in the same places do. Returns ``data``."""
    _replace_nonfinite(data, _same_nan)
    return data


def _replace_nonfinite(
    data: dict[str, Any], replace: Callable[[float], Any] = _nonfinite_text
) -> None:
    """Replace the non-finite floats of ``to_dict``'s output in place (by default by
    their strings): the sections walked whole (they are small), per node the metrics
    checked a dict at a time at C speed (a finite sum means finite values) and the
    numerics' own values."""
    for key, value in data.items():
        if key == "ranks" and isinstance(value, list):
            for entry in value:  # whole profiles: their trees walked as the root's is
                if isinstance(entry, dict):
                    _replace_nonfinite(entry, replace)
                else:
                    _replace_in(entry, replace)
        elif key != "root":
            _replace_in(value, replace)
    stack = [data.get("root")]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for key in ("metrics", "self_metrics"):
            metrics = node.get(key)
            if metrics and isinstance(metrics, dict):
                try:
                    total = sum(metrics.values())
                    finite = total - total == 0
                except (TypeError, OverflowError):
                    finite = False
                if not finite:
                    _replace_in(metrics, replace)
        numerics = node.get("numerics")
        if numerics:
            _replace_in(numerics, replace)
        children = node.get("children")
        if children and isinstance(children, list):
            stack.extend(children)


def _replace_in(value: Any, replace: Callable[[float], Any]) -> None:
    """Non-finite floats inside ``value`` (dicts and lists, any depth) replaced."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            items: Any = v.items()
        elif isinstance(v, list):
            if set(map(type, v)) <= _SCALARS_NOT_FLOAT:
                continue  # a list of ints or strings (a timeline): nothing to replace
            items = enumerate(v)
        else:
            continue
        for k, x in list(items):
            t = type(x)
            if t is float:
                if x - x != 0:
                    v[k] = replace(x)
            elif t is dict or t is list:
                stack.append(x)


_SCALARS_NOT_FLOAT = frozenset((int, str, bool, type(None)))


def _deepest(root: Node) -> int:
    """How many levels the tree has below ``root`` (iterative)."""
    deepest = 0
    stack = [(root, 0)]
    while stack:
        node, level = stack.pop()
        if level > deepest:
            deepest = level
        if node.children:
            stack.extend((c, level + 1) for c in node.children)
    return deepest


def _not_json(data: Any) -> tuple[Where, str] | None:
    """The first value ``json.dumps`` cannot write (non-finite floats aside), depth first:
    an object of another type, a key of another type, a circular reference, an integer
    too long for Python to write."""
    stack: list[tuple[Any, Where, bool]] = [(data, "$", False)]
    open_: set[int] = set()
    while stack:
        value, where, leaving = stack.pop()
        if leaving:
            open_.discard(id(value))
            continue
        if isinstance(value, str) or value is None or isinstance(value, bool | float):
            continue
        if isinstance(value, int):
            try:
                int.__repr__(value)
            except ValueError:
                return where, "is an integer too long to write"
            continue
        if isinstance(value, dict):
            items: list[tuple[Any, Any]] = list(value.items())
            for k, _ in items:
                if not (k is None or isinstance(k, str | int | float | bool)):
                    return where, f"has a key of type {type(k).__name__} (JSON keys are strings)"
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        else:
            return where, f"is not JSON data (type {type(value).__name__})"
        if id(value) in open_:
            return where, "is a circular reference (it contains itself)"
        open_.add(id(value))
        stack.append((value, where, True))
        is_dict = isinstance(value, dict)
        stack.extend(
            (v, (where, json.dumps(k) if is_dict and not isinstance(k, str) else k), False)
            for k, v in reversed(items)
        )
    return None
