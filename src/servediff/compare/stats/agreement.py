"""Does one output equal another, exactly? The comparison an audit makes for every trial.

    servediff audit --from audit-runs/

An audit sends the same prompt alone and under load and compares the two outputs. Equal means
equal in the strictest unit both records hold: the engine's own token ids, else the token strings
its logprobs name, else the text's UTF-8 bytes (said so: two token sequences can decode to one
text). Where both carry logprobs, the chosen tokens' logprobs over the common prefix are compared
bit for bit (as the server wrote them: JSON numbers round-trip a float64 exactly), and the
largest difference is kept: a promise of batch invariance is a promise about those numbers too
(vLLM's test compares them with ``torch.equal``). At the first differing token the gap is the
reference's logprob of its own token minus its logprob of the token the trial chose, when the
reference's top list names it: a gap of a few hundredths is a near-tie that batching tipped over.
Pure functions over frozen values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Basis = Literal["token ids", "tokens", "text bytes"]


@dataclass(frozen=True, slots=True)
class Output:
    """What one request returned, as a record holds it."""

    text: str
    token_ids: tuple[int, ...] | None = None  # only the engine's own ids (never retokenized)
    tokens: tuple[str, ...] | None = None
    logprobs: tuple[float, ...] | None = None  # the chosen token's, per position
    tops: tuple[tuple[tuple[str, float], ...], ...] | None = None  # the top list, per position

    @property
    def key(self) -> tuple[object, ...]:
        """What makes two outputs 'the same' for counting distinct outputs."""
        return (self.text, self.token_ids, self.tokens)


@dataclass(frozen=True, slots=True)
class Agreement:
    """One trial against its reference."""

    identical: bool
    basis: Basis
    first_diff: int | None  # token index (or byte offset for text bytes); None when identical
    logprobs_compared: int  # positions with logprobs on both sides before the first difference
    logprobs_equal: bool | None  # None: no logprobs to compare
    max_logprob_diff: float | None
    gap: float | None  # at the first difference; None when not measurable
    ref_token: str | None = None
    trial_token: str | None = None


def basis_of(a: Output, b: Output) -> Basis:
    if a.token_ids is not None and b.token_ids is not None:
        return "token ids"
    if a.tokens is not None and b.tokens is not None:
        return "tokens"
    return "text bytes"


def first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    """The first index where two sequences differ (the shorter one's length when one is a
    prefix of the other); None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _units(o: Output, basis: Basis) -> Sequence[object]:
    if basis == "token ids":
        return o.token_ids or ()
    if basis == "tokens":
        return o.tokens or ()
    return o.text.encode("utf-8")


def compare(ref: Output, trial: Output) -> Agreement:
    """The trial against the reference: see the module docstring."""
    basis = basis_of(ref, trial)
    diff = first_difference(_units(ref, basis), _units(trial, basis))
    if diff is None and ref.text != trial.text:  # same tokens, other text: still a difference
        basis, diff = "text bytes", first_difference(ref.text.encode(), trial.text.encode())
    n_lp = 0
    equal: bool | None = None
    largest: float | None = None
    if ref.logprobs is not None and trial.logprobs is not None:
        upto = min(len(ref.logprobs), len(trial.logprobs))
        if diff is not None and basis != "text bytes":
            upto = min(upto, diff)
        pairs = list(zip(ref.logprobs[:upto], trial.logprobs[:upto]))
        n_lp = len(pairs)
        equal = all(x == y for x, y in pairs)
        largest = max((abs(x - y) for x, y in pairs), default=0.0)
    gap, rt, tt = _gap(ref, trial, diff) if diff is not None and basis != "text bytes" else (None, None, None)
    return Agreement(diff is None, basis, diff, n_lp, equal, largest, gap, rt, tt)


def _gap(ref: Output, trial: Output, at: int) -> tuple[float | None, str | None, str | None]:
    ref_tok = ref.tokens[at] if ref.tokens is not None and at < len(ref.tokens) else None
    trial_tok = trial.tokens[at] if trial.tokens is not None and at < len(trial.tokens) else None
    if ref.tops is None or at >= len(ref.tops) or ref_tok is None or trial_tok is None:
        return None, ref_tok, trial_tok
    listed = dict(ref.tops[at])
    if ref_tok not in listed or trial_tok not in listed:
        return None, ref_tok, trial_tok
    return listed[ref_tok] - listed[trial_tok], ref_tok, trial_tok


def distinct(outputs: Sequence[Output]) -> int:
    """How many different outputs (SGLang's test script prints this as 'Unique samples')."""
    return len({o.key for o in outputs})
