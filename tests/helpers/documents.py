"""One small document of each kind besides a profile (a plan, a sweep, a generation
estimate, a serving plan, a timed generation), made once per process, the loader that
reads each back, and ``layerscope show`` run in the process: the documents' tests share
them."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import layerscope as ls
from helpers.models import meta_tiny_llama, tiny_llama
from layerscope.cli import main
from layerscope.generation.serving import plan_serving


def small_model() -> torch.nn.Module:
    """8 -> 16 -> 8 with a ReLU, seeded."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def _meta_llama() -> Any:
    pytest.importorskip("transformers")
    return meta_tiny_llama()


def _generation() -> Any:
    pytest.importorskip("transformers")
    return ls.profile_generate(tiny_llama(), torch.tensor([[1, 2, 3, 4]]), 2, timing=1)


_MAKE: dict[str, Callable[[], Any]] = {
    "plan": lambda: ls.plan(small_model(), torch.randn(4, 8), target="h100", world_size=8),
    "sweep": lambda: ls.plan_sweep(small_model(), torch.randn(4, 8), world_size=[8, 16]),
    "estimate": lambda: ls.estimate_generate(
        _meta_llama(), target="h100", prompt=16, new_tokens=4, batch=1
    ),
    "serving": lambda: plan_serving(
        _meta_llama(), target="h100", max_context=256, prompt=16, new_tokens=4, batch=[1, 2]
    ),
    "generation": _generation,
}
#: Each kind's reader.
LOADERS: dict[str, Callable[[Path], Any]] = {
    "plan": ls.load_plan, "sweep": ls.load_sweep, "estimate": ls.load_estimate,
    "serving": ls.load_serving, "generation": ls.load_generation,
}  # fmt: skip


@cache
def made(kind: str) -> Any:
    """The document of ``kind``, made once (treat it as read-only)."""
    return _MAKE[kind]()


def saved(kind: str, folder: Path, name: str | None = None) -> Path:
    """``made(kind)`` saved in ``folder`` as ``<name or kind>.json``."""
    path = folder / f"{name or kind}.json"
    made(kind).save(path)
    return path


def show(*argv: str) -> tuple[int, str, str]:
    """``layerscope show ARGV``: its exit code, standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["show", *argv])
    return code, out.getvalue(), err.getvalue()
