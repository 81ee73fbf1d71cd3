"""A shadow segment's two records read in halves (``servediff.records.halves``) read as the ordinary
lean reads do: the same items (texts read back from the records), columns and report; what the
fast path does not take (blank, bad or cut lines, ids out of order or twice, a failed child) is
left to the ordinary read, which says what is wrong as it always did; no child outlives it.

The records are the shadow proxy's own (tests/test_record_blocks.py writes them); the size from
which a pair is read in halves is lowered to 0 so that these small files are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.compare.loader import load
from servediff.records import Reading, ReadOptions, RecordError, Run, halves, read_run, worker
from servediff.records.lean import LeanItems
from servediff.report import render
from servediff.report.assembly import build
from tests.helpers.children import children as running
from tests.test_readahead import same
from tests.test_record_blocks import ITEMS, edit, lean_pair, seen, write


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write(tmp_path_factory.mktemp("halves"))


# Every pair read in halves, however small; and every pair read the ordinary way.
HALVES = ReadOptions(halves_bytes=0)
ORDINARY = ReadOptions(halves_bytes=None)


def children() -> list[int]:
    """This process's children reading a record, still running."""
    return running(b"servediff.records.halves")


def read_pair(a: Path, b: Path, options: ReadOptions = HALVES) -> tuple[Run, Run] | None:
    """The two records read in halves, or None where the fast path did not take them."""
    with Reading([a, b], options) as reading:
        assert reading.halves == [(a, b)], "the pair was not begun in halves"
        ((pair),) = reading.begun.values()
        return pair.finish()


def in_halves(a: Path, b: Path, options: ReadOptions = HALVES) -> tuple[Run, Run]:
    got = read_pair(a, b, options)
    assert got is not None, "the pair was not read in halves"
    return got


def pairs(paths: list[Path]) -> list[tuple[Path, Path]]:
    with Reading(paths, HALVES) as reading:
        return reading.halves


@pytest.mark.parametrize(("share", "size"), [(0.5, 1 << 20), (0.1, 700), (0.9, 4096), (0.5, 64)])
def test_a_pair_read_in_halves_reads_as_the_ordinary_read(
    records: tuple[Path, Path], share: float, size: int
) -> None:
    # Blocks of a few hundred bytes on both sides, cut in other places: the two records are
    # matched across blocks that do not line up, and where each process's half starts.
    got = in_halves(*records, ReadOptions(halves_bytes=0, halves_share=share, block_bytes=size))
    for run, here in zip(got, lean_pair(records)):
        same(run, here)
        assert run.header == here.header  # the suite: the items as recorded
    a, b = got
    assert isinstance(a.items, LeanItems) and isinstance(b.items, LeanItems)
    # The texts are let go where both sides' items are plain, and read back when an item is made.
    assert sum(t is None for t in a.items.texts) > ITEMS // 2
    assert list(a.items.differing(b.items)) == [
        k for k, i in enumerate(a.items) if a.items[i].text != b.items[i].text
    ]
    assert all(a.items[i].id is b.items[i].id for i in a.items)
    kept = b.items.extras.values()
    assert any(item.tokens for item in kept) and any(item.error for item in kept)
    assert children() == []


