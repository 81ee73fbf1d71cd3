"""Sampled decoding for the transformers engine, one seeded draw per (item, sample).

    servediff run --engine hf --temperature 0.7 --top-p 0.95 --samples 4 --seed 42 --out s.jsonl

transformers' own sampler draws from torch's global generator, one stream for the whole batch, so
a row's tokens would depend on which other rows share its batch and on how many draws came
before. Here the sampling is a logits processor run inside greedy ``generate``: it applies the
temperature / top-k / top-p warpers, draws each row's token with that row's own
``torch.Generator``, and returns scores where only the drawn token is finite, so greedy picks it.

Each row's generator is re-seeded at every generated position from (the draw's seed, the
position): the token at position t depends only on the draw's seed, t and the logits there. So a
draw is reproducible whatever the batch, and with assisted generation (prompt lookup, a draft
model), whose verification pass may process a position more than once, it is the same token as
step-by-step decoding would draw from the same logits. Raw logits (``output_logits``) are what
the record's logprobs come from, as for greedy runs: the model's distribution at temperature 1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from servediff.types import SamplingParams


def step_seed(seed: int, step: int) -> int:
    """The generator seed for generated position ``step`` of the draw seeded ``seed``."""
    digest = hashlib.sha256(f"{seed}\x00{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # a non-negative int64


def warpers(params: SamplingParams) -> LogitsProcessorList:
    """Temperature, then top-k (0: none), then top-p (1: none): transformers' own warpers."""
    out = LogitsProcessorList([TemperatureLogitsWarper(params.temperature)])
    if params.top_k:
        out.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        out.append(TopPLogitsWarper(params.top_p))
    return out


class SeededSampler(LogitsProcessor):
    """Draws row i's next token with generator ``seeds[i]`` (re-seeded per position)."""

    def __init__(self, seeds: Sequence[int], prompt_width: int, params: SamplingParams, device: str) -> None:
        self.seeds = list(seeds)
        # input_ids handed to the processor hold the (left-padded) prompt, then the generated
        # tokens: their length less the prompt width is the position being generated.
        self.prompt_width = prompt_width
        self.warpers = warpers(params)
        self.generators = [torch.Generator(device=device) for _ in self.seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_width
        probs = torch.softmax(self.warpers(input_ids, scores).float(), dim=-1)
        picks = []
        for row, (seed, gen) in enumerate(zip(self.seeds, self.generators)):
            gen.manual_seed(step_seed(seed, step))
            picks.append(torch.multinomial(probs[row], 1, generator=gen))
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, torch.stack(picks), 0.0)
        return out  # type: ignore[return-value]
