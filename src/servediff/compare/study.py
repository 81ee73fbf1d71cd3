"""Group run records into configurations and compare them: control, pairs, divergences.

    servediff compare runs/*.jsonl --md report.md

Runs with the same label (and suite) are repeats of one configuration: the first repeat is
compared with every other (the control), and the first repeat of each configuration with the
first repeat of every other (the pairs). Only item ids present and error-free in both runs are
compared; errors are counted, never treated as a difference.

A control must be two separate runs: one file given twice (or a copy of it, by run id) is refused,
and two files claiming the same label and repeat number are refused unless forced, since either
would report "identical across repeats" without anything having been repeated.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path, PurePath

from servediff.compare.divergence import (
    NO_TOKENS,
    RETOKENIZED_IDS,
    Divergence,
    Point,
    find_divergence,
    placement,
    survival_time,
)
from servediff.compare.provenance import setup_problems, tie_warning, unknown_temperature
from servediff.compare.vocabulary import Kind
from servediff.records import Item, Run
from servediff.records.lean import LeanItems, column_store


class CompareError(ValueError):
    """Runs that should not be compared (different prompts, sampling or model)."""


@dataclass(frozen=True, slots=True)
class PairResult:
    suite: str
    a: str  # label of the reference side
    b: str
    kind: Kind  # "control" (repeat of one configuration) or "pair"
    identical: int
    total: int  # items compared: present and error-free in both runs
    errors: int  # items left out: either side failed, or has no answer for the item yet
    divergences: tuple[Divergence, ...]
    a_run: Run
    b_run: Run
    # Items left out because nothing says the two sides should agree: shadow traffic sampled
    # without a seed. Counted, never compared.
    noncomparable: int = 0
    # Of ``errors``: items one side has not answered at all (a run stopped before it reached
    # them: re-running finishes it). Said apart from engine errors so neither is mistaken for
    # the other.
    missing: int = 0
    # Per item both runs answered and compared (non-comparable ones left out), in the suite's order: the
    # hazard's (tokens at risk, diverged), None without a token count (``survival_time``). Taken
    # in this pass, which holds both items already: a second pass over a million items for the
    # hazard alone was ~2 s of look-ups. ``logprobs``: whether any of these items has them.
    times: tuple[tuple[int, bool] | None, ...] = ()
    logprobs: bool = False


@dataclass(frozen=True, slots=True)
class Configuration:
    suite: str
    label: str
    runs: tuple[Run, ...]  # repeats, by repeat number


@dataclass(frozen=True, slots=True)
class Study:
    """What the records say, grouped and paired; report options travel separately."""

    configurations: tuple[Configuration, ...]
    controls: tuple[PairResult, ...]
    pairs: tuple[PairResult, ...]
    warnings: tuple[str, ...]

    @property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(c.suite for c in self.configurations))

    @property
    def comparisons(self) -> tuple[PairResult, ...]:
        return (*self.controls, *self.pairs)


def compare_runs(a: Run, b: Run, kind: Kind) -> PairResult:
    ids = a.header.suite.item_ids
    pairing = _Pairing()
    A, B = column_store(a.items), column_store(b.items)
    if A is not None and B is not None and A.ids == ids and B.ids == ids:
        pairing.columns(A, B)
    else:
        step = pairing.step
        for item_id, ia, ib in zip(ids, _in_order(a, ids), _in_order(b, ids)):
            step(item_id, ia, ib)
    divergences, times = pairing.divergences, pairing.times
    total = len(times)
    return PairResult(
        suite=a.header.suite.name,
        a=a.label,
        b=b.label,
        kind=kind,
        identical=total - len(divergences),
        total=total,
        errors=pairing.errors,
        divergences=tuple(divergences),
        a_run=a,
        b_run=b,
        noncomparable=pairing.noncomparable,
        missing=pairing.missing,
        times=tuple(times),
        logprobs=pairing.logprobs,
    )


class _Pairing:
    """One pass over the items of two runs, in the suite's order: counts, divergences and
    survival times. A million items a side pass through here: each check is made where its
    answer is needed (most items are error-free, comparable and identical)."""

    __slots__ = ("at_risk", "divergences", "errors", "logprobs", "missing", "noncomparable", "times")

    def __init__(self) -> None:
        self.divergences: list[Divergence] = []
        self.times: list[tuple[int, bool] | None] = []
        self.errors = self.noncomparable = self.missing = 0
        self.logprobs = False
        self.at_risk: dict[int, tuple[int, bool]] = {}  # one (n, False) per length, not one per item

    def step(self, item_id: str, ia: Item | None, ib: Item | None) -> None:
        if ia is None or ib is None or ia.error or ib.error:
            self.errors += 1
            self.missing += ia is None or ib is None
            return
        if not self.logprobs and (ia.logprobs is not None or ib.logprobs is not None):
            self.logprobs = True
        meta = ia.metadata
        if meta and meta.get("comparable") is False:
            # Sampled without a seed: not compared, and not exposure either. Its tokens counted
            # as "at risk, no divergence" would pull the hazard down by traffic never compared.
            self.noncomparable += 1
            return
        # find_divergence is None exactly when the texts are equal: most items of a large record,
        # and at a million of them the two calls it saves were a second.
        if ia.text == ib.text:
            n = ia.n_tokens
            if n is not None:  # survival_time's common case, inline
                self.times.append(self.at_risk.get(n) or self.at_risk.setdefault(n, (n, False)))
            else:
                self.times.append(survival_time(ia, ib, None))
            return
        d = find_divergence(item_id, ia, ib)
        assert d is not None  # unequal texts always diverge
        self.divergences.append(d)
        self.times.append(survival_time(ia, ib, d.token))

    def columns(self, a: LeanItems, b: LeanItems) -> None:
        """``step`` over two lean reads in the suite's order, from their columns: an item is
        made only where it is kept whole on either side (an error, metadata, token data) or
        the texts differ. A plain item is error-free and comparable, has no logprobs and no
        token list, so between those places ``step`` would take each token count as is: the
        runs of plain, equal items go in by one C call each."""
        at_risk: dict[int | None, tuple[int, bool] | None] = {None: None}
        for n in {0, *filter(None, a.n_tokens)}:  # every token count of A, and 0 (filtered out)
            at_risk[n] = self.at_risk.setdefault(n, (n, False))
        differ = a.differing(b)
        times, tokens, at, kept = self.times, a.n_tokens, 0, a.extras.keys() | b.extras.keys()
        ids, diverged = a.ids, self.divergences.append
        events: dict[int, tuple[int, bool]] = {}
        order = sorted({*differ, *kept})
        for i, placed in zip(order, a.placed.placements(order, placement)):
            times += map(at_risk.__getitem__, tokens[at:i])
            at = i + 1
            if i in kept:
                self.step(ids[i], a.item(i), b.item(i))
                continue
            # Two plain items whose texts differ: neither holds token data, so ``step`` would
            # place the divergence where A's recorded "first_token" says, or nowhere (no
            # survival time then). Their items are made when a report reads them
            # (``Divergence.source``).
            item_id = ids[i]
            if placed is None:  # ``recorded_point`` of items without token texts, inline
                diverged(Divergence(item_id, Point(item_id, *_NOWHERE), None, (a, b, i)))
                times.append(None)
                continue
            index, a_id, b_id = placed
            point = Point(item_id, index, None, None, a_id, b_id, RETOKENIZED_IDS)
            diverged(Divergence(item_id, point, None, (a, b, i)))
            n = index + 1  # one (tokens at risk, diverged) for each place, not one a divergence
            times.append(events.get(n) or events.setdefault(n, (n, True)))
        times += map(at_risk.__getitem__, tokens[at:])


# ``recorded_point`` of no recorded place: every field but the id.
_NOWHERE = (None, None, None, None, None, NO_TOKENS)


def _in_order(run: Run, ids: Sequence[str]) -> Iterable[Item | None]:
    """The run's item for each of ``ids``, in order. Its own items in their order when that is the
    order of ``ids`` (a shadow record's suite is its items in the order read, and the two sides
    of a segment are written in one order): at a million items a look-up per id in a dict that
    large was a cache miss each, ~0.9 s for the two sides."""
    if len(run.items) == len(ids) and run.items.ids == ids:
        return run.items.values()
    return map(run.items.get, ids)


def group(runs: Iterable[Run]) -> tuple[Configuration, ...]:
    """(suite, label) → its runs, in first-seen order, repeats sorted by repeat number."""
    by_key: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        by_key.setdefault((run.header.suite.name, run.label), []).append(run)
    return tuple(
        Configuration(suite, label, tuple(sorted(rs, key=lambda r: r.header.repeat)))
        for (suite, label), rs in by_key.items()
    )


def _model_key(run: Run) -> str:
    engine = run.header.engine
    if engine.get("model_sha256"):
        return str(engine["model_sha256"])
    return PurePath(str(engine.get("model") or "")).name


def problems(runs: Sequence[Run], checkpoints: bool = False) -> list[str]:
    """Why these runs are not comparable (same suite must mean same prompts, sampling, model).

    ``checkpoints``: the comparison declares different weight files of one model (Q4_1 against
    Q8_0) as a dimension; then the tokenizers must match (vocabulary hash) instead of the model.
    """
    out: list[str] = []
    by_suite: dict[str, list[Run]] = {}
    for r in runs:
        by_suite.setdefault(r.header.suite.name, []).append(r)
    for suite, rs in by_suite.items():
        ref = rs[0]
        if len(rs) > 1:
            out += [p for r in rs for p in unknown_temperature(r.header, f"{suite}: {r.path}")]
        for r in rs[1:]:
            where = f"{suite}: {r.path} vs {ref.path}"
            if r.header.suite.content_sha256 != ref.header.suite.content_sha256:
                out.append(f"{where}: the prompts differ (suite content hash)")
            if r.header.sampling != ref.header.sampling:
                out.append(f"{where}: sampling differs ({r.header.sampling} vs {ref.header.sampling})")
            out += setup_problems(r.header, ref.header, where)
            if _model_key(r) != _model_key(ref) and checkpoints:
                out += _tokenizer_problem(where, r, ref)
            elif _model_key(r) != _model_key(ref):
                out.append(
                    f"{where}: model differs ({r.header.engine.get('model')} vs "
                    f"{ref.header.engine.get('model')})"
                )
    return out


def _tokenizer_problem(where: str, r: Run, ref: Run) -> list[str]:
    va, vb = r.header.engine.get("vocab_sha256"), ref.header.engine.get("vocab_sha256")
    if va is None or vb is None:
        return [f"{where}: checkpoints differ and a run records no vocabulary hash to check the tokenizer"]
    if va != vb:
        return [f"{where}: checkpoints differ and so do their tokenizers (vocabulary hash)"]
    return []


def _identity(path: Path) -> tuple[int, int] | str:
    # The file itself (device, inode), so a symlink or a second spelling of a path is caught too.
    try:
        st = os.stat(path)
    except OSError:
        return str(Path(path).resolve())
    return (st.st_dev, st.st_ino)


def given_twice(runs: Sequence[Run]) -> list[str]:
    """Runs that are one run given twice: the same file, or, within one configuration, files
    with the same run id (a copy given as a repeat). An edited copy under another label is a
    constructed comparison, not a control, and stays allowed."""
    out: list[str] = []
    files: dict[tuple[int, int] | str, Run] = {}
    ids: dict[tuple[str, str, str], Run] = {}
    for r in runs:
        first = files.setdefault(_identity(r.path), r)
        if first is not r:
            out.append(f"{r.path} is given twice (as {first.path})")
            continue
        if r.header.run_id is not None:
            first = ids.setdefault((r.header.suite.name, r.label, r.header.run_id), r)
            if first is not r:
                out.append(f"{r.path} is a copy of {first.path} (same run id {r.header.run_id})")
    return out


def repeat_collisions(runs: Sequence[Run]) -> list[str]:
    """Runs of one configuration that claim the same repeat number."""
    seen: dict[tuple[str, str, int], Run] = {}
    out: list[str] = []
    for r in runs:
        key = (r.header.suite.name, r.label, r.header.repeat)
        first = seen.setdefault(key, r)
        if first is not r:
            out.append(
                f"{key[0]}: {r.path} and {first.path} are both `{key[1]}` repeat #{key[2]}; a control "
                "needs repeats with different numbers (servediff run --repeat 2)"
            )
    return out


def build_study(runs: Sequence[Run], force: bool = False, checkpoints: bool = False) -> Study:
    if not runs:
        raise CompareError("no runs to compare")
    twice = given_twice(runs)
    if twice:
        # Never forced: comparing a run with itself proves nothing about determinism.
        raise CompareError(
            "refusing to compare a run with itself: " + "; ".join(twice) + " (a control needs two "
            "separate runs of one configuration: servediff run --repeat 2)"
        )
    found = problems(runs, checkpoints) + repeat_collisions(runs)
    if found and not force:
        raise CompareError("refusing to compare:\n  " + "\n  ".join(found) + "\n(--force compares anyway)")
    configs = group(runs)
    controls = [compare_runs(c.runs[0], rep, "control") for c in configs for rep in c.runs[1:]]
    pairs: list[PairResult] = []
    for suite in dict.fromkeys(c.suite for c in configs):
        firsts = [c.runs[0] for c in configs if c.suite == suite]
        pairs.extend(compare_runs(a, b, "pair") for a, b in combinations(firsts, 2))
    warnings = [f"forced despite: {p}" for p in found]
    warnings += [w for r in runs for w in tie_warning(r.header, str(r.path))]
    warnings += [
        f"{r.path}:{r.torn}: the last line is cut off (an interrupted run); its item is left out — "
        "re-run the same `servediff run` to finish it"
        for r in runs
        if r.torn is not None
    ]
    return Study(
        configurations=configs, controls=tuple(controls), pairs=tuple(pairs), warnings=tuple(warnings)
    )


def without_pairs_of(study: Study, labels: Iterable[str]) -> Study:
    """The study with no pair that involves these labels (their controls stay)."""
    drop = set(labels)
    kept = tuple(p for p in study.pairs if p.a not in drop and p.b not in drop)
    return Study(study.configurations, study.controls, kept, study.warnings)


def pairs_with(study: Study, label: str) -> Study:
    """The study with only the pairs that involve ``label`` (one row per configuration compared
    with the control); controls stay."""
    kept = tuple(p for p in study.pairs if label in (p.a, p.b))
    return Study(study.configurations, study.controls, kept, study.warnings)


def require_comparison(study: Study) -> None:
    """Refuse a study of several configurations that compares nothing: runs of different suites
    give an empty table, which must not read as "nothing changed"."""
    if len({c.label for c in study.configurations}) > 1 and not study.pairs and not study.controls:
        raise CompareError(
            "nothing to compare: no two configurations ran the same suite (suites: "
            + ", ".join(study.suites)
            + ")"
        )
