"""Bytes saved for the backward by a transformers Llama, eager against ``torch.compile``
(Inductor on the CPU: AOTAutograd's partitioner recomputes cheap ops in the backward
instead of saving them), for a few shapes.

    python bench/compile_saved.py

Eager: every tensor a saved-tensor hook packs, by storage, parameters left out.
Compiled: the tensors each compiled region's backward node holds (``saved_tensors``),
by storage, parameters left out. The plan charges eager's figure under ``compile=True``
(docs/plan.md, "Compiled"); the ratio printed is what a rule for the partitioner's
recomputation would have to reproduce. Needs a C++ compiler for Inductor's CPU kernels.
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


def compiled_saved(model: Any, ids: torch.Tensor, params: set[int]) -> int:
    compiled: Any = torch.compile(model)
    out = compiled(ids).logits
    seen: dict[int, int] = {}
    stack, visited = [out.grad_fn], set()
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


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f"torch {torch.__version__}, float32 on the CPU")
    print(f"{'hidden':>7}{'inter':>7}{'layers':>7}{'batch':>6}{'tokens':>7}"
          f"{'eager B':>12}{'compiled B':>12}{'ratio':>7}")  # fmt: skip
    for hidden, inter, layers, batch, tokens in SHAPES:
        model = llama(hidden, inter, layers)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        ids = torch.randint(0, 1024, (batch, tokens))
        eager = eager_saved(model, ids, params)
        torch._dynamo.reset()
        compiled = compiled_saved(model, ids, params)
        print(f"{hidden:>7}{inter:>7}{layers:>7}{batch:>6}{tokens:>7}"
              f"{eager:>12,}{compiled:>12,}{compiled / eager:>7.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
