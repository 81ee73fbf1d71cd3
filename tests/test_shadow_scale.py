"""Shadow records read for compare: lean items (no input, the metadata compare uses), texts
shared between the sides, and reports that stay readable past a thousand divergences.

The records are written by the shadow proxy's own recorder from parsed request bodies; the
comparison of the lean read is checked against the ordinary read of the same files.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.compare.divergence import Divergence
from servediff.compare.loader import load
from servediff.compare.stats.hazard import pair_hazard
from servediff.compare.study import build_study
from servediff.records import read_run
from servediff.report import render
from servediff.report.assembly import build
from servediff.report.rows.speed_table import speed_rows
from servediff.types import Completion
from tests.helpers.records import write_shadow

ITEMS = 3_000
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "answer",
    "step",
    "total",
    "model",
]


def write_records(out: Path, seed: int = 3, placed: int = 0) -> tuple[Path, Path]:
    """ITEMS requests, about 45 % of them answered differently by the candidate, every 50th
    sampled without a seed (non-comparable), about every 97th another a candidate error.
    ``placed``: every ``placed``-th request whose answers differ is retokenized, as the replay
    does where the candidate has a tokenizer endpoint (the rest stay without token data)."""
    rng = random.Random(seed)

    def requests() -> Iterator[tuple[dict[str, Any], Completion, Completion]]:
        for i in range(ITEMS):
            temperature = 0.7 if i % 50 == 0 else 0
            body = {
                "model": "m",
                "temperature": temperature,
                "messages": [{"role": "user", "content": f"q{i}"}],
            }
            text = " ".join(rng.choices(WORDS, k=rng.randint(5, 30)))
            other = text if rng.random() < 0.55 else text + " and so on"
            primary = Completion(
                "", text=text, finish_reason="stop", latency_s=0.1 + rng.random(), n_tokens=9
            )
            candidate = Completion(
                "", text=other, finish_reason="stop", latency_s=0.2 + rng.random(), n_tokens=9
            )
            if i % 97 == 1 and i % 50:  # an error is counted as one, never as non-comparable
                candidate = Completion("", text="", latency_s=0.1, error="HTTP 500")
            elif placed and other != text and i % placed == 0:
                primary.token_ids = [WORDS.index(w) + 300 for w in text.split(" ")]
                candidate.token_ids = [WORDS.index(w) + 300 if w in WORDS else 7 for w in other.split(" ")]
                primary.token_source = candidate.token_source = "retokenized"
            yield body, primary, candidate

    return write_shadow(out, requests())


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_records(tmp_path_factory.mktemp("shadow-scale"))


def test_the_lean_read_compares_exactly_like_the_ordinary_read(records: tuple[Path, Path]) -> None:
    lean, _ = load(list(records))
    whole = build_study([read_run(p) for p in records])
    (lp,), (wp,) = lean.pairs, whole.pairs
    assert (lp.identical, lp.total, lp.errors, lp.noncomparable) == (
        wp.identical,
        wp.total,
        wp.errors,
        wp.noncomparable,
    )
    assert lp.noncomparable == ITEMS // 50 and lp.errors > 0 and 0 < lp.identical < lp.total
    assert [_seen(d) for d in lp.divergences] == [_seen(d) for d in wp.divergences]


def test_requests_sampled_without_a_seed_are_not_exposure(records: tuple[Path, Path]) -> None:
    """Not compared, so not tokens at risk: counted in, they pulled the hazard down by traffic
    whose texts were never compared."""
    for study in (load(list(records))[0], build_study([read_run(p) for p in records])):
        (pair,) = study.pairs
        assert pair.noncomparable == ITEMS // 50
        assert len(pair.times) == pair.total  # one survival time per compared item, none per sampled one


def _seen(d: Divergence) -> tuple[object, ...]:
    """What a divergence says (its items differ between the reads: a lean item has no input)."""
    return (d.item_id, d.char_index, d.token, d.prefix_tail, d.a_next, d.b_next, d.a_tokens, d.b_tokens)


def _without_lines(path: Path, every: int) -> None:
    """Drop every ``every``-th item line: requests that side never answered (missing items)."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([lines[0], *(line for n, line in enumerate(lines[1:]) if n % every != 5)]))


