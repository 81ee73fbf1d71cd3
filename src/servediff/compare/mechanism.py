"""Why two completions diverged, measured: the logprob gap at the first differing token.

    servediff compare runs/*.jsonl probes.jsonl --md report.md   # "Why the text diverges — measured"

For each divergence: the first differing *token* (token ids when both runs have engine ids,
else token text), each configuration's top-k there (recorded during the run, or from a probe
record written by ``servediff probe``), the top-1 − top-2 gap, a class, and the shift of the two
tokens' logprobs between configurations. Over the tokens both runs share, the drift of the chosen
token's logprob. Pure functions on run items and probe entries; no engine is called here.

Classes (threshold in nats, default 0.1):
  near-tie flip  both sides rank the same two tokens on top and A's gap is below the threshold
  rank change    a larger gap, but each side's token is in the other side's top-k
  unexplained    the other side's token is outside the top-k that was measured
  not measured   no top-k at this position: the run recorded no logprobs and no probe measured
                 it, or the records hold no token data, so there is no token to measure at
  sampled draw   the runs sample (temperature > 0): the sampler drew each token, so no top-2 gap
                 decides it, and the greedy classes do not apply; the logprob shifts still do
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, overload

import msgspec

from servediff.compare.divergence import Divergence, Point
from servediff.compare.precision import Drift, Precision, drift, known_dtype, precision, shared_deltas
from servediff.compare.sampled import is_sampled
from servediff.compare.stats import hazard as hz
from servediff.compare.study import PairResult
from servediff.compare.vocabulary import DivergenceClass
from servediff.records import Item
from servediff.records.probes import ProbeEntry, ProbeSet

NEAR_TIE: Final = "near-tie flip"
RANK_CHANGE: Final = "rank change"
UNEXPLAINED: Final = "unexplained"
# No top-k here (none recorded, none probed), or no token data to locate the divergence on.
NOT_MEASURED: Final = "not measured"
SAMPLED: Final = "sampled draw"  # temperature > 0: a draw, not an argmax, chose the token
CLASSES: tuple[DivergenceClass, ...] = (NEAR_TIE, RANK_CHANGE, UNEXPLAINED, NOT_MEASURED, SAMPLED)
RECORDED = "recorded during the run"
DEFAULT_THRESHOLD = 0.1


@dataclass(frozen=True, slots=True)
class Distribution:
    """One side's top-k at the divergence position, best first, and what computed it."""

    top: tuple[tuple[str, float], ...]
    source: str  # RECORDED, or "probe: <method>"
    ids: tuple[int, ...] | None = None

    @property
    def gap(self) -> float | None:
        return self.top[0][1] - self.top[1][1] if len(self.top) >= 2 else None


# A msgspec struct, as Point is: one per divergence (see compare.divergence).
class Explanation(msgspec.Struct, frozen=True, gc=False):
    point: Point
    a: Distribution | None
    b: Distribution | None
    cls: DivergenceClass
    shift_a_token: float | None  # logprob of A's token under B minus under A
    shift_b_token: float | None
    note: str  # why unexplained, or a caveat (a probe whose argmax is not the run's token)
    a_probe: Distribution | None = None  # kept beside a recorded A to show the probe's error
    b_probe: Distribution | None = None

    @property
    def gap_a(self) -> float | None:
        return self.a.gap if self.a else None

    @property
    def gap_b(self) -> float | None:
        return self.b.gap if self.b else None


# --- which numbers -----------------------------------------------------------------------------
def recorded(item: Item, index: int) -> Distribution | None:
    """The run's own top-k at ``index``: a token's, or, where the item ended there by choosing
    its end token, that token's (``stop_logprobs``)."""
    if item.logprobs is None:
        return None
    if index < len(item.logprobs):
        top = item.logprobs[index][2]
    elif index == len(item.logprobs) and item.stop_logprobs is not None:
        top = item.stop_logprobs[2]
    else:
        return None
    if len(top) < 2:
        return None
    return Distribution(tuple((str(t), float(v)) for t, v in top), RECORDED)


def from_probe(entry: ProbeEntry | None) -> Distribution | None:
    if entry is None or entry.error or len(entry.top) < 2:
        return None
    return Distribution(entry.top, f"probe: {entry.method}", entry.ids)


def _is_end(text: str) -> bool:
    # End-of-sequence tokens detokenize to "" in llama.cpp; other servers spell them out.
    return text == "" or (text.startswith("<") and text.endswith(">") and len(text) > 2)


def rank(d: Distribution, token: str | None, token_id: int | None) -> int | None:
    """0-based rank of a token in a top-k (by id when both are known, else by text)."""
    if d.ids is not None and token_id is not None:
        return d.ids.index(token_id) if token_id in d.ids else None
    for r, (text, _) in enumerate(d.top):
        if (token is None and _is_end(text)) or text == token:
            return r
    return None


