"""Knobs of the in-process Hugging Face transformers engine (no torch import here).

    servediff run --engine hf --dtype fp16 --batch-size 4 --out runs/fp16.jsonl

Each knob changes how transformers computes a greedy completion: how many prompts share a
forward pass (left-padded), the floating-point type of weights and activations, the attention
kernel, and assisted generation (prompt lookup, or a draft model) that verifies several tokens
per forward pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DTYPES = ("bf16", "fp16", "fp32")
# What transformers accepts as attn_implementation for most decoder models; a model may refuse
# one (the error comes from transformers and is reported as an engine error).
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True, slots=True)
class HFKnobs:
    """Settings that change the computation, each mapped to a transformers argument."""

    batch_size: int = 1  # prompts per generate() call, left-padded into one forward pass
    dtype: str = "bf16"  # torch_dtype of the weights and activations
    attn: str = "sdpa"  # attn_implementation
    prompt_lookup: int = 0  # generate(prompt_lookup_num_tokens=k); 0 = off
    draft_model: str | None = None  # assistant_model loaded from this path (assisted generation)
    device: str = "auto"  # "auto" (cuda when available), "cpu", "cuda", "cuda:1", ...

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, not {self.dtype!r}")
        if self.attn not in ATTENTION:
            raise ValueError(f"attn must be one of {ATTENTION}, not {self.attn!r}")
        if self.batch_size < 1 or self.prompt_lookup < 0:
            raise ValueError("batch_size must be >= 1 and prompt_lookup >= 0")
        if self.prompt_lookup and self.draft_model:
            raise ValueError("prompt_lookup and draft_model are two kinds of assisted generation: pick one")
        # transformers verifies drafts for one sequence at a time only.
        if (self.prompt_lookup or self.draft_model) and self.batch_size != 1:
            raise ValueError("assisted generation (prompt_lookup, draft_model) needs batch_size 1")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