def test_a_lean_compare_reports_exactly_what_a_whole_read_reports(tmp_path: Path) -> None:
    """The whole report (Markdown and --json), not only the pair's counts: items that differ,
    engine errors, non-comparable items and items one side or the other never answered."""
    a, b = write_records(tmp_path, seed=11)
    _without_lines(b, 211)
    _without_lines(a, 307)
    lean, options = load([a, b])
    whole = build_study([read_run(p) for p in (a, b)])
    (lp,) = lean.pairs
    assert lp.missing > 0 and lp.errors > lp.missing and lp.noncomparable > 0 and lp.divergences
    lean_report, whole_report = build(lean, options), build(whole, options)
    assert render.summary(lean_report) == render.summary(whole_report)
    assert render.markdown(lean_report) == render.markdown(whole_report)


def test_a_side_written_in_another_order_pairs_the_same(tmp_path: Path) -> None:
    """The pairing walks a record's items in their own order where it is the suite's, and looks
    each id up otherwise: a candidate whose lines are in another order pairs item for item the
    same (counts, divergences, survival times) as one in the primary's order."""
    a, b = write_records(tmp_path, seed=5)
    lines = b.read_bytes().splitlines(keepends=True)
    body = lines[1:]
    random.Random(1).shuffle(body)
    shuffled = tmp_path / "shuffled" / b.name
    shuffled.parent.mkdir()
    shuffled.write_bytes(b"".join([lines[0], *body]))
    (walked,) = load([a, b])[0].pairs
    (looked_up,) = load([a, shuffled])[0].pairs
    assert list(walked.b_run.items) != list(looked_up.b_run.items)
    counts = ("identical", "total", "errors", "noncomparable", "missing", "times", "logprobs")
    assert [getattr(walked, k) for k in counts] == [getattr(looked_up, k) for k in counts]
    assert walked.divergences and [_seen(d) for d in walked.divergences] == [
        _seen(d) for d in looked_up.divergences
    ]


def test_speed_from_the_columns_read_with_the_items_equals_speed_from_the_items(
    records: tuple[Path, Path],
) -> None:
    lean, _ = load(list(records))
    whole = build_study([read_run(p) for p in records])
    assert all(
        r.columns is not None and len(r.columns) == len(r.items) for c in lean.configurations for r in c.runs
    )
    assert all(
        r.columns is None for c in whole.configurations for r in c.runs
    )  # computed from the items themselves
    rows = speed_rows(lean, 1)
    assert rows == speed_rows(whole, 1)
    assert speed_rows(lean, 0) == speed_rows(whole, 0)  # the columns are read once, then the items
    assert rows[1].latency and rows[1].warmup == 1 and rows[0].errors == 0 < rows[1].errors


def test_lean_items_drop_the_input_and_share_equal_texts(records: tuple[Path, Path]) -> None:
    study, _ = load(list(records))
    (pair,) = study.pairs
    a, b = pair.a_run.items, pair.b_run.items
    ids = list(a)
    # The first item is read whole (the report names the prompts' form from it); the rest lean.
    assert a[ids[0]].input == [{"role": "user", "content": "q0"}]
    assert all(a[i].input is None and b[i].input is None for i in ids[1:])
    assert all("path" not in a[i].metadata and "sent" not in a[i].metadata for i in ids[1:])
    assert a[ids[50]].metadata == {"comparable": False}
    # The texts' hashes are not read (compare reads the texts): the whole read has them.
    assert all(a[i].sha256 == "" == b[i].sha256 for i in ids[1:])
    assert all(a[i].finish_reason is None is b[i].finish_reason for i in ids[1:])
    whole = [read_run(p).items for p in records]
    same = [i for i in ids[1:] if whole[0][i].sha256 == whole[1][i].sha256]
    assert same and all(a[i].text is b[i].text for i in same)
    differ = [i for i in ids if whole[0][i].sha256 != whole[1][i].sha256]
    assert differ and all(a[i].text != b[i].text for i in differ)
    assert all(a[i].text == whole[0][i].text and b[i].text == whole[1][i].text for i in ids)


def test_reports_list_at_most_a_thousand_divergences_and_count_them_all(records: tuple[Path, Path]) -> None:
    study, options = load(list(records))
    (pair,) = study.pairs
    n = len(pair.divergences)
    assert n > 1000
    report = build(study, options)
    md = render.markdown(report)
    assert f"The first 1,000 of {n:,} divergences, in the records' order." in md
    assert f"The first 1,000 rows; the counts above are over all {n:,}." in md
    assert f"**{n} divergence(s):**" in md
    assert f"and {n - 50:,} more." in md
    assert md.count(f"| `{pair.divergences[999].item_id}` |") == 2
    assert f"`{pair.divergences[1000].item_id}`" not in md
    html = render.html(report)
    assert f"The first 1,000 of {n:,} divergences" in html


