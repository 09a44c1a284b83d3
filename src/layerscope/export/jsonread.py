"""Reading a layerscope JSON file: at most a size limit, UTF-8, non-finite numbers,
parsed but not yet checked against the schema (``export.json`` checks a profile,
``Plan.from_dict`` a plan). The documents besides a profile (a sweep's, an estimate's, a
serving plan's) share their ``"schema"`` check (``check_schema``), their unknown
top-level keys (``unknown_keys``) and their text (``document_json``) here."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from layerscope.errors import SchemaError
from layerscope.export.files import read_at_most
from layerscope.export.jsoncheck import NONFINITE, Check, Invalid, json_path
from layerscope.export.jsonspec import MAX_DEPTH
from layerscope.gcpause import gc_paused
from layerscope.render.units import nbytes
from layerscope.validate import check_int

#: The most bytes ``load`` reads by default (1 GiB): a profile of a million modules is
#: a few hundred MB.
MAX_BYTES = 1 << 30
#: The environment variable that overrides the default limit (``layerscope show`` too).
MAX_BYTES_ENV = "LAYERSCOPE_MAX_BYTES"
#: How many times its size a document may take in memory while it loads and shows
#: (measured, docs/json.md: at most 11.1, a small generation written again as JSON; 8.2
#: for a view): by default a load reads at most the memory available over this.
MEMORY_FACTOR = 12


def read_document(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Any:
    """The parsed JSON of a layerscope file, read as ``load`` reads it (size limit,
    UTF-8, non-finite numbers), not yet checked against the schema."""
    limit, why = _max_bytes(max_bytes)
    source = os.fspath(path)
    if os.path.isdir(source):
        raise SchemaError(f"cannot read {source}: it is a directory")
    try:
        with open(source, "rb") as f:
            raw = read_at_most(f, limit)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SchemaError(f"cannot read {source}: {e.strerror or e}") from e
    if raw is None:
        raise SchemaError(
            f"cannot read {source}: it holds more than {limit:,} bytes, the most ls.load "
            f"reads{why} (raise it with max_bytes= or ${MAX_BYTES_ENV})"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SchemaError(
            f"{source} is not a layerscope profile: not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    del raw  # the bytes and the text are not both held while the parse builds its objects
    with gc_paused():  # many small containers and no cycles: collections cost the most
        try:
            data = json.loads(text, parse_constant=NONFINITE.__getitem__)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{source} is not valid JSON: {_not_json(text, e)}") from None
        except RecursionError:
            raise SchemaError(
                f"{source} is nested too deeply to read (layerscope reads module trees "
                f"up to {MAX_DEPTH} levels deep)"
            ) from None
        except ValueError as e:  # an integer past Python's int-max-str-digits
            raise SchemaError(f"{source} holds a number too long to read: {e}") from None
    return data


#: What a value cut short can end with where the parser stops: the start of a literal
#: (``tr``, ``Infin``, ``-``) or the rest of a number cut after a digit (``1.``, ``2e-``).
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_NUMBER_TAIL = re.compile(r"[.eE][-+0-9]*|[-+0-9]+")
_ESCAPE_TAIL = re.compile(r"u[0-9a-fA-F]{0,4}")


def _not_json(text: str, e: json.JSONDecodeError) -> str:
    """Why ``text`` is not JSON: it is empty, it ends inside its JSON (a file cut short:
    a copy or a write that did not finish), or the parser's own words."""
    if not text.strip():
        return "the file is empty" if not text else "the file holds only white space"
    rest = text[e.pos :].rstrip()
    if e.msg.startswith("Invalid \\uXXXX escape"):  # cut inside an escape: u, u0, u00b7
        return _cut_short(text) if _ESCAPE_TAIL.fullmatch(rest) else str(e)
    cut = e.msg.startswith("Unterminated string") or (
        not e.msg.startswith("Extra data")
        and (
            not rest
            or any(word.startswith(rest) for word in _LITERALS)
            or (
                e.pos > 0 and text[e.pos - 1].isdigit() and _NUMBER_TAIL.fullmatch(rest) is not None
            )
        )
    )
    return _cut_short(text) if cut else str(e)


