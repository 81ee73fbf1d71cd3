"""Is an endpoint serving the reference configuration? The per-request statistics of
``servediff verify``, their null from the reference's own runs, and what a shift looks like.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url http://127.0.0.1:8080

A pair is one item answered twice: by the reference (its first run) and by another side (a second
reference run in the calibration, the endpoint in the test). Each pair gives up to four numbers,
each from one signal, NaN where a side did not record it:

- ``logprob_shift``: the mean, over the tokens both greedy texts share from the start, of
  d = lp_reference − lp_other of the chosen token. A different model or precision moves every
  position; for the reference's own tokens the mean of d estimates the per-token KL(reference ‖
  other) and is > 0, while batching noise moves it both ways.
- ``logprob_distance``: the mean of |d| over the same tokens: a change that *raises* the
  reference's tokens (a sharper model) shows here, not in the signed mean.
- ``divergence``: 1 − (shared tokens) / (reference tokens): 0 for the same text, 1 when the very
  first token differs (the hazard of a divergence, as one number per request).
- ``prompt_tokens``: |prompt tokens of the other side − the reference's| (the server's
  ``usage.prompt_tokens``): another chat template or tokenizer shows at once.
- ``scored_shift`` and ``scored_distance``: the signed and absolute mean of
  d = lp_reference − lp_scored over *every* token of the reference's completion, where the other
  side scored that completion teacher-forced after its prompt (vLLM's ``prompt_logprobs``): the
  comparison goes on past the first divergence. A one-pass score is another computation than
  step-by-step generation, so its null comes from scoring records of the reference's completions
  made on the reference configuration (``servediff run --score ref1.jsonl``), never from the
  generation runs.

The null is the same four numbers over pairs of reference runs: the reference against itself,
under whatever nondeterminism its runs had (batching, load). ``compare/stats/conformal.py``
turns them into the test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import numpy as np

from servediff.compare.stats.conformal import Floats
from servediff.records import Item, Run

Statistic = Literal[
    "logprob_shift", "logprob_distance", "divergence", "prompt_tokens", "scored_shift", "scored_distance"
]
STATISTICS: tuple[Statistic, ...] = (
    "logprob_shift",
    "logprob_distance",
    "divergence",
    "prompt_tokens",
    "scored_shift",
    "scored_distance",
)

# The statistics the test bets on. The signed means are kept as evidence only: measured on the
# CPU (bench/verify_cpu.py), a Q4_K_M or Q2_K endpoint moved the chosen tokens' logprobs on the
# shared greedy prefix both ways (mean d −0.006 and −0.083 nat against a Q8_0 reference, mean |d|
# 0.074 and 0.21): for greedy tokens the signed mean does not estimate a KL, and a one-sided test
# on it missed them.
TESTED: frozenset[Statistic] = frozenset(
    {"logprob_distance", "divergence", "prompt_tokens", "scored_distance"}
)

# What each statistic needs of a side, for the report's list of signals.
SIGNALS: dict[Statistic, str] = {
    "logprob_shift": "chosen-token logprobs on the shared greedy prefix (signed mean)",
    "logprob_distance": "chosen-token logprobs on the shared greedy prefix (mean absolute)",
    "divergence": "greedy text identity and the first divergence (hazard)",
    "prompt_tokens": "prompt token count (usage.prompt_tokens)",
    "scored_shift": "teacher-forced scores of the reference's completions (signed mean)",
    "scored_distance": "teacher-forced scores of the reference's completions (mean absolute)",
}

# Positions that count as "the start" of a completion for the shape of a shift: a template
# changes what comes right after the prompt, so its shift concentrates here.
EARLY_TOKENS = 4


@dataclass(frozen=True, slots=True)
class Pair:
    """One item answered by the reference and by another side."""

    item_id: str
    values: tuple[float, ...]  # in STATISTICS order; NaN: not available on this pair
    diffs: tuple[float, ...]  # d at each shared position, in order
    forced: tuple[float, ...]  # d at each token of the reference, teacher-forced (where scored)
    shared: int  # tokens the two greedy texts share from the start
    reference_tokens: int
    other_tokens: int  # what the other side generated (the cost of this request)
    identical: bool
    prompt_tokens: tuple[int | None, int | None]  # reference, other


def prompt_tokens_of(item: Item) -> int | None:
    engine = item.metadata.get("engine") if isinstance(item.metadata, Mapping) else None
    value = engine.get("prompt_tokens") if isinstance(engine, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tokens(item: Item) -> list[Any] | None:
    """The item's generated tokens, as ids where recorded by the engine, else as texts."""
    if item.token_ids is not None and item.token_source == "engine":
        return list(item.token_ids)
    if item.logprobs is not None:
        return [t[0] for t in item.logprobs]
    return None


