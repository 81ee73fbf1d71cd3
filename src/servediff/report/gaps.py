"""How close to a tie was each divergence? Top-2 gaps from the logprobs recorded during the runs.

    servediff demo --engine hf      # a section of its report

At a divergence (first differing token t) the reference run's recorded top-k at t says how far
apart its two best tokens were (the gap, in nats) and where the other configuration's token
ranked. These are the logits that chose the tokens, not a later re-scoring. A gap of a few
rounding steps of the logits' precision (bf16: about 1/16 to 1/8 nat at typical magnitudes)
is a near-tie that any change of reduction order can flip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servediff.compare.study import PairResult, Study
from servediff.record import Item, Run
from servediff.report.mdtext import cell, code

NEAR_TIE_NATS = 0.25
BINS: tuple[tuple[str, float], ...] = (
    ("0 (exact tie)", 0.0),
    ("≤ 1/16", 0.0625),
    ("≤ 1/8", 0.125),
    ("≤ 1/4", 0.25),
    ("≤ 1/2", 0.5),
    ("≤ 1", 1.0),
    ("> 1", float("inf")),
)


@dataclass(frozen=True, slots=True)
class GapAt:
    item_id: str
    token_index: int
    a_token: str
    b_token: str
    gap: float  # reference top-1 minus top-2 logprob at the divergence
    b_rank: int | None  # 1-based rank of B's token in the reference's top-k (None: not in it)


def top2_gap(top: Sequence[Sequence[object]]) -> float | None:
    if len(top) < 2:
        return None
    return float(top[0][1]) - float(top[1][1])  # type: ignore[arg-type]


def gap_at(item_id: str, t: int | None, a: Item, b: Item) -> GapAt | None:
    """The reference's gap at token t, or None when either side lacks tokens or logprobs there."""
    if t is None or not a.logprobs or not b.tokens or t >= len(a.logprobs) or t >= len(b.tokens):
        return None
    token, _, top = a.logprobs[t]
    gap = top2_gap(top)
    if gap is None:
        return None
    names = [alt for alt, _ in top]
    b_tok = b.tokens[t]
    rank = names.index(b_tok) + 1 if b_tok in names else None
    return GapAt(item_id, t, token, b_tok, gap, rank)


def pair_gaps(p: PairResult) -> list[GapAt | None]:
    return [
        gap_at(d.item_id, d.token_index, p.a_run.items[d.item_id], p.b_run.items[d.item_id])
        for d in p.divergences
    ]


def position_gaps(run: Run) -> list[float]:
    """Top-2 gap at every generated position of a run (error-free items with logprobs)."""
    out: list[float] = []
    for item in run.items.values():
        for _, _, top in item.logprobs or []:
            g = top2_gap(top)
            if g is not None:
                out.append(g)
    return out


def histogram(gaps: Sequence[float]) -> list[int]:
    counts = [0] * len(BINS)
    for g in gaps:
        counts[next(i for i, (_, hi) in enumerate(BINS) if g <= hi)] += 1
    return counts


def _pct(k: int, n: int) -> str:
    return f"{k} ({100 * k / n:.1f} %)" if n else "0"


def gap_section(study: Study) -> list[str]:
    out = ["## How close to a tie was each divergence?", ""]
    rows = [(p, pair_gaps(p)) for p in [*study.controls, *study.pairs] if p.divergences]
    if not rows:
        return [*out, "No divergences.", ""]
    out += [
        "Reference top-1 minus top-2 logprob at the first differing token, from the logprobs recorded "
        "during generation.",
        "",
        "| A | B | divergences | gap known | exact ties | gap ≤ 0.25 nat | B's token is A's top-2 |",
        "|---|---|---|---|---|---|---|",
    ]
    every: list[GapAt] = []
    for p, gaps in rows:
        known = [g for g in gaps if g is not None]
        every += known
        out.append(
            f"| {code(p.a)} | {code(p.b)} | {len(gaps)} | {len(known)} | {sum(g.gap == 0 for g in known)} | "
            f"{sum(g.gap <= NEAR_TIE_NATS for g in known)} | {sum(g.b_rank in (1, 2) for g in known)} |"
        )
    counts = histogram([g.gap for g in every])
    out += [
        "",
        "Gap distribution over all divergences above:",
        "",
        "| gap (nats) | divergences |",
        "|---|---|",
    ]
    out += [f"| {name} | {c} |" for (name, _), c in zip(BINS, counts)]
    ref = study.configurations[0].runs[0]
    pos = position_gaps(ref)
    if pos:
        out += [
            "",
            f"Near-ties are common: over all {len(pos)} generated positions of {code(ref.label)}, "
            f"{_pct(sum(g == 0 for g in pos), len(pos))} were exact ties and "
            f"{_pct(sum(g < NEAR_TIE_NATS for g in pos), len(pos))} had a top-2 gap below "
            f"{NEAR_TIE_NATS} nat.",
        ]
    out += [
        "",
        "| A | B | item | token | A chose | B chose | A's gap | B's rank in A |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p, gaps in rows:
        for d, g in zip(p.divergences, gaps):
            if g is None:
                out.append(
                    f"| {code(p.a)} | {code(p.b)} | {cell(d.item_id)} | {d.token_index} "
                    "| n/a | n/a | n/a | n/a |"
                )
                continue
            out.append(
                f"| {code(p.a)} | {code(p.b)} | {cell(g.item_id)} | {g.token_index} | {cell(g.a_token)} | "
                f"{cell(g.b_token)} | {g.gap:.4f} | {g.b_rank or '> k'} |"
            )
    return [*out, ""]
