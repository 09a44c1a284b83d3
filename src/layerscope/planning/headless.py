"""A transformers base model (``LlamaModel``, ``transformers:llama``): a model whose
``base_model`` is itself, which has no output head where a language model has one. Its
forward returns hidden states, no logits, so a plan of it (``ls.plan``) holds no logits,
and an estimate of its generation (``ls.estimate_generate``, ``ls.plan_serving``) leaves
out the LM head's matmul of the prefill and of every decode step. Each says so in a note
naming the class with the head, from one detection (``base_model``):

- of a module: transformers' ``base_model`` property (``getattr(self,
  base_model_prefix, self)``) is the module itself, and it has a config;
- of an analysis (a ``Profile``, whose module is gone): the analysed class
  (``profile.model["class"]``, found among the modules imported) is a transformers model
  class and the analysed root holds no child named its ``base_model_prefix``, which is
  what that property reads.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from torch import nn

from layerscope.profile import Profile


@dataclass(frozen=True)
class BaseModel:
    """A transformers base model: its class name, and where the class with a head is."""

    name: str
    #: ``"transformers:LlamaForCausalLM"``: the class transformers' auto mappings give
    #: its model type (``head_class``); None: none found, not named here
    headed: str | None

    def with_head(self) -> str:
        """The class with the head, in words for a note: ``" (transformers:...)"``."""
        return f" ({self.headed})" if self.headed else " (its *For* class)"


#: transformers' auto mappings from a model type to its class with a head that generates
_HEAD_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
)


def _head_of(name: str, kind: object, architectures: object) -> tuple[str, str] | None:
    """The transformers class with a language-modelling head for a model class ``name``
    of model type ``kind``, and where it was found: transformers' auto mappings, else the
    config's ``architectures``. None when neither names one."""
    if isinstance(kind, str) and kind:
        auto: Any = None
        with contextlib.suppress(ImportError):  # without transformers, no mapping
            from transformers.models.auto import modeling_auto as auto
        for mapping in _HEAD_MAPPINGS:
            head = getattr(auto, mapping, {}).get(kind)
            if isinstance(head, str) and head != name:
                return head, "the same model with its language-modelling head"
    if isinstance(architectures, list | tuple):
        named = [a for a in architectures if isinstance(a, str) and a and a != name]
        if named:
            return named[0], "the architecture its config names (config.architectures)"
    return None


def head_class(model: nn.Module) -> tuple[str, str] | None:
    """The transformers class that generates for ``model``'s architecture (a base model's
    class with a language-modelling head, ``LlamaModel`` -> ``LlamaForCausalLM``) and
    where it was found (``_head_of``)."""
    config = getattr(model, "config", None)
    kind, architectures = (
        getattr(config, "model_type", None),
        getattr(config, "architectures", None),
    )
    return _head_of(type(model).__name__, kind, architectures)


def _detected(cls: type, children: Collection[str]) -> BaseModel | None:
    """``cls`` as a base model when it is a transformers model class (its ``base_model``
    property) whose ``base_model_prefix`` names none of ``children``."""
    prefix = getattr(cls, "base_model_prefix", None)
    if not isinstance(getattr(cls, "base_model", None), property) or not isinstance(prefix, str):
        return None
    if prefix in children:
        return None
    kind = getattr(getattr(cls, "config_class", None), "model_type", None)
    found = _head_of(cls.__name__, kind, None)
    return BaseModel(cls.__name__, f"transformers:{found[0]}" if found else None)


def base_model(model: nn.Module | Profile) -> BaseModel | None:
    """``model`` (a module, or the analysis of one) as a transformers base model, or None
    (module doc)."""
    if isinstance(model, Profile):
        module, _, name = str(model.model.get("class", "")).rpartition(".")
        cls = getattr(sys.modules.get(module), name, None)
        if not isinstance(cls, type):
            return None
        return _detected(cls, {child.name for child in model.root.children})
    if getattr(model, "base_model", None) is not model or not hasattr(model, "config"):
        return None
    return _detected(type(model), {name for name, _ in model.named_children()})


def headless_notes(model: nn.Module) -> list[str]:
    """``ls.plan``'s note for a transformers base model, where a language model's
    training step has logits."""
    found = base_model(model)
    if found is None:
        return []
    return [
        f"{found.name} is a transformers base model, without an output head: the plan holds "
        f"no logits; plan the model with its head{found.with_head()} for a language model's "
        "training step"
    ]


def headless_generation_note(prefill: Profile) -> str | None:
    """``ls.estimate_generate``'s (and so ``ls.plan_serving``'s) note for a transformers
    base model, read from its prefill's analysis: no LM head, so no logits, and the head's
    matmul missing from the prefill and from every decode step."""
    found = base_model(prefill)
    if found is None:
        return None
    return (
        f"{found.name} is a transformers base model, without an LM head: it returns hidden "
        "states, no logits, so the head's matmul (hidden size x vocabulary) is missing from "
        "the prefill and from every decode step, and its weights from the memory unless "
        f"tied to the embeddings; give the model with its head{found.with_head()} for a "
        "language model's generation."
    )


__all__ = ["BaseModel", "base_model", "head_class", "headless_generation_note", "headless_notes"]