def test_compare_reads_a_pair_in_halves_and_reports_the_same(
    records: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[tuple[Path, Path]] = []
    finish = halves.Begun.finish

    def counted(self: halves.Begun) -> tuple[Run, Run] | None:
        got = finish(self)
        assert got is not None, "the pair was not read in halves"
        read.append((got[0].path, got[1].path))
        return got

    monkeypatch.setattr(halves.Begun, "finish", counted)
    study, options = load(list(records), reading=HALVES)
    md = render.markdown(build(study, options))
    assert read == [records] and children() == []
    # As the command does it: the children started first, the read finished by the loader.
    begun = Reading(list(records), HALVES)
    assert len(begun.begun) == 1 and len(children()) == 1
    study, options = load(begun)
    assert render.markdown(build(study, options)) == md
    assert read == [records, records] and children() == []
    assert Reading(list(records), ORDINARY).halves == []
    study, options = load(list(records), reading=ORDINARY)
    assert render.markdown(build(study, options)) == md
    assert len(read) == 2


def test_only_a_segment_given_as_two_records_is_read_in_halves(
    records: tuple[Path, Path], tmp_path: Path
) -> None:
    third = tmp_path / "again.jsonl"
    third.write_bytes(records[1].read_bytes())
    assert pairs([records[0], records[1]]) == [records]
    assert pairs([records[1], tmp_path / "missing.jsonl", records[0]]) == [(records[1], records[0])]
    assert pairs([records[0], records[1], third]) == []  # which two would pair is the study's
    assert pairs([records[0], records[0]]) == []


def test_what_the_fast_path_does_not_take_is_read_the_ordinary_way(
    records: tuple[Path, Path], tmp_path: Path
) -> None:
    data = records[1].read_bytes()
    lines = data.splitlines(keepends=True)
    cases = {
        "blank": edit(records[1], tmp_path / "blank.jsonl", {150: b"   \n"}),
        "blank first": edit(records[1], tmp_path / "blank1.jsonl", {1: b"\n"}),
        "cut": tmp_path / "cut.jsonl",
        "unterminated": tmp_path / "unterminated.jsonl",
        "twice": tmp_path / "twice.jsonl",
        "swapped": edit(records[1], tmp_path / "swapped.jsonl", {300: lines[301], 301: lines[300]}),
        "one less": tmp_path / "one less.jsonl",
    }
    cases["cut"].write_bytes(data[:-25])
    cases["unterminated"].write_bytes(data[:-1])
    cases["twice"].write_bytes(b"".join([*lines[:300], lines[40], *lines[300:-1]]))
    cases["one less"].write_bytes(b"".join(lines[:-1]))
    for name, path in cases.items():
        for share in (0.2, 0.8):  # the case in this process's half, or in the child's
            assert read_pair(records[0], path, ReadOptions(halves_bytes=0, halves_share=share)) is None, name
        study, options = load([records[0], path], reading=HALVES)
        ordinary, ordinary_options = load([records[0], path], reading=ORDINARY)
        md = render.markdown(build(study, options))
        assert md == render.markdown(build(ordinary, ordinary_options)), name
    assert children() == []


def test_a_bad_line_is_named_by_the_ordinary_read(records: tuple[Path, Path], tmp_path: Path) -> None:
    lines = records[1].read_bytes().splitlines(keepends=True)
    cases = {
        "bad field": {250: lines[250].replace(b'"latency_s": ', b'"latency_s": "slow", "x": ')},
        "not JSON": {333: b'{"id": "x", "text": \n'},
        "not UTF-8 in the input": {90: lines[90].replace(b'"content": "', b'"content": "\xc3(')},
        "first item": {1: b'{"id": 3}\n'},
    }
    for name, change in cases.items():
        path = edit(records[1], tmp_path / f"{name}.jsonl", change)
        with pytest.raises(RecordError) as read:
            load([records[0], path], reading=HALVES)
        assert f"{path}:{min(change) + 1}:" in str(read.value), name
    assert children() == []


def test_a_child_that_did_not_finish_leaves_the_pair_to_the_ordinary_read(
    records: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    start = halves._Child.start

    def killed(*args: object) -> halves._Child | None:
        child = start(*args)  # type: ignore[arg-type]
        assert child is not None
        os.kill(child.pid, 9)  # killed before or while it read: its half is not used
        return child

    monkeypatch.setattr(halves._Child, "start", staticmethod(killed))
    assert read_pair(*records) is None
    assert children() == []


def test_a_stopped_child_leaves_the_pair_to_the_ordinary_read_within_its_bound(
    records: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: compare waited on a SIGSTOPped child forever (``wait()`` with no timeout)."""
    start = halves._Child.start

    def stopped(*args: object) -> halves._Child | None:
        child = start(*args)  # type: ignore[arg-type]
        assert child is not None
        os.kill(child.pid, signal.SIGSTOP)  # neither dead nor finishing
        return child

    monkeypatch.setattr(halves._Child, "start", staticmethod(stopped))
    t0 = time.monotonic()
    # the caller reads the pair the ordinary way
    assert read_pair(*records, ReadOptions(halves_bytes=0, patience_s=1.0)) is None
    assert time.monotonic() - t0 < 30
    assert children() == []  # and the stopped child was ended


def test_a_record_changed_after_it_was_read_is_an_error_not_another_text(
    records: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = (tmp_path / p.name for p in records)
    for src, dst in zip(records, (a, b)):
        dst.write_bytes(src.read_bytes())
    _, got = in_halves(a, b)
    assert isinstance(got.items, LeanItems)
    plain = next(i for i, t in enumerate(got.items.texts) if t is None)
    lines = b.read_bytes().splitlines(keepends=True)
    b.write_bytes(b"".join([lines[0], *lines[2:]]))  # every item line moved up one
    with pytest.raises(RecordError, match="changed while compare read it"):
        got.items.item(plain)


def test_a_child_whose_reader_is_gone_stops_without_its_end(records: tuple[Path, Path]) -> None:
    sizes = [p.stat().st_size for p in records]
    split = [len(p.read_bytes().split(b"\n", 1)[0]) + 1 for p in records]  # all items, from the first
    spans = (split[0], sizes[0], split[1], sizes[1], 1 << 20)
    for parent, code in ((os.getpid(), 0), (1, 1)):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "servediff.records.halves",
                *map(str, records),
                *map(str, (*spans, parent)),
            ],
            capture_output=True,
            check=False,
        )
        assert out.returncode == code
        assert out.stdout.endswith(worker.END) == (code == 0)


@pytest.mark.parametrize("size", (700, 1 << 20))
def test_times_recorded_from_midway_read_as_the_whole_read(
    records: tuple[Path, Path], tmp_path: Path, size: int
) -> None:
    # A time no item has before some line (TTFT here, from the 300th, as when streaming was
    # turned on mid-session) is no memory up to there: the items and columns read the same.
    options = ReadOptions(halves_bytes=0, block_bytes=size)
    lines = records[1].read_bytes().splitlines(keepends=True)
    later = {
        n: lines[n].replace(b'"latency_s": ', b'"ttft_s": 0.0625, "latency_s": ')
        for n in range(300, ITEMS + 1)
    }
    assert all(later[n] != lines[n] for n in later)
    path = edit(records[1], tmp_path / "ttft.jsonl", later)
    whole = read_run(path)
    for run in (lean_pair((records[0], path), options)[1], in_halves(records[0], path, options)[1]):
        assert [seen(i) for i in run.items.values()] == [seen(i) for i in whole.items.values()]
        assert run.columns is not None
        ttft = run.columns.array("ttft")
        assert len(ttft) == ITEMS and ttft[299:].tolist() == [0.0625] * (ITEMS - 299)
        assert all(t != t for t in ttft[:299].tolist())  # NaN before


def test_the_compare_command_begins_the_halves_first_and_leaves_no_child(
    records: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from servediff.cli import main
    from servediff.commands import compare as compare_command

    finished: list[bool] = []
    finish = halves.Begun.finish

    def counted(self: halves.Begun) -> tuple[Run, Run] | None:
        got = finish(self)
        finished.append(got is not None)
        return got

    monkeypatch.setattr(halves.Begun, "finish", counted)
    monkeypatch.setattr(compare_command, "READ_OPTIONS", HALVES)
    assert main(["compare", *map(str, records), "--md", str(tmp_path / "halves.md")]) == 0
    assert finished == [True] and children() == []
    capsys.readouterr()
    # A third file the ordinary read refuses, after the children started: an error, no child left.
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a record\n")
    assert main(["compare", *map(str, records), str(bad)]) == 2
    assert f"{bad}:1: first line is not JSON" in capsys.readouterr().err
    assert children() == []
    monkeypatch.setattr(compare_command, "READ_OPTIONS", ORDINARY)
    assert main(["compare", *map(str, records), "--md", str(tmp_path / "ordinary.md")]) == 0
    assert (tmp_path / "halves.md").read_text() == (tmp_path / "ordinary.md").read_text()


def test_explanations_made_when_read_are_those_made_at_once(records: tuple[Path, Path]) -> None:
    from collections import Counter

    from servediff.compare.mechanism import Explanations, explain, measure_pair, unplaced
    from servediff.compare.study import compare_runs

    for a, b in (in_halves(*records), lean_pair(records)):
        pair = compare_runs(a, b, "pair")
        m = measure_pair(pair)
        assert isinstance(m.explanations, Explanations)
        at_once = [
            unplaced(d.token) if d.token.index is None else explain(d.token, d.made(), {})
            for d in pair.divergences
        ]
        assert len(at_once) > ITEMS // 10 and any(d.token.index is None for d in pair.divergences)
        assert m.explanations.measured(), "no divergence of items kept whole: half the case untested"
        assert list(m.explanations) == at_once
        assert [m.explanations[k] for k in range(-3, 3)] == at_once[-3:] + at_once[:3]
        assert m.explanations[2:7] == at_once[2:7]
        assert m.explanations.classes() == Counter(e.cls for e in at_once)
        assert all(e.a is None and e.b is None for e in at_once if e not in m.explanations.measured())
