"""Generation, measured and estimated (``docs/generate.md``): ``ls.profile_generate``
(``run``) measures a Hugging Face ``generate()`` per stage and step into a
``Generation`` (``result``); ``cache`` reads a KV cache's bytes."""

from layerscope.generation.result import Generation, load_generation
from layerscope.generation.run import profile_generate

__all__ = ["Generation", "load_generation", "profile_generate"]