def logprob_of(d: Distribution, token: str | None, token_id: int | None) -> float | None:
    r = rank(d, token, token_id)
    return None if r is None else d.top[r][1]


# --- classification ----------------------------------------------------------------------------
def classify(
    p: Point, a: Distribution | None, b: Distribution | None, threshold: float
) -> tuple[DivergenceClass, str]:
    """(class, note). Without A's top-k nothing was measured: "unexplained" is kept for a token
    that a measured top-k does not hold."""
    if a is None:
        return NOT_MEASURED, "no top-k for A at this position"
    b_in_a = rank(a, p.b_token, p.b_id)
    a_in_b = None if b is None else rank(b, p.a_token, p.a_id)
    if b_in_a is None:
        return UNEXPLAINED, f"B's token is not in A's top-{len(a.top)}"
    if b is not None and a_in_b is None:
        return UNEXPLAINED, f"A's token is not in B's top-{len(b.top)}"
    a_self = rank(a, p.a_token, p.a_id)
    top2_a = {a_self, b_in_a} == {0, 1}
    top2_b = b is None or {rank(b, p.b_token, p.b_id), a_in_b} == {0, 1}
    gap = a.gap
    notes = [] if a_self == 0 else [f"A's numbers put A's own token at rank {_r(a_self)}"]
    if b is not None and rank(b, p.b_token, p.b_id) != 0:
        notes.append(f"B's numbers put B's own token at rank {_r(rank(b, p.b_token, p.b_id))}")
    if b is None:
        notes.append("B's top-k not obtained: classified from A alone")
    if top2_a and top2_b and gap is not None and gap < threshold:
        return NEAR_TIE, "; ".join(notes)
    return RANK_CHANGE, "; ".join(notes)


def _r(r: int | None) -> str:
    return "outside the top-k" if r is None else str(r + 1)


_BARE = Item(id="", input=None, text="", sha256="")  # an item without logprobs
_NO_LOGPROBS = (_BARE, _BARE)


def _explain(
    d: Divergence, entries: Mapping[tuple[str, str], ProbeEntry], threshold: float, sampled: bool
) -> Explanation | None:
    """``explain`` of one divergence, or None where ``Explanations`` makes it when read: one
    without a token position (``unplaced``), or one whose items are not made yet, two plain
    items of a lean read (``Divergence.source``) that no probe measured. Those hold no logprobs,
    which is all ``explain`` reads of items, so their explanation is the same for every such
    divergence but for its point (300,000 of them at a million shadow items)."""
    p = d.token
    if p.index is None:
        return None
    if d.items is not None or (entries and ((d.item_id, "a") in entries or (d.item_id, "b") in entries)):
        return explain(p, d.items or _NO_LOGPROBS, entries, threshold, sampled)
    return None


class Explanations(Sequence[Explanation]):
    """One explanation per divergence, in the divergences' order: made at once where measured
    (``_explain``), else when read. At a million shadow items, 300,000 divergences each with
    its explanation made and kept were ~26 MB and ~0.3 s, and every pass over them (the class
    counts, the gaps, the probe legend and checks) a pass over 300,000; only the measured ones
    hold a distribution, a gap or a probe (``measured``)."""

    __slots__ = ("_bare", "_divergences", "_made")

    def __init__(
        self, divergences: Sequence[Divergence], made: dict[int, Explanation], sampled: bool
    ) -> None:
        self._divergences, self._made = divergences, made
        bare = _BARE_EXPLANATIONS.get(sampled)
        if bare is None:
            point = Point("", 0, None, None, None, None, "none")
            bare = _BARE_EXPLANATIONS[sampled] = explain(point, _NO_LOGPROBS, {}, DEFAULT_THRESHOLD, sampled)
        self._bare = bare

    def __len__(self) -> int:
        return len(self._divergences)

    @overload
    def __getitem__(self, i: int) -> Explanation: ...
    @overload
    def __getitem__(self, i: slice) -> list[Explanation]: ...
    def __getitem__(self, i: int | slice) -> Explanation | list[Explanation]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        made = self._made.get(i)
        if made is not None:
            return made
        p = self._divergences[i].token
        if p.index is None:
            return unplaced(p)
        bare = self._bare
        return Explanation(p, None, None, bare.cls, None, None, bare.note)

    def __iter__(self) -> Iterator[Explanation]:
        return map(self.__getitem__, range(len(self)))

    def measured(self) -> list[Explanation]:
        """The explanations made at once, in order: the only ones that can hold a distribution
        (and so a gap, a probe or a probe's source)."""
        return [self._made[k] for k in sorted(self._made)]

    def classes(self) -> Counter[DivergenceClass]:
        """How many divergences of each class."""
        counts: Counter[DivergenceClass] = Counter(e.cls for e in self._made.values())
        unplaced_n = sum(1 for d in self._divergences if d.token.index is None)
        rest = len(self) - len(self._made) - unplaced_n
        if unplaced_n:
            counts[NOT_MEASURED] += unplaced_n
        if rest:
            counts[self._bare.cls] += rest
        return counts


