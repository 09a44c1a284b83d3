"""One way to check an option's value at the boundary, and one way to refuse it.

Every entry point (``ls.profile`` and ``Profiler``, the view options, the timing options,
the YAML display config, the CLI, custom device specs) checks its options with these
functions, so a value is accepted or refused the same way everywhere: Python's and
numpy's bools are bools, Python's and numpy's integers are ints (a bool is not one), and
every refusal is one line in one of two forms::

    LABEL must be ALLOWED, got VALUE (WHY; did you mean 'X'?)
    unknown key 'K' in LABEL (did you mean 'X'?); known: A, B, C

``LABEL`` is how the user wrote the option: the Python parameter (``timing``), the CLI
flag (``--top``) or the YAML key path (``table.box``, after the file's name). A plain
string label raises ``InvalidInputError``; a :class:`Label` made with ``source=`` raises
the display config's ``ConfigError`` (and spells ``None`` as YAML's ``null``).
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, NoReturn, TypeVar

from layerscope.errors import ConfigError, InvalidInputError

__all__ = [
    "Label",
    "LabelLike",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_enum",
    "check_file",
    "check_instance",
    "check_int",
    "check_keys",
    "check_names",
    "check_number",
    "check_shape_fits",
    "check_whole",
    "close_matches",
    "each",
    "is_bool",
    "refuse",
    "refuse_keys",
    "shown",
]

#: The longest a refused value is shown, in characters.
MAX_SHOWN = 80
#: The most bytes one tensor can hold: torch sizes a storage in a signed 64-bit integer.
MAX_TENSOR_BYTES = 2**63 - 1


class Label:
    """How a refusal names an option and which error it raises.

    ``name`` is the option as the user wrote it ("" for a whole mapping, which refusals
    call ``root``); a ``config`` label (``source``: the display config's file, or ``None``
    for a mapping given in code) is a display-config key: its refusals are ``ConfigError``
    with the file in front and ``.key`` set to the key path.
    """

    __slots__ = ("config", "name", "root", "source")

    def __init__(
        self, name: str, *, source: str | None = None, config: bool = False, root: str = ""
    ):
        self.name = name
        self.source = source
        self.config = config or source is not None
        self.root = root

    def at(self, part: str | int) -> Label:
        """The label of an item: ``name.part`` for a key, ``name[part]`` for an index."""
        if isinstance(part, int):
            name = f"{self.name}[{part}]"
        else:
            name = f"{self.name}.{part}" if self.name else str(part)
        return Label(name, source=self.source, config=self.config, root=self.root)

    def error(self, message: str, key: str | None = None) -> InvalidInputError:
        """The exception for ``message``; ``key``: the config key path it is about, when
        not this label's."""
        text = message.replace("\n", " ")  # one line, whatever a reason quoted
        if not self.config:
            return InvalidInputError(text)
        text = f"{self.source}: {text}" if self.source else text
        return ConfigError(text, source=self.source, key=self.name if key is None else key)

    def spell(self, value: object) -> str:
        """``value`` as the user would write it, shortened (``null`` in the config)."""
        if value is None and self.config:
            return "null"
        return shown(value)

    def __str__(self) -> str:
        return self.name or self.root


#: What a checker takes as its label: a :class:`Label` or an option's name.
LabelLike = Label | str

T = TypeVar("T")
E = TypeVar("E", bound=Enum)


def _label(label: LabelLike) -> Label:
    return label if isinstance(label, Label) else Label(label)


def shown(value: object) -> str:
    """``repr(value)``, cut to ``MAX_SHOWN`` characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def close_matches(word: object, known: Iterable[str]) -> list[str]:
    """The known names ``word`` may be a typo of (case-insensitive first), best first."""
    if not isinstance(word, str):
        return []
    names = list(known)
    same_case = [n for n in names if n.lower() == word.lower() and n != word]
    return same_case or difflib.get_close_matches(word, names, n=3)


def _did_you_mean(close: Sequence[str]) -> str:
    if not close:
        return ""
    names = [repr(c) for c in close]
    either = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
    return f"did you mean {either}?"


def refuse(
    label: LabelLike, value: object, allowed: str, *, why: str = "", close: Sequence[str] = ()
) -> NoReturn:
    """Raise the one-line refusal ``LABEL must be ALLOWED, got VALUE (WHY)``, with a
    ``did you mean`` hint naming ``close``."""
    where = _label(label)
    notes = [n for n in (why, _did_you_mean(close)) if n]
    note = f" ({'; '.join(notes)})" if notes else ""
    raise where.error(f"{where} must be {allowed}, got {where.spell(value)}{note}")


def refuse_keys(
    label: LabelLike,
    unknown: Sequence[object],
    known: Sequence[str],
    *,
    noun: str = "key",
    more: str = "",
) -> NoReturn:
    """Raise ``unknown key(s) 'K' in LABEL (did you mean 'X'?); known: A, B, C`` (then
    ``more``); a config refusal is about the first unknown key's path."""
    where = _label(label)
    names = ", ".join(map(where.spell, unknown))
    plural = "s" if len(unknown) > 1 else ""
    close = close_matches(unknown[0], known) if len(unknown) == 1 else []
    subject = f" in {where}" if str(where) else ""
    hint = f" ({_did_you_mean(close)})" if close else ""
    raise where.error(
        f"unknown {noun}{plural} {names}{subject}{hint}; known: {', '.join(known)}{more}",
        key=where.at(str(unknown[0])).name,
    )


def is_bool(value: object) -> bool:
    """A real bool: Python's or numpy's (not 0/1, not a string)."""
    if isinstance(value, bool):
        return True
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


