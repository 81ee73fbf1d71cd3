"""Two scoring runs of the same sequences turned into per-sequence divergences (``compare/kl``).

Scoring runs record at every position the top-k logprobs (their token ids under the item's
``metadata.engine.top_ids``) and the logprob of the sequence's own next token; the divergence
between two configurations is the top-k + tail KL of those, a lower bound of the exact KL.

A study groups scoring runs like any runs (by suite and label): each control (a configuration
against its own repeat: the noise floor) and each pair of configurations whose runs are scoring
runs becomes one ``KlRow`` of the report's KL section.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servediff.compare.kl import SequenceDivergence, divergence_topk, log_histogram, summarise
from servediff.compare.speed import Interval
from servediff.compare.stats import Interval as Bounds
from servediff.compare.study import PairResult, Study
from servediff.compare.vocabulary import Kind
from servediff.records import Item, Run


@dataclass(frozen=True, slots=True)
class KlRow:
    """Two scoring runs of the same sequences: the teacher-forced divergence of B from A.

    ``kind`` "control" is a configuration against its own repeat (the noise floor), "pair" two
    configurations. KL is the top-k + tail value (a lower bound of the full-vocabulary KL);
    intervals are 95 % bootstraps over sequences. ``checkpoint_*`` name each side's weights.
    """

    suite: str
    a: str
    b: str
    kind: Kind
    checkpoint_a: str
    checkpoint_b: str
    top_k: int
    sequences: int
    positions: int
    kl_mean: Interval
    kl_max: float
    kl_percentiles: tuple[tuple[float, float], ...]  # (percentile, KL), 99.9 down to 0.1
    same_top1: Interval
    dp_mean: Interval
    dp_rms: float
    ln_ppl_ratio: Interval
    # Per-position KL as a log-binned histogram (compare.kl.log_histogram): the HTML plot's data.
    kl_hist_edges: tuple[float, ...] = ()
    kl_hist_counts: tuple[int, ...] = ()

    @property
    def predicted_flip_rate(self) -> float:
        """1 − same-top-1: on an on-policy corpus, how often B's greedy pick would leave A's path."""
        return 1.0 - self.same_top1.value


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


def is_scoring_pair(p: PairResult) -> bool:
    return is_scoring(p.a_run) and is_scoring(p.b_run)


def without_scoring_pairs(study: Study) -> Study:
    """The study less its scoring controls and pairs (the configurations stay: Method, Speed)."""
    return Study(
        study.configurations,
        tuple(p for p in study.controls if not is_scoring_pair(p)),
        tuple(p for p in study.pairs if not is_scoring_pair(p)),
        study.warnings,
    )


def kl_rows(study: Study) -> tuple[KlRow, ...]:
    """A/A rows first (the noise floor), then the pairs, in the study's order."""
    return tuple(kl_row(p) for p in (*study.controls, *study.pairs) if is_scoring_pair(p))


def kl_row(p: PairResult) -> KlRow:
    seqs = scoring_pair(p.a_run, p.b_run)
    s = summarise(seqs)
    edges, counts = log_histogram(np.concatenate([q.kl for q in seqs]))
    return KlRow(
        suite=p.suite,
        a=p.a,
        b=p.b,
        kind=p.kind,
        checkpoint_a=_checkpoint(p.a_run),
        checkpoint_b=_checkpoint(p.b_run),
        top_k=min(p.a_run.header.sampling.top_logprobs, p.b_run.header.sampling.top_logprobs),
        sequences=s.n_sequences,
        positions=s.n_positions,
        kl_mean=_iv(s.kl_mean, s.kl_mean_ci),
        kl_max=s.kl_max,
        kl_percentiles=tuple(s.kl_percentiles.items()),
        same_top1=_iv(s.same_top1, s.same_top1_ci),
        dp_mean=_iv(s.dp_mean, s.dp_mean_ci),
        dp_rms=s.dp_rms,
        ln_ppl_ratio=_iv(s.ln_ppl_ratio, s.ln_ppl_ratio_ci),
        kl_hist_edges=edges,
        kl_hist_counts=counts,
    )


def _iv(value: float, ci: Bounds) -> Interval:
    return Interval(value=value, low=ci.low, high=ci.high)


def _checkpoint(run: Run) -> str:
    return str(run.header.engine.get("model") or "not recorded")
