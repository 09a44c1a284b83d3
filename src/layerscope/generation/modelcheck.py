"""What ``ls.estimate_generate`` refuses before it analyses anything: a model that does
not generate token by token on a causal KV cache, and a sequence longer than the model's
positions (``docs/generate.md``, "What is refused").

- **Encoder-decoders** (``config.is_encoder_decoder``, e.g. T5, BART): not supported yet
  (an estimate would run the encoder once and the decoder on a self- and a
  cross-attention cache).
- **Encoder-only models** (e.g. BERT as an encoder): every attention module states
  ``is_causal`` and none is causal, so each token sees the whole sequence and there is no
  token-by-token generation to estimate. A model whose modules state nothing is not
  judged here.
- **Positions**: the config's ``max_position_embeddings``, ``n_positions`` or
  ``max_sequence_length``, the first that is set. An absolute position table (GPT-2) has
  no row beyond it (a real run raises ``IndexError``); a rotary model states it as the
  length it was built for.
"""

from __future__ import annotations

from torch import nn

from layerscope.errors import InvalidInputError

#: The config keys that state a model's positions, in the order they are read.
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")


def positions(model: nn.Module) -> tuple[int, str] | None:
    """The most tokens the model's positions allow and the config key that says so
    (None: the config states no limit)."""
    config = getattr(model, "config", None)
    for key in POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None


def check_generative(model: nn.Module, tokens: int) -> None:
    """``InvalidInputError`` with the fix for a model that does not generate as a causal
    decoder, or whose positions end before ``tokens`` (prompt + new tokens)."""
    name = type(model).__name__
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None) or name
    if getattr(config, "is_encoder_decoder", False) is True:
        raise InvalidInputError(
            f"{name} is an encoder-decoder ({kind}): estimate_generate does not support "
            "encoder-decoders yet (an encoder pass, then decoder steps on a self- and a "
            "cross-attention cache); give a decoder-only causal LM, or profile the model "
            "with ls.profile"
        )
    causal = [
        m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)
    ]
    if causal and not any(causal):
        raise InvalidInputError(
            f"{name} is encoder-only ({kind}): none of its attention is causal, so it does "
            "not generate token by token on a KV cache; estimate_generate is for decoders "
            "(a causal LM such as LlamaForCausalLM); profile the model with ls.profile"
        )
    check_positions(model, tokens, "the prompt's length and --max-new-tokens")


def check_positions(
    model: nn.Module, tokens: int, lengths: str = "input_ids' tokens and max_new_tokens"
) -> None:
    """``InvalidInputError`` for ``tokens`` (prompt + new tokens) beyond a decoder's
    positions (``positions``): an absolute position table has no
    row past them (``generate()`` raises ``IndexError``), a rotary model was built for
    that length. ``lengths`` names what sets the two (the parameters, or the flags). An
    encoder-decoder is not judged: its encoder holds the prompt, its decoder the new
    tokens, each in positions of its own (T5's are relative, unbounded)."""
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False) is True:
        return
    limit = positions(model)
    if limit is not None and tokens > limit[0]:
        most, key = limit
        raise InvalidInputError(
            f"prompt + new_tokens = {tokens:,} is beyond {type(model).__name__}'s {most:,} "
            f"positions (config.{key}): give prompt + new_tokens <= {most:,} ({lengths})"
        )


__all__ = ["POSITION_KEYS", "check_generative", "check_positions", "positions"]