def check_bool(label: LabelLike, value: object) -> bool:
    """``value`` as a Python bool (numpy's bools accepted; 0/1 and strings refused)."""
    if is_bool(value):
        return bool(value)
    refuse(label, value, "True or False")


def check_int(
    label: LabelLike, value: object, low: int | None = None, high: int | None = None
) -> int:
    """``value`` as a Python int in ``low..high`` (numpy's integers accepted, bools not)."""
    if isinstance(value, numbers.Integral) and not is_bool(value):
        n = int(value)
        if (low is None or n >= low) and (high is None or n <= high):
            return n
    if low is not None and high is not None:
        allowed = f"an int from {low} to {high}"
    elif low is not None:
        allowed = f"an int >= {low}"
    else:
        allowed = "an int" if high is None else f"an int <= {high}"
    refuse(label, value, allowed)


def check_number(
    label: LabelLike,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    positive: bool = False,
) -> float:
    """``value`` as a finite float: any real number (numpy's too, bools not), in
    ``low..high`` and above 0 when ``positive``."""
    if isinstance(value, numbers.Real) and not is_bool(value):
        x = float(value)
        if (
            math.isfinite(x)
            and (low is None or x >= low)
            and (high is None or x <= high)
            and (not positive or x > 0)
        ):
            return x
    if positive:
        allowed = "a positive number"
    elif low is not None and high is not None:
        allowed = f"a number from {low:g} to {high:g}"
    elif low is not None or high is not None:
        allowed = f"a number >= {low:g}" if low is not None else f"a number <= {high:g}"
    else:
        allowed = "a finite number"
    refuse(label, value, allowed)


def check_whole(label: LabelLike, value: object, low: int | None = None) -> int:
    """``value`` as a Python int ``>= low``: an int, or a float with no fraction (a byte
    count written ``80e9``); bools, NaN, infinities and fractions refused."""
    if isinstance(value, numbers.Integral) and not is_bool(value):
        n: int | None = int(value)
    elif isinstance(value, numbers.Real) and not is_bool(value) and float(value).is_integer():
        n = int(float(value))
    else:
        n = None
    if n is not None and (low is None or n >= low):
        return n
    floor = "" if low is None else f" >= {low}"
    refuse(label, value, f"a whole number{floor} (an int, or a float such as 8e9)")


def check_shape_fits(label: LabelLike, value: object, shape: Sequence[int], itemsize: int) -> None:
    """Refuse a ``shape`` (given as ``value``) whose tensor of ``itemsize``-byte elements
    torch cannot size: more than ``MAX_TENSOR_BYTES``."""
    numel = math.prod(shape)
    if numel * itemsize > MAX_TENSOR_BYTES:
        refuse(
            label,
            value,
            "a shape whose tensor torch can size (at most 2**63 - 1 bytes)",
            why=f"{numel} elements of {itemsize} bytes",
        )


def check_instance(label: LabelLike, value: object, kind: type[T], allowed: str) -> T:
    """``value`` if it is a ``kind``; ``allowed`` describes one."""
    if isinstance(value, kind):
        return value
    refuse(label, value, allowed)


def _spelled(where: Label, choices: Sequence[object], none: bool) -> str:
    names = ", ".join(map(where.spell, choices))
    return f"{names} or {where.spell(None)}" if none else names


def check_choice(
    label: LabelLike, value: object, choices: Sequence[str], *, none: bool = False
) -> Any:
    """``value`` if it is one of the strings ``choices`` (or None, when ``none``)."""
    if (value is None and none) or (isinstance(value, str) and value in choices):
        return value
    where = _label(label)
    refuse(
        where,
        value,
        f"one of {_spelled(where, choices, none)}",
        close=close_matches(value, choices),
    )


def check_enum(label: LabelLike, value: object, kind: type[E]) -> E:
    """``value`` (a member of the string enum ``kind``, or its value) as a member."""
    if isinstance(value, kind):
        return value
    values = [str(m.value) for m in kind]
    return kind(check_choice(label, value, values))


def check_names(label: LabelLike, value: object) -> list[str]:
    """A list of names: a string (comma-separated allowed) or a sequence of strings."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, Iterable) and not isinstance(value, bytes | Mapping):
        items = list(value)
        if all(isinstance(v, str) for v in items):
            return items
    refuse(label, value, "a string or a list of strings")


def check_keys(
    label: LabelLike, value: object, known: Collection[str], *, noun: str = "key", what: str = ""
) -> Mapping[Any, Any]:
    """``value`` as a mapping whose keys are all among ``known`` (``what`` describes the
    mapping in the refusal of a value that is not one)."""
    if not isinstance(value, Mapping):
        refuse(label, value, what or f"a mapping with {noun}s {', '.join(known)}")
    unknown = [k for k in value if k not in known]
    if unknown:
        refuse_keys(label, unknown, list(known), noun=noun)
    return value


def check_callable(label: LabelLike, value: object, allowed: str, *, none: bool = True) -> Any:
    """``value`` if it is callable (or None, when ``none``); ``allowed`` describes it."""
    if (value is None and none) or callable(value):
        return value
    refuse(label, value, allowed)


def check_file(label: LabelLike, value: str | os.PathLike[str]) -> str:
    """``value`` as the path of a file that exists."""
    path = os.fspath(value)
    if not os.path.isfile(path):
        refuse(label, path, "an existing file", why="no such file")
    return path


def each(label: LabelLike, values: Iterable[T], check: Callable[[Label, T], Any]) -> list[Any]:
    """``check`` applied to every item, each labelled with its index."""
    where = _label(label)
    return [check(where.at(i), v) for i, v in enumerate(values)]