def scored_diffs(reference: Item, scored: Item | None) -> list[float] | None:
    """d at every token of the reference's completion, where ``scored`` scored exactly those
    tokens (teacher-forced, after the reference's prompt); None where it did not."""
    if scored is None or scored.error is not None or reference.logprobs is None or scored.logprobs is None:
        return None
    if reference.token_ids is None or scored.token_ids != reference.token_ids:
        return None  # another sequence was scored: nothing to pair position by position
    # Ids retokenized from the text (a server that names no ids) may split it otherwise than the
    # generation did: then the logprobs are not of the same tokens, position by position.
    if len(scored.logprobs) != len(reference.logprobs):
        return None
    if any(a[0] != b[0] for a, b in zip(reference.logprobs, scored.logprobs, strict=True)):
        return None
    return [float(a[1]) - float(b[1]) for a, b in zip(reference.logprobs, scored.logprobs, strict=True)]


def pair(reference: Item, other: Item, scored: Item | None = None) -> Pair:
    """The statistics of one item answered twice (``reference`` first); ``scored``: the other
    side's teacher-forced score of the reference's completion, where there is one."""
    ra, ob = _tokens(reference), _tokens(other)
    identical = reference.text == other.text
    shared = 0
    diffs: list[float] = []
    shift = distance = divergence = math.nan
    if ra is not None and ob is not None:
        while shared < min(len(ra), len(ob)) and ra[shared] == ob[shared]:
            shared += 1
        if identical:  # the same text split alike: every token is shared
            shared = min(len(ra), len(ob))
        divergence = 1.0 - shared / len(ra) if ra else (0.0 if identical else 1.0)
    if reference.logprobs is not None and other.logprobs is not None and ra is not None:
        n = min(shared, len(reference.logprobs), len(other.logprobs))
        diffs = [float(reference.logprobs[i][1]) - float(other.logprobs[i][1]) for i in range(n)]
        # no shared token: nothing to compare here (the divergence statistic has it)
        shift = float(np.mean(diffs)) if diffs else math.nan
        distance = float(np.mean(np.abs(diffs))) if diffs else math.nan
    counts = (prompt_tokens_of(reference), prompt_tokens_of(other))
    prompt = abs(counts[0] - counts[1]) if counts[0] is not None and counts[1] is not None else math.nan
    forced = scored_diffs(reference, scored)
    scored_shift = float(np.mean(forced)) if forced else math.nan
    scored_distance = float(np.mean(np.abs(forced))) if forced else math.nan
    return Pair(
        item_id=reference.id,
        values=(shift, distance, divergence, float(prompt), scored_shift, scored_distance),
        diffs=tuple(diffs),
        forced=tuple(forced or ()),
        shared=shared,
        reference_tokens=len(ra) if ra is not None else 0,
        other_tokens=other.n_tokens if other.n_tokens is not None else len(ob or []),
        identical=identical,
        prompt_tokens=counts,
    )


def usable(item: Item | None) -> bool:
    return item is not None and item.error is None


@dataclass(frozen=True, slots=True)
class Calibration:
    """The null: every pair of reference runs on every item both answered."""

    runs: int
    pairs: tuple[Pair, ...]

    def rows(self) -> Floats:
        return np.array([p.values for p in self.pairs], dtype=np.float64).reshape(-1, len(STATISTICS))

    def nulls(self) -> list[Floats]:
        """Each tested statistic's calibration values, sorted; empty for those not tested."""
        return nulls(self.rows())

    def available(self) -> dict[Statistic, bool]:
        rows = self.rows()
        return {s: bool((~np.isnan(rows[:, k])).any()) for k, s in enumerate(STATISTICS)}


def nulls(rows: Floats) -> list[Floats]:
    """The sorted non-NaN values of each tested column of ``rows``; empty for the others."""
    return [
        np.sort(col[~np.isnan(col)]) if s in TESTED else np.empty(0)
        for s, col in zip(STATISTICS, rows.T, strict=True)
    ]


def still(cal: Calibration) -> bool:
    """Whether the reference never moved: every tested value of every pair is 0 (same texts,
    bit-identical logprobs). Then the null has no noise at all, and anything nondeterministic the
    reference runs did not exercise reads as a substitution (measured: a fresh llama-server of the
    same file and flags "differs" from two runs on one warm server, through its prompt cache)."""
    rows = cal.rows()
    tested = [k for k, s in enumerate(STATISTICS) if s in TESTED]
    values = rows[:, tested]
    return bool(len(values)) and bool(np.all(np.nan_to_num(values) == 0.0))


STILL_WARNING = (
    "the reference runs never differed (same texts, bit-identical logprobs): the null has no noise, "
    "so anything that moves one logprob reads as 'differs' (on llama-server a fresh server's prompt "
    "cache does). Make reference runs that vary as the endpoint will: a fresh server and a warm one, "
    "under load, longer prompts"
)


