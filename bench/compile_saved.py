"""Bytes saved for the backward by a transformers Llama, eager against ``torch.compile``
(Inductor on the CPU: AOTAutograd's partitioner recomputes cheap ops in the backward
instead of saving them), for a few shapes.

    python bench/compile_saved.py

Eager: every tensor a saved-tensor hook packs, by storage, parameters left out.
Compiled: the tensors each compiled region's backward node holds (``saved_tensors``),
by storage, parameters left out. Rule: what a plan with ``compile=True`` charges
(``layerscope.metrics.memory.remat``: the partitioner's min-cut over the analysed
forward's op graph).

The rule classes each op as the analysis sees it. Inductor on the CPU lowers a few
things differently before partitioning, and "explained" adds them back, by hand:
its attention takes a materialised float32 causal mask (batch x tokens x tokens x 4 B,
saved once) and the key and value expanded to every query head (saved per layer:
2 x batch x (heads - kv heads) x tokens x 64 x 4 B more), and it rewrites the rotary
embedding's one-column matmul as a pointwise product, so it keeps ``inv_freq`` (128 B)
instead of the rotary table (batch x tokens x 64 x 4 B). Needs a C++ compiler for
Inductor's CPU kernels.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

SHAPES = (  # (hidden, intermediate, layers, batch, tokens)
    (128, 344, 2, 2, 64),
    (256, 688, 2, 2, 256),
    (512, 1376, 2, 1, 512),
)


def llama(hidden: int, intermediate: int, layers: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1024, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=2,
        use_cache=False,
    )  # fmt: skip
    return LlamaForCausalLM(config).train()


def count(seen: dict[int, int], t: torch.Tensor, params: set[int]) -> None:
    """Note ``t``'s storage and its bytes in ``seen``, unless it is a parameter's."""
    s = t.untyped_storage()
    if s.data_ptr() not in params:
        seen[s.data_ptr()] = s.nbytes()


def eager_saved(model: Any, ids: torch.Tensor, params: set[int]) -> int:
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        count(seen, t, params)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids).logits.sum().backward()
    return sum(seen.values())


def compiled_saved(model: Any, x: torch.Tensor, params: set[int], backend: str = "inductor") -> int:
    """Bytes the backward of ``torch.compile(model, backend=backend)`` holds, by storage,
    parameters aside, with the loss ``out.sum()`` (``out.logits.sum()`` for a
    transformers model)."""
    compiled: Any = torch.compile(model, backend=backend)
    out = compiled(x)
    out = getattr(out, "logits", out)
    seen: dict[int, int] = {}
    stack: list[Any] = [out.grad_fn]
    visited: set[int] = set()
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in visited:
            continue
        visited.add(id(fn))
        if "Compiled" in type(fn).__name__:
            for t in fn.saved_tensors:
                count(seen, t, params)
        stack.extend(f for f, _ in fn.next_functions)
    out.sum().backward()
    return sum(seen.values())


def rule_saved(model: Any, ids: torch.Tensor) -> tuple[int, int]:
    """Eager's saved bytes and the rule's, from one analysis."""
    import layerscope as ls
    from layerscope.metrics.memory.opgraph import record_graph

    with record_graph():
        prof = ls.profile(
            model,
            ids,
            memory=True,
            backward=True,
            loss_fn=lambda out: getattr(out, "logits", out).sum(),
        )
    table = prof.memory["storages"]
    eager = sum(r[0] for r in table["rows"] if r[1] and not r[4])
    return eager, sum(nbytes for _, nbytes in table["compiled"])


def lowering(model: Any, batch: int, tokens: int) -> int:
    """What Inductor's CPU lowering saves beside the rule (module doc)."""
    c = model.config
    heads: int = c.num_attention_heads
    kv: int = c.num_key_value_heads
    layers: int = c.num_hidden_layers
    mask = batch * tokens * tokens * 4
    expanded = layers * 2 * batch * (heads - kv) * tokens * 64 * 4
    return mask + expanded - tokens * 64 * 4 + 128


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f"torch {torch.__version__}, float32 on the CPU")
    print(f"{'hidden':>7}{'layers':>7}{'batch':>6}{'tokens':>7}{'eager B':>12}{'compiled B':>12}"
          f"{'ratio':>7}{'rule B':>12}{'ratio':>7}{'explained B':>13}")  # fmt: skip
    for hidden, inter, layers, batch, tokens in SHAPES:
        model = llama(hidden, inter, layers)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        ids = torch.randint(0, 1024, (batch, tokens))
        eager = eager_saved(model, ids, params)
        analysed, rule = rule_saved(model, ids)
        assert analysed == eager, (analysed, eager)
        explained = rule + lowering(model, batch, tokens)
        torch._dynamo.reset()
        compiled = compiled_saved(model, ids, params)
        print(f"{hidden:>7}{layers:>7}{batch:>6}{tokens:>7}{eager:>12,}{compiled:>12,}"
              f"{compiled / eager:>7.3f}{rule:>12,}{rule / eager:>7.3f}{explained:>13,}",
              flush=True)  # fmt: skip
    others()


def others() -> None:
    """Llama, GPT-2 and BERT from transformers (dropout off: on the CPU the compiled
    attention then takes another path than eager's) and layerscope's tiny ResNet (8
    images of 32 x 32), in float32 and under bfloat16 autocast, against torch's
    partitioner without code generation (``backend="aot_eager_decomp_partition"``).
    The ResNet's difference: the decomposed ReLU backward reads a boolean mask of the
    last ReLU's output, which the partitioner saves instead of the output."""
    from contextlib import nullcontext

    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    from layerscope.examples import tiny_resnet

    models: dict[str, Any] = {
        "llama": lambda: llama(128, 344, 2),
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(
            n_embd=128, n_layer=2, n_head=2, vocab_size=1024, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)),
        "resnet": tiny_resnet,
        "bert": lambda: BertForMaskedLM(BertConfig(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=512, vocab_size=1024, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)),
    }  # fmt: skip
    print(
        "\n2 layers, hidden 128, 2 x 64 tokens (resnet: 8 x 3 x 32 x 32); partitioned: "
        "aot_eager_decomp_partition"
    )
    print(f"{'model':>7}{'dtype':>10}{'eager B':>12}{'partitioned B':>15}{'ratio':>7}"
          f"{'rule B':>12}{'ratio':>7}")  # fmt: skip
    for name, make in models.items():
        for dtype in ("float32", "autocast"):
            torch.manual_seed(0)
            model = make().train()
            params = {p.untyped_storage().data_ptr() for p in model.parameters()}
            ids = torch.randn(8, 3, 32, 32) if name == "resnet" else torch.randint(0, 1024, (2, 64))
            cast = torch.autocast("cpu", dtype=torch.bfloat16)
            with cast if dtype == "autocast" else nullcontext():
                eager, rule = rule_saved(model, ids)
                torch._dynamo.reset()
                real = compiled_saved(model, ids, params, backend="aot_eager_decomp_partition")
            print(f"{name:>7}{dtype:>10}{eager:>12,}{real:>15,}{real / eager:>7.3f}"
                  f"{rule:>12,}{rule / eager:>7.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
