"""What a TARGET's ``attr`` names in its module: found by its (dotted) name, and when it
is missing, the close names or the models and factories the module defines."""

from __future__ import annotations

import difflib
import inspect
from types import ModuleType
from typing import Any

from torch import nn

from layerscope.errors import InvalidInputError


def resolve(module: ModuleType, attr: str, label: str) -> Any:
    """``module.attr``, ``attr`` possibly dotted; close names suggested when absent."""
    obj: Any = module
    walked: list[str] = []
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            owner = label if not walked else f"{label}:{'.'.join(walked)}"
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            usable = _usable_names(obj) if isinstance(obj, ModuleType) else []
            if close:
                hint = f"did you mean {', '.join(close)}?"
            elif usable:
                hint = f"it defines {', '.join(usable)}"
            else:
                hint = "check the name"
            raise InvalidInputError(f"{owner} has no attribute {part!r}; {hint}") from e
        walked.append(part)
    return obj


#: The most names a refusal lists.
_MAX_NAMES = 12


def _usable_names(module: ModuleType) -> list[str]:
    """What a TARGET may name in ``module``: its models (instances), the ``nn.Module``
    classes and the functions it defines (not those it imports), sorted, at most
    ``_MAX_NAMES`` (then "...")."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        own = getattr(value, "__module__", None) == module.__name__
        if (
            isinstance(value, nn.Module)
            or (isinstance(value, type) and issubclass(value, nn.Module) and own)
            or (inspect.isfunction(value) and own)
        ):
            names.append(name)
    names.sort()
    return names if len(names) <= _MAX_NAMES else [*names[:_MAX_NAMES], "..."]


__all__ = ["resolve"]