def _cut_short(text: str) -> str:
    return (
        f"it ends inside its JSON, after {len(text):,} characters: the file is cut short (a "
        "copy or a write that did not finish?)"
    )


def checked_document(data: Any, spec: Check, source: str | None = None) -> Any:
    """A whole parsed document (a sweep's, an estimate's) as ``spec`` keeps it;
    ``SchemaError`` naming the JSON path, after ``source`` (the file) when given."""
    try:
        return spec.check(data, "$")
    except Invalid as e:
        where = f"{source}: " if source else ""
        raise SchemaError(f"{where}{json_path(e.where)}: {e.problem}") from None


#: What each kind of layerscope document is and what reads it, by its schema's name (the
#: part of ``"schema"`` before the ``/``; a profile's is ``layerscope``).
_KINDS: dict[str, tuple[str, str]] = {
    "layerscope": ("a profile", "ls.load"),
    "layerscope-diff": ("a profile diff (layerscope diff --json)", ""),
    "layerscope-sweep": ("a sweep", "ls.load_sweep"),
    "layerscope-estimate": ("a generation estimate", "ls.load_estimate"),
    "layerscope-serving": ("a serving plan", "ls.load_serving"),
}
#: The documents that are a profile with a section of their own, by that section.
_SECTIONS = {
    "plan": ("a plan", "ls.load_plan"),
    "generation": ("a generation", "ls.load_generation"),
}


def schema_name(data: object) -> str | None:
    """The kind a document's ``"schema"`` names (``layerscope-sweep`` for
    ``layerscope-sweep/1``); None without one (or one that is not a string)."""
    if not isinstance(data, dict):
        return None
    schema = data.get("schema")
    return schema.split("/", 1)[0] if type(schema) is str else None


def _named(data: Any, what: str) -> str | None:
    """ "this is a sweep ('layerscope-sweep/1'), not a {what}: read it with ..." for a
    document of a known kind (a profile with a plan's or a generation's section named by
    that section); None for a schema no kind has."""
    name = schema_name(data)
    if name is None or name not in _KINDS:
        return None
    kind, reader = _KINDS[name]
    if name == "layerscope":
        kind, reader = next((_SECTIONS[k] for k in _SECTIONS if k in data), (kind, reader))
    how = f": read it with {reader}" if reader else ""
    return f"this is {kind} ({data['schema']!r}), not a {what}{how}"


def other_kind(data: object) -> str | None:
    """For a document of a kind besides a profile (a sweep, an estimate, a serving plan, a
    diff): what it is and what reads it, for a profile loader's refusal; else None."""
    return None if schema_name(data) == "layerscope" else _named(data, "profile")


def check_section_kind(data: Any, key: str, what: str) -> None:
    """``SchemaError`` for a document without the section ``key`` (``plan``,
    ``generation``; ``what``: the document, ``plan``) that is a document of another known
    kind: what it is and what reads it, as ``check_schema`` says (``$.schema: this is a
    sweep ...``; the other section's document: ``$.plan: no 'plan' section: this is a
    generation ...``). A profile, or a document of no known kind, is left to the
    section's own check."""
    if not isinstance(data, dict) or key in data:
        return
    named = _named(data, what)
    if named is None:
        return
    if schema_name(data) != "layerscope":
        raise SchemaError(f"$.schema: {named}")
    if any(k in data for k in _SECTIONS):
        raise SchemaError(f"$.{key}: no {key!r} section: {named}")