def measured(explanations: Sequence[Explanation]) -> Sequence[Explanation]:
    """Those of ``explanations`` that can hold a distribution (``Explanations.measured``)."""
    return explanations.measured() if isinstance(explanations, Explanations) else explanations


def classes(explanations: Sequence[Explanation]) -> Counter[DivergenceClass]:
    """How many of ``explanations`` of each class."""
    if isinstance(explanations, Explanations):
        return explanations.classes()
    return Counter(e.cls for e in explanations)


# ``explain`` of a placed divergence whose items hold no logprobs and that no probe measured,
# by whether the runs sample: the same class and note whatever the point (``_explain``).
_BARE_EXPLANATIONS: dict[bool, Explanation] = {}


def unplaced(p: Point) -> Explanation:
    """A divergence with no token position: nothing to measure at (its items are not read)."""
    return Explanation(p, None, None, NOT_MEASURED, None, None, "no token data: cannot locate the token")


def explain(
    p: Point,
    items: tuple[Item, Item],
    probes: Mapping[tuple[str, str], ProbeEntry],
    threshold: float = DEFAULT_THRESHOLD,
    sampled: bool = False,
) -> Explanation:
    """Recorded logprobs when the run has them (the very logits that chose), else the probe.
    In sampled runs the class is ``sampled draw``: a coupled draw leaves the other side's text
    wherever the two distributions differ enough to move the sampler's choice, near-tie or not."""
    if p.index is None:
        return unplaced(p)
    index = p.index
    if p.alignment == "token ids (retokenized)":
        # The runs hold no token texts; a probe that asked the server's detokenizer knows them.
        named = [e.tokens for side in "ab" if (e := probes.get((p.item_id, side))) and e.tokens]
        if named:
            p = msgspec.structs.replace(p, a_token=named[0][0], b_token=named[0][1])
    rec_a, rec_b = recorded(items[0], index), recorded(items[1], index)
    probe_a, probe_b = from_probe(probes.get((p.item_id, "a"))), from_probe(probes.get((p.item_id, "b")))
    a, b = rec_a or probe_a, rec_b or probe_b
    cls: DivergenceClass
    if sampled:
        cls, note = SAMPLED, "the sampler drew this token; a top-2 gap does not decide a draw"
    else:
        cls, note = classify(p, a, b, threshold)
        if a is None:
            note = f"{note} ({_missing(items[0], index, probes.get((p.item_id, 'a')))})"
    shift_a = shift_b = None
    if a is not None and b is not None:
        shift_a = _diff(logprob_of(b, p.a_token, p.a_id), logprob_of(a, p.a_token, p.a_id))
        shift_b = _diff(logprob_of(b, p.b_token, p.b_id), logprob_of(a, p.b_token, p.b_id))
    kept = (probe_a if rec_a is not None else None, probe_b if rec_b is not None else None)
    return Explanation(p, a, b, cls, shift_a, shift_b, note, *kept)


