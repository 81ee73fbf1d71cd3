"""Two scoring runs of the same sequences turned into per-sequence divergences (``compare/kl``).

Scoring runs record at every position the top-k logprobs (their token ids under the item's
``metadata.engine.top_ids``) and the logprob of the sequence's own next token; the divergence
between two configurations is the top-k + tail KL of those, a lower bound of the exact KL.
"""

from __future__ import annotations

from servediff.compare.kl import SequenceDivergence, divergence_topk
from servediff.record import Item, Run


def is_scoring(run: Run) -> bool:
    return run.header.extra.get("mode") == "score"


def positions(item: Item) -> tuple[list[dict[int, float]], list[float]]:
    """Per position: top-k as {token id: logprob}, and the next token's logprob."""
    meta = item.metadata.get("engine") or {}
    top_ids = meta.get("top_ids")
    if item.logprobs is None or top_ids is None or len(top_ids) != len(item.logprobs):
        raise ValueError(f"item {item.id!r} has no per-position top-k with token ids")
    tops = [
        {int(t): float(lp) for t, (_, lp) in zip(ids, top)}
        for ids, (_, _, top) in zip(top_ids, item.logprobs)
    ]
    return tops, [float(lp) for _, lp, _ in item.logprobs]


def scoring_pair(a: Run, b: Run) -> list[SequenceDivergence]:
    """Divergence of B from A on every sequence both scored without error, in id order.

    The sequences must be the same tokens: a differing item means the runs scored different
    corpora (or tokenizers), and a KL between them would be meaningless, so it is refused.
    """
    for run in (a, b):
        if not is_scoring(run):
            raise ValueError(f"{run.path}: not a scoring run (header extra.mode is not 'score')")
    shared = sorted(a.done_ids() & b.done_ids())
    if not shared:
        raise ValueError(f"{a.path} and {b.path} share no scored sequence")
    out = []
    for item_id in shared:
        ia, ib = a.items[item_id], b.items[item_id]
        sa, sb = overlap(ia, ib)
        if sa is None or sb is None:
            raise ValueError(f"item {item_id!r}: {a.path} and {b.path} scored different tokens")
        top_a, lp_a = positions(ia)
        top_b, lp_b = positions(ib)
        out.append(divergence_topk(top_a[sa], top_b[sb], lp_a[sa], lp_b[sb]))
    return out


def overlap(a: Item, b: Item) -> tuple[slice | None, slice | None]:
    """The positions both items scored, as a slice of each; (None, None) when they scored
    different sequences.

    An item's scored tokens follow ``metadata.engine.context_tokens`` tokens of context (0 where
    a record does not say). Two engines can start scoring one sequence at different places (a
    server that returns nothing for the first token of a text starts one later); the sequences
    must then end together and agree on every token both scored.
    """
    ca, cb = _context(a), _context(b)
    ids_a, ids_b = a.token_ids or [], b.token_ids or []
    if ca + len(ids_a) != cb + len(ids_b):
        return None, None
    start = max(ca, cb)
    sa, sb = slice(start - ca, None), slice(start - cb, None)
    if ids_a[sa] != ids_b[sb] or not ids_a[sa]:
        return None, None
    return sa, sb


def _context(item: Item) -> int:
    meta = item.metadata.get("engine") or {}
    return int(meta.get("context_tokens") or 0)
