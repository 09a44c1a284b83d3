"""Package attributes loaded on first use: a package ``__init__`` that imports nothing
until one of its public names is read, so importing one of its modules (which runs the
``__init__``) loads nothing else of the package."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``table`` maps each public
    name to the module that defines it; a name read is kept in ``namespace`` (the
    package's globals)."""

    def getattr_(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *table})

    return getattr_, dir_


__all__ = ["lazy_attributes"]
