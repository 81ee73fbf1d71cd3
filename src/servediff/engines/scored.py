"""The record line of one teacher-forced scored sequence, shared by every in-process engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from servediff.types import Completion, TokenLogprob


def scored_completion(
    item_id: str,
    n_context: int,
    continuation: Sequence[int],
    chosen: Sequence[float],
    top_ids: list[list[int]],
    top_logprobs: Sequence[Sequence[float]],
    piece: Callable[[int], str],
    text: str = "",
) -> Completion:
    """Per position: the text's own next-token logprob and the top-k (best first) with their
    token ids under ``metadata.engine.top_ids`` (two ids can share a text: KL is over ids)."""
    pieces = [piece(t) for t in continuation]
    lps = [
        TokenLogprob(p, lp, tuple((piece(i), v) for i, v in zip(ids, vals)), token)
        for p, lp, ids, vals, token in zip(pieces, chosen, top_ids, top_logprobs, continuation)
    ]
    return Completion(
        item_id=item_id,
        text=text,
        finish_reason="scored",
        n_tokens=len(continuation),
        token_ids=list(continuation),
        tokens=pieces,
        logprobs=lps,
        token_source="engine",
        engine_meta={"context_tokens": n_context, "top_ids": top_ids},
    )
