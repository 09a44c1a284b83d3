"""Generation, measured and estimated (``docs/generate.md``): ``ls.profile_generate``
(``run``) measures a Hugging Face ``generate()`` per stage and call into a
``Generation`` (``result``); ``ls.estimate_generate`` (``estimate``) estimates prefill
and decode on a target GPU from a meta model into a ``GenerateEstimate``
(``estimate_result``); ``cache`` reads a KV cache's bytes."""

from layerscope.generation.estimate import estimate_generate
from layerscope.generation.estimate_result import GenerateEstimate
from layerscope.generation.result import Generation, load_generation
from layerscope.generation.run import profile_generate

__all__ = [
    "GenerateEstimate",
    "Generation",
    "estimate_generate",
    "load_generation",
    "profile_generate",
]