def test_an_export_of_shadow_records_holds_every_field(records: tuple[Path, Path], tmp_path: Path) -> None:
    """compare reads shadow records lean (no hash, no finish reason); an export writes every
    field of every item, so it reads them whole."""
    out = tmp_path / "items.csv"
    assert main(["export", *map(str, records), "--csv", str(out)]) == 0
    with out.open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    whole = {(r.label, i.id): i for r in map(read_run, records) for i in r.items.values()}
    assert len(table) == len(whole) == 2 * ITEMS
    for row in table:
        item = whole[(row["label"], row["item_id"])]
        assert (row["sha256"], row["finish_reason"]) == (item.sha256, item.finish_reason or "")
    assert {row["finish_reason"] for row in table} == {"stop", ""}  # "": the candidate's errors


def test_divergences_without_a_token_position_give_no_hazard(records: tuple[Path, Path]) -> None:
    """The proxy never asks the primary for logprobs, so a shadow divergence has no token
    position. A rate that left those items out but counted the identical items' tokens read
    "no divergence" where 45 % of the items diverged: the report gives no rate and says why."""
    study, options = load(list(records))
    report = build(study, options)
    (c,) = report.pairs
    n = len(c.divergences)
    assert n > 1000 and c.unlocated == n
    assert c.hazard is None and c.times == ()
    md = render.markdown(report)
    why = f"{n:,} of {n:,} divergences cannot be placed at a token"
    assert f"No hazard or survival curve for `primary` vs `candidate` (shadow-0001): {why}" in md
    assert f"**Hazard:** not given: {why}" in md
    assert "no divergence in" not in md and "No survival curve: no pair" not in md
    assert render.summary(report)["pairs"][0]["unlocated"] == n


def test_the_hazard_counts_identical_items_only_when_every_divergence_is_placed() -> None:
    times = [(9, False), (4, True), None, (9, False)]  # None: an identical item without a count
    hazard, left_out = pair_hazard(times)
    assert hazard is not None and (hazard.events, hazard.exposure, left_out) == (1, 22, 1)
    assert pair_hazard(times, 1) == (None, 1)  # a divergence with no position: no rate at all


def test_a_lean_divergence_makes_its_items_when_read(records: tuple[Path, Path]) -> None:
    """A lean read's divergence holds its place in the two reads; its items are made when read.
    A report's views make them and let them go: kept for all of a million-item compare's
    300,000 divergences, they were 0.13 GB."""
    study, options = load(list(records))
    (pair,) = study.pairs
    assert all(d.items is None and d.source is not None for d in pair.divergences)
    report = build(study, options)
    render.markdown(report)
    render.summary_json(report)
    assert all(d.items is None for d in pair.divergences)
    first = pair.divergences[0]
    assert first.a is first.a and first.items == (first.a, first.b)  # made once when read, then kept
    whole = build_study([read_run(p) for p in records]).pairs[0]
    assert [_seen(d) for d in pair.divergences] == [_seen(d) for d in whole.divergences]


def test_divergences_placed_when_recorded_compare_and_report_as_a_whole_read(tmp_path: Path) -> None:
    """Answers the replay retokenized carry where they part ("first_token"): the lean read
    places those divergences from it without reading the token ids, at the token the whole
    read finds from the ids, and the two reports are the same. The hazard is not given while
    some divergences have no token position."""
    a, b = write_records(tmp_path, seed=13, placed=2)
    lean, options = load([a, b])
    whole = build_study([read_run(p) for p in (a, b)])
    (lp,), (wp,) = lean.pairs, whole.pairs
    placed = [d for d in lp.divergences if d.token.index is not None]
    assert placed and len(placed) < len(lp.divergences)
    assert [d.token for d in lp.divergences] == [d.token for d in wp.divergences]
    assert lp.times == wp.times
    lean_report, whole_report = build(lean, options), build(whole, options)
    assert render.markdown(lean_report) == render.markdown(whole_report)
    assert render.summary(lean_report) == render.summary(whole_report)
    (c,) = lean_report.pairs
    assert c.hazard is None and c.unlocated == len(lp.divergences) - len(placed)


def test_a_shadow_pair_placed_throughout_has_a_hazard(tmp_path: Path) -> None:
    """Every divergence placed: the hazard counts each, and the Markdown gives its rate."""
    a, b = write_records(tmp_path, seed=17, placed=1)
    study, options = load([a, b])
    (pair,) = study.pairs
    assert pair.divergences and all(d.token.index is not None for d in pair.divergences)
    report = build(study, options)
    (c,) = report.pairs
    assert c.unlocated == 0 and c.hazard is not None and c.hazard.events == len(pair.divergences)
    assert "No hazard or survival curve" not in render.markdown(report)