def check_schema(data: Any, schema: str, what: str, source: str | None = None) -> None:
    """``SchemaError`` where the ``"schema"`` of a document besides a profile is not
    ``schema`` (``layerscope-sweep/1``; ``what``: the document, ``sweep``): another
    kind's document is named with what reads it, another version of this kind refused
    as a profile's is. A document without the key was written before it: nothing to
    check (its keys are checked as always)."""
    if not isinstance(data, dict) or "schema" not in data:
        return
    value = data["schema"]
    if type(value) is str and value == schema:
        return
    where = f"{source}: " if source else ""
    named = _named(data, what) if schema_name(data) != schema.split("/", 1)[0] else None
    if named is not None:
        raise SchemaError(f"{where}$.schema: {named}")
    raise SchemaError(
        f"{where}$.schema: unsupported {what} schema {value!r}; this layerscope reads {schema!r}"
    )


def unknown_keys(checked: Mapping[str, Any], known: Collection[str]) -> dict[str, Any]:
    """The top-level keys of a checked document (``checked_document``: their values
    plain JSON, nested at most ``MAX_NESTING`` levels, non-finite strings as floats) that
    this version does not know, in the document's order: the object's ``extra``."""
    return {k: v for k, v in checked.items() if k not in known}


def document_json(data: Mapping[str, Any]) -> str:
    """The text ``save`` writes of a document besides a profile: ``data`` indented by one,
    a non-finite float (under a key this version does not know: its own figures are
    finite) as the string ``load`` reads back (``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``)."""
    try:
        return json.dumps(data, indent=1, allow_nan=False) + "\n"
    except ValueError:
        return json.dumps(_nonfinite_text(data), indent=1, allow_nan=False) + "\n"


def _nonfinite_text(value: Any) -> Any:
    """``value`` with every non-finite float as its string (containers copied)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {k: _nonfinite_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nonfinite_text(v) for v in value]
    return value


@contextlib.contextmanager
def naming(source: str | None) -> Iterator[None]:
    """Every ``SchemaError`` raised inside, its message after ``source`` (the file) when
    given: ``p.json: $.plan.peak_bytes: ...``, as ``load`` names the file."""
    try:
        yield
    except SchemaError as e:
        if source is None:
            raise
        raise SchemaError(f"{source}: {e}") from None


def _max_bytes(max_bytes: int | None) -> tuple[int, str]:
    """The size limit in force and why, when it is not the one asked for: ``max_bytes``,
    else the environment variable's, else ``default_max_bytes()``."""
    if max_bytes is not None:
        return check_int("max_bytes", max_bytes, 1), ""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        available = available_memory()
        limit = default_max_bytes(available)
        if limit == MAX_BYTES or available is None:
            return limit, ""
        return limit, (
            f" with {nbytes(available)} of memory available (1/{MEMORY_FACTOR} of it: a "
            f"document takes up to {MEMORY_FACTOR} times its size to load and show)"
        )
    try:
        value: object = int(text.replace("_", ""))
    except ValueError:
        value = text
    return check_int(f"${MAX_BYTES_ENV}", value, 1), ""


def default_max_bytes(available: int | None) -> int:
    """The default limit: ``MAX_BYTES``, or less where the memory ``available`` (bytes,
    None: unknown) is under ``MEMORY_FACTOR`` times that."""
    if available is None:
        return MAX_BYTES
    return max(1, min(MAX_BYTES, available // MEMORY_FACTOR))


def available_memory() -> int | None:
    """Bytes of memory this process can still take: the system's available memory
    (``MemAvailable`` in ``/proc/meminfo``, else ``sysconf``'s free pages), less where
    a cgroup v2 limit leaves less; None where neither is known."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    if not found:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with (
        contextlib.suppress(OSError, ValueError),
        open("/sys/fs/cgroup/memory.max") as cap,
        open("/sys/fs/cgroup/memory.current") as used,
    ):
        limit = cap.read().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int(used.read().strip())))
    return min(found) if found else None


__all__ = [
    "MAX_BYTES",
    "MAX_BYTES_ENV",
    "MEMORY_FACTOR",
    "available_memory",
    "check_schema",
    "check_section_kind",
    "checked_document",
    "default_max_bytes",
    "document_json",
    "naming",
    "read_document",
    "schema_name",
    "unknown_keys",
]