def calibrate(runs: Sequence[Run], scorings: Sequence[Run] = ()) -> Calibration:
    """Pairs of the reference runs, each pair ordered as given, on the items both answered.

    ``scorings``: teacher-forced scoring records of the first run's completions, made on the
    reference configuration. The k-th pair of the first run with another (the pairs a test
    request resembles: the first run against one more answer) takes its scored statistics from
    scoring record k (cycling), so that one calibration row holds every signal a request gives."""
    pairs = []
    for k, (a, b) in enumerate(combinations(runs, 2)):
        scoring = scorings[k % len(scorings)] if scorings and a is runs[0] else None
        for item_id, item in a.items.items():
            other = b.items.get(item_id)
            if usable(item) and usable(other):
                assert other is not None
                pairs.append(pair(item, other, scoring.items.get(item_id) if scoring else None))
    return Calibration(runs=len(runs), pairs=tuple(pairs))


def alternative(pairs: Sequence[Pair], delta: float, rng: np.random.Generator) -> Floats:
    """The calibration's rows as a substitution of size δ would move them, for the plan.

    Model: at every compared token the substitution adds e = ±E with a random sign and E
    exponential of mean δ (a heavy tail: measured per-token shifts of a quantisation are mostly
    small with a few large ones), on top of the reference's own noise d; each request's mean |d|
    (greedy prefix, and teacher-forced where scored) is recomputed over its own tokens, so a request
    with few shared tokens stays as noisy as it is. The text and prompt statistics are left as they
    are: a substitution need not change them, which makes the plan pessimistic for one that does."""
    rows = np.array([p.values for p in pairs], dtype=np.float64).reshape(-1, len(STATISTICS))
    for k, p in enumerate(pairs):
        for column, diffs in ((1, p.diffs), (5, p.forced)):
            if diffs:
                d = np.asarray(diffs) + rng.choice((-1.0, 1.0), len(diffs)) * rng.exponential(
                    delta, len(diffs)
                )
                rows[k, column] = float(np.mean(np.abs(d)))
    return rows


Shape = Literal["different template", "precision change or different weights", "unclear"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """Where the endpoint's shift lies, over the requests tested."""

    requests: int
    identical: int
    prompt_mismatches: int
    prompt_compared: int
    first_divergence_median: float | None  # tokens; None when every text was identical
    shift_early: float | None  # mean d over the first EARLY_TOKENS shared positions
    shift_late: float | None  # mean d over the later shared positions
    shift_mean: float | None  # mean d over every shared position (≈ per-token KL)
    distance_mean: float | None
    tokens_compared: int


def evidence(pairs: Sequence[Pair]) -> Evidence:
    early = [d for p in pairs for d in p.diffs[:EARLY_TOKENS]]
    late = [d for p in pairs for d in p.diffs[EARLY_TOKENS:]]
    every = early + late
    diverged = [p.shared for p in pairs if not p.identical]
    compared = [p for p in pairs if None not in p.prompt_tokens]
    return Evidence(
        requests=len(pairs),
        identical=sum(p.identical for p in pairs),
        prompt_mismatches=sum(p.prompt_tokens[0] != p.prompt_tokens[1] for p in compared),
        prompt_compared=len(compared),
        first_divergence_median=float(np.median(diverged)) if diverged else None,
        shift_early=_mean(early),
        shift_late=_mean(late),
        shift_mean=_mean(every),
        distance_mean=_mean([abs(d) for d in every]),
        tokens_compared=len(every),
    )


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def shape(e: Evidence, null_prompt_mismatch: bool) -> Shape:
    """What the shift looks like (the rules of docs/guide/verify.md): prompt-token counts that
    differ where the reference's never did → a template (or tokenizer); any other shift with
    compared tokens → a precision change or different weights, which this rule does not tell apart.

    Why not by size: measured on the CPU (bench/verify_weights_cpu.py, 40 prompts, 40 tokens, full
    runs against the reference's first run), Qwen2.5-Coder-1.5B served as the 0.5B (one tokenizer)
    moved the shared greedy prefix by a mean |d| of 0.075 nat and diverged at 0.10 of the compared
    positions; SmolLM2-135M's Q4_K_M and Q2_K against its Q8_0 by 0.075 and 0.195, at 0.09 and
    0.24. Other weights moved the shared tokens no more than a coarse quantisation (the prefix two
    greedy models share is where both are sure), so no line on these numbers separates the two,
    and none is drawn: a guess would name one for the other."""
    if e.prompt_mismatches and not null_prompt_mismatch:
        return "different template"
    if e.distance_mean is None:
        return "unclear"
    return "precision change or different weights"
