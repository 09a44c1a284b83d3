"""``import layerscope``: a small facade whose public names load their modules on first use.

Each check runs in a fresh interpreter, since this one has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import layerscope as ls


def run(code: str) -> str:
    """``code``'s stdout in a fresh interpreter with this one's ``sys.path``."""
    prelude = f"import sys; sys.path[:0] = {sys.path!r}\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + code], check=True, capture_output=True, text=True
    )
    return done.stdout


def test_import_loads_no_layer_above_the_data_model() -> None:
    """The collect, metrics' formulas, analysis, render, export, session and CLI layers
    (and yaml, rich, pandas) load when a name that needs them is first used."""
    out = run(
        "import torch; before = set(sys.modules); import layerscope, json\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    loaded = json.loads(out)
    heavy = ("collect", "metrics.flops", "analysis", "render", "export", "session", "cli")
    assert [m for m in loaded if m.startswith(tuple(f"layerscope.{h}" for h in heavy))] == []
    assert [m for m in loaded if m.split(".")[0] in ("yaml", "rich", "pandas")] == []


def test_every_public_name_imports() -> None:
    """``from layerscope import X`` for each X of ``__all__``, the first in a fresh process."""
    out = run(
        "import layerscope\n"
        f"for name in {ls.__all__!r}:\n"
        "    exec(f'from layerscope import {name} as value')\n"
        "    assert value is getattr(layerscope, name), name\n"
        "print('ok')"
    )
    assert out.strip() == "ok"


def test_profile_is_the_function_whatever_loads_first() -> None:
    """``layerscope.profile`` is also a submodule (the data model); loading it, or the
    session, in any order leaves ``ls.profile`` the function."""
    out = run(
        "import layerscope.profile, layerscope.session.run\n"
        "from layerscope.profile import Profile\n"
        "import layerscope as ls\n"
        "print(ls.profile is layerscope.session.run.profile, callable(ls.profile))"
    )
    assert out.split() == ["True", "True"]


def test_unknown_names_and_subpackages() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        ls.no_such_name  # noqa: B018
    assert ls.analysis.__name__ == "layerscope.analysis"
    assert set(ls.__all__) <= set(dir(ls))
