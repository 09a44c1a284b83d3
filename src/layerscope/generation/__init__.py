"""Generation, measured and estimated (``docs/generate.md``): ``ls.profile_generate``
(``run``) measures a Hugging Face ``generate()`` per stage and call into a
``Generation`` (``result``); ``ls.estimate_generate`` (``estimate``) estimates prefill
and decode on a target GPU from a meta model into a ``GenerateEstimate``
(``estimate_result``); ``cache`` reads a KV cache's bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_attributes

if TYPE_CHECKING:
    from layerscope.generation.estimate import estimate_generate
    from layerscope.generation.estimate_result import GenerateEstimate, load_estimate
    from layerscope.generation.result import Generation, load_generation
    from layerscope.generation.run import profile_generate

#: Each public name's module, imported on first use: importing one module of the
#: package (``tests/test_layering.py`` counts what a package ``__init__`` imports) loads
#: nothing else of it.
_LAZY: dict[str, str] = {
    "estimate_generate": "layerscope.generation.estimate",
    "GenerateEstimate": "layerscope.generation.estimate_result",
    "load_estimate": "layerscope.generation.estimate_result",
    "Generation": "layerscope.generation.result",
    "load_generation": "layerscope.generation.result",
    "profile_generate": "layerscope.generation.run",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "GenerateEstimate",
    "Generation",
    "estimate_generate",
    "load_estimate",
    "load_generation",
    "profile_generate",
]
