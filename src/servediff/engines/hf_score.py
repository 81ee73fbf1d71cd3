"""Teacher-forced scoring on the transformers engine: one forward pass per fixed sequence.

    servediff run --engine hf --score gsm8k --data test.jsonl --limit 20 --dtype fp32 --out a.jsonl

A scoring run reads the logits of every position of a fixed token sequence (context, then the
continuation whose tokens are scored) and records, per continuation position, the top-k
logprobs with their token ids and the logprob of the sequence's own next token: the record the
embedded llama.cpp engine writes (``compare/kl_runs.py`` reads both). The model sees the whole
vocabulary; the log-softmax is taken in float64, whatever the model's dtype, so that the only
rounding a configuration adds is its own forward pass.

Sequences of one batch are *right*-padded: every real token keeps positions 0..n-1 (a plain
forward pass numbers positions from the left edge, so left padding would shift them), and the
causal mask keeps real tokens from seeing the padding after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from servediff.engines.scored import scored_completion
from servediff.types import Completion


@dataclass(frozen=True, slots=True)
class ScoredSequence:
    """One sequence's continuation positions: the next token's logprob, and the top-k (ids and
    logprobs, best first) of the distribution that predicted it."""

    chosen: list[float]
    top_ids: list[list[int]]
    top_logprobs: list[list[float]]


def right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask with every row starting at column 0."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def log_softmax_rows(
    model: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int, device: str
) -> Iterator[torch.Tensor]:
    """Per (context, continuation): the float64 log-softmax (continuation × vocabulary, on the
    device) predicting each continuation token from everything before it; one batched pass.
    Yielded one sequence at a time, so only one float64 matrix is alive at once."""
    rows = [[*ctx, *cont] for ctx, cont in pairs]
    ids, mask = right_pad(rows, pad_id)
    with torch.inference_mode():
        logits = model(ids.to(device), attention_mask=mask.to(device)).logits
    for i, (ctx, cont) in enumerate(pairs):
        # Position j's logits predict token j + 1: the continuation is predicted from len(ctx) - 1.
        row = logits[i, len(ctx) - 1 : len(ctx) - 1 + len(cont)]
        with torch.inference_mode():
            yield torch.log_softmax(row.double(), dim=-1)


def scored(logp: torch.Tensor, continuation: Sequence[int], k: int) -> ScoredSequence:
    """Top-k and next-token logprobs of one sequence from its full log-softmax matrix.

    Equal values are ordered by token id: ``topk`` leaves their order unspecified, and a record
    must not depend on it.
    """
    k = min(k, logp.shape[-1])
    vals, idx = torch.topk(logp, k, dim=-1, sorted=True)
    # topk's order among equal values is unspecified: re-sort each row by (−value, id).
    rows = [sorted(zip(v, t), key=_best_first) for v, t in zip(vals.tolist(), idx.tolist())]
    nxt = torch.tensor(list(continuation), dtype=torch.long, device=logp.device)
    chosen = logp.gather(1, nxt[:, None])[:, 0].tolist()
    return ScoredSequence(
        chosen=chosen,
        top_ids=[[int(t) for _, t in r] for r in rows],
        top_logprobs=[[float(v) for v, _ in r] for r in rows],
    )


def _best_first(pair: tuple[float, int]) -> tuple[float, int]:
    return (-pair[0], pair[1])


def completion(
    item_id: str, n_context: int, continuation: list[int], sc: ScoredSequence, piece: Callable[[int], str]
) -> Completion:
    """The record line of one scored sequence, in the embedded engine's shape; the engine sets the
    decoded text (one decode, not a join of pieces)."""
    return scored_completion(item_id, n_context, continuation, sc.chosen, sc.top_ids, sc.top_logprobs, piece)