def _diff(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None else x - y


def _missing(item: Item, index: int, entry: ProbeEntry | None) -> str:
    if item.logprobs is None:
        run = "the run did not record logprobs"
    elif index >= len(item.logprobs):
        run = "A ended here, and the run records no logprobs for the end token"
    else:
        run = "the run recorded fewer than 2 alternatives"
    if entry is None:
        probe = "no probe"
    elif entry.error:
        probe = f"probe failed: {entry.error}"
    else:  # a probe that could not measure here says why in its method
        probe = entry.method.removeprefix("http: ")
    return f"{run}; {probe}"


def unlocated(divergences: Sequence[Divergence]) -> int:
    """How many divergences have no token position: a side's record holds neither token ids nor
    token texts (a shadow proxy never asks the primary for logprobs), so the first differing
    token cannot be found."""
    return sum(d.token.index is None for d in divergences)


@dataclass(frozen=True, slots=True)
class PairMechanism:
    suite: str
    a: str
    b: str
    kind: str
    threshold: float
    explanations: Sequence[Explanation]  # ``Explanations``
    drift: Drift | None
    hazard: hz.Hazard | None
    no_token_data: int  # items left out of the hazard (no token counts)
    precision: Precision
    probe_path: str | None
    # Per compared item with token data: (tokens at risk, diverged) — the hazard's input and the
    # survival curve's, so the rate and the curve are one computation. Empty when a divergence
    # has no token position (``unlocated``): neither a rate nor a curve is given then.
    times: tuple[tuple[int, bool], ...] = ()
    unlocated: int = 0  # divergences with no token position (``unlocated()``)


def matching_probes(pair: PairResult, probes: Sequence[ProbeSet]) -> ProbeSet | None:
    ka = (pair.a_run.label, pair.a_run.header.repeat)
    kb = (pair.b_run.label, pair.b_run.header.repeat)
    found = [p for p in probes if p.suite == pair.suite and (p.a, p.b) == (ka, kb)]
    # A record of (B, A) measures the same divergences: compare may pair the runs the other way
    # round than they were probed (its pairs follow the order of the files it is given).
    found += [_swapped(p) for p in probes if p.suite == pair.suite and (p.a, p.b) == (kb, ka)]
    if len(found) <= 1:
        return found[0] if found else None
    # One record per side (an experiment probes each configuration while it is up): merged.
    entries: dict[tuple[str, str], ProbeEntry] = {}
    for p in found:
        entries.update(p.entries)
    return dataclasses.replace(
        found[0],
        path="; ".join(p.path for p in found),
        template_source=next((p.template_source for p in found if p.template_source), None),
        entries=entries,
    )


def _swapped(ps: ProbeSet) -> ProbeSet:
    flip = {"a": "b", "b": "a"}
    entries = {
        (item, flip[side]): dataclasses.replace(
            e, side=flip[side], tokens=(e.tokens[1], e.tokens[0]) if e.tokens else None
        )
        for (item, side), e in ps.entries.items()
    }
    return dataclasses.replace(ps, a=ps.b, b=ps.a, entries=entries)


def measure_pair(
    pair: PairResult, probes: Sequence[ProbeSet] = (), threshold: float = DEFAULT_THRESHOLD
) -> PairMechanism:
    ps = matching_probes(pair, probes)
    entries = ps.entries if ps else {}
    sampled = is_sampled(pair.a_run)
    # One explanation per divergence, in the divergences' order; made here where measured.
    if entries:
        made = {
            k: e
            for k, d in enumerate(pair.divergences)
            if (e := _explain(d, entries, threshold, sampled)) is not None
        }
    else:  # ``_explain`` without probes: only a placed divergence whose items are made measures
        made = {
            k: explain(d.token, d.items, {}, threshold, sampled)
            for k, d in enumerate(pair.divergences)
            if d.items is not None and d.token.index is not None
        }
    explanations = Explanations(pair.divergences, made, sampled)
    deltas: list[float] = []
    used: list[Item] = []
    if not pair.logprobs:
        # No logprobs on either side: no precision, no drift, and so no pass over every item (at
        # a million items, ~2 s of dictionary look-ups).
        return _mechanism(pair, ps, threshold, explanations, deltas, used)
    points = {d.item_id: d.token for d in pair.divergences}  # the study's one token alignment
    a_get, b_get = pair.a_run.items.get, pair.b_run.items.get  # once, not per item (1M of them)
    for item_id in pair.a_run.header.suite.item_ids:
        ia, ib = a_get(item_id), b_get(item_id)
        if ia is None or ib is None or ia.error or ib.error:
            continue
        # Only items with logprobs count for the precision and the drift: at a million items
        # without any, listing every item and asking each for its deltas cost seconds.
        if ia.logprobs is not None:
            used.append(ia)
        if ib.logprobs is not None:
            used.append(ib)
        if ia.metadata.get("comparable") is False:
            continue  # its logits count for the precision; not compared, so no drift either
        both = ia.logprobs is not None and ib.logprobs is not None
        p = points.get(item_id)
        if both and (p is None or p.index is not None):
            deltas += shared_deltas(ia, ib, None if p is None else p.index)
    return _mechanism(pair, ps, threshold, explanations, deltas, used)


def _mechanism(
    pair: PairResult,
    ps: ProbeSet | None,
    threshold: float,
    explanations: Explanations,
    deltas: list[float],
    used: list[Item],
) -> PairMechanism:
    # The survival times are the pairing's own (``PairResult.times``), taken in its pass.
    n_unlocated = unlocated(pair.divergences)
    hazard, left_out = hz.pair_hazard(pair.times, n_unlocated)
    return PairMechanism(
        suite=pair.suite,
        a=pair.a,
        b=pair.b,
        kind=pair.kind,
        threshold=threshold,
        explanations=explanations,
        drift=drift(deltas),
        hazard=hazard,
        no_token_data=left_out,
        precision=precision(used, known_dtype([pair.a_run.header.engine, pair.b_run.header.engine])),
        probe_path=ps.path if ps else None,
        times=() if n_unlocated else tuple(filter(None, pair.times)),  # each a pair: only None is false
        unlocated=n_unlocated,
    )
