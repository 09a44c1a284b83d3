"""The report subjects besides the Profile, keyed by their section of a ``layerscope/1``
document, and the module that declares each section's check.

A subject (the plan, the generation) owns its fields, its view and its formats
(``planning/``, ``generation/``); export
keeps only this table of where they live, imports no subject's package, and loads a
subject's module the first time its section is needed (the schema document).
"""

from __future__ import annotations

import importlib

from layerscope.export.jsoncheck import Check

__all__ = ["SECTIONS", "section_check"]

#: Section key -> (the module that declares its check, the check's name there).
SECTIONS: dict[str, tuple[str, str]] = {
    "plan": ("layerscope.planning.schema", "PLAN"),
    "generation": ("layerscope.generation.schema", "GENERATION"),
}


def section_check(key: str) -> Check:
    """The check of the section ``key`` (``SECTIONS``), its module loaded now."""
    module, name = SECTIONS[key]
    check = getattr(importlib.import_module(module), name)
    assert isinstance(check, Check), f"{module}.{name} is no section check"
    return check
