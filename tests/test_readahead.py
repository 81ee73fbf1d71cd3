"""A shadow record parsed ahead by a child process (``servediff.records.ahead``) reads as it does
when read here: the same items, columns, shared texts, cut lines and errors; a child that failed
leaves the record to be read here; no child outlives its reader.

The records are the shadow proxy's own (tests/test_record_blocks.py writes them); the size from
which a child is started is lowered to 0 so that these small files get one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servediff.compare.loader import load
from servediff.records import ReadOptions, RecordError, Run, read_run, worker
from servediff.records.ahead import ReadAhead, Taken
from servediff.records.columns import FIELDS
from servediff.report import render
from servediff.report.assembly import build
from tests.helpers.children import children as running
from tests.test_record_blocks import ITEMS, edit, seen, write


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write(tmp_path_factory.mktemp("ahead"))


# Every record parsed ahead, however small.
AHEAD = ReadOptions(ahead_bytes=0)


def children() -> list[int]:
    """This process's children reading a record, still running."""
    return running(b"servediff.records.ahead")


def ahead_of(path: Path, blocks: bool = False) -> ReadAhead:
    """A child parsing ``path`` that finished cleanly (else the read would not use it, and a
    test comparing the two reads would compare a read with itself). ``blocks``: and decoded
    blocks, not only lines (a file whose one block holds a bad or blank line has none)."""
    ahead = start(path)
    frames = ahead.frames()
    assert frames is not None, "the read-ahead process did not finish cleanly"
    assert any(isinstance(frame, Taken) for frame in frames) or not blocks
    return ahead


def start(path: Path, block_bytes: int = AHEAD.block_bytes) -> ReadAhead:
    ahead = ReadAhead.start(path, path.stat().st_size, block_bytes)
    assert ahead is not None
    return ahead


def same(run: Run, here: Run) -> None:
    assert type(run.items) is type(here.items)
    assert list(run.items) == list(here.items)
    assert [seen(i) for i in run.items.values()] == [seen(i) for i in here.items.values()]
    assert (run.end, run.torn, run.unterminated) == (here.end, here.torn, here.unterminated)
    assert (run.columns is None) == (here.columns is None)
    if run.columns is not None and here.columns is not None:
        for name in FIELDS:
            got, want = run.columns.array(name).tolist(), here.columns.array(name).tolist()
            assert got == pytest.approx(want, nan_ok=True)


@pytest.mark.parametrize("size", (700, 1 << 20))
def test_a_candidate_read_ahead_reads_as_read_here(records: tuple[Path, Path], size: int) -> None:
    # The child reads with the default block size; this process's own read with ``size``:
    # the same items whatever the blocks.
    options = ReadOptions(block_bytes=size)
    a = read_run(records[0], options)
    with ahead_of(records[1], blocks=True) as ahead:
        b = read_run(records[1], options, beside=[a], ahead=ahead)
    here = read_run(records[1], options, beside=[a])
    same(b, here)
    assert isinstance(b.items, type(here.items))
    shared = [a.items[i].text is b.items[i].text for i in a.items]
    assert shared == [a.items[i].text is here.items[i].text for i in a.items]
    assert sum(shared) > ITEMS // 2  # the candidate's equal texts are the primary's
    assert all(a.items[i].id is b.items[i].id for i in a.items)
    kept = b.items.extras if hasattr(b.items, "extras") else {}
    assert any(item.tokens for item in kept.values()) and any(item.error for item in kept.values())


def test_blank_lines_cut_lines_and_an_id_twice_read_ahead_as_here(
    records: tuple[Path, Path], tmp_path: Path
) -> None:
    data = records[1].read_bytes()
    lines = data.splitlines(keepends=True)
    cases = {
        "blank": edit(records[1], tmp_path / "blank.jsonl", {1: b"\n", 150: b"   \n"}),
        "cut": tmp_path / "cut.jsonl",
        "unterminated": tmp_path / "unterminated.jsonl",
        "twice": tmp_path / "twice.jsonl",
    }
    cases["cut"].write_bytes(data[:-25])
    cases["unterminated"].write_bytes(data[:-1])
    cases["twice"].write_bytes(
        b"".join([*lines[:300], lines[40].replace(b'"latency_s": ', b'"latency_s": 9'), *lines[300:]])
    )
    a = read_run(records[0], AHEAD)
    for name, path in cases.items():
        with ahead_of(path) as ahead:
            got = read_run(path, AHEAD, beside=[a], ahead=ahead)
        same(got, read_run(path, AHEAD, beside=[a]))
        assert (got.torn == ITEMS + 1) == (name == "cut"), name
    with ahead_of(cases["twice"]) as ahead:
        assert isinstance(read_run(cases["twice"], AHEAD, ahead=ahead).items, dict)


def test_a_bad_line_read_ahead_is_named_as_here(records: tuple[Path, Path], tmp_path: Path) -> None:
    lines = records[1].read_bytes().splitlines(keepends=True)
    cases = {
        "bad field": {250: lines[250].replace(b'"latency_s": ', b'"latency_s": "slow", "x": ')},
        "not JSON": {333: b'{"id": "x", "text": \n'},
        "not UTF-8 in the input": {90: lines[90].replace(b'"content": "', b'"content": "\xc3(')},
        "first item": {1: b'{"id": 3}\n'},
    }
    for name, change in cases.items():
        path = edit(records[1], tmp_path / f"{name}.jsonl", change)
        with pytest.raises(RecordError) as here:
            read_run(path, AHEAD)
        with ahead_of(path) as ahead, pytest.raises(RecordError) as read:
            read_run(path, AHEAD, ahead=ahead)
        assert str(read.value) == str(here.value), name
        assert f"{path}:{min(change) + 1}:" in str(read.value), name


def test_a_child_that_did_not_finish_leaves_the_record_to_be_read_here(records: tuple[Path, Path]) -> None:
    ahead = start(records[1])
    os.kill(ahead.pid, 9)  # killed before or while it parsed: its frames are not used
    assert ahead.frames() is None
    b = read_run(records[1], AHEAD, ahead=ahead)
    ahead.close()
    same(b, read_run(records[1], AHEAD))
    assert children() == []


def test_compare_reads_ahead_and_reports_the_same(
    records: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Path] = []
    start = ReadAhead.start

    def counted(path: Path, size: int, block_bytes: int) -> ReadAhead | None:
        started.append(path)
        return start(path, size, block_bytes)

    monkeypatch.setattr(ReadAhead, "start", staticmethod(counted))
    study, options = load(list(records), reading=AHEAD)
    md = render.markdown(build(study, options))
    assert started == [records[1]] and children() == []
    study, options = load(list(records), reading=ReadOptions(ahead_bytes=None))
    assert render.markdown(build(study, options)) == md


def test_no_child_outlives_a_failed_read_or_its_reader(records: tuple[Path, Path], tmp_path: Path) -> None:
    bad = edit(records[0], tmp_path / "bad.jsonl", {5: b"not json\n"})
    with pytest.raises(RecordError):
        load([bad, records[1]], reading=AHEAD)  # the candidate's child is ended with the failed read
    assert children() == []
    # A reader gone while its child parses (killed, say): the child's parent is then another
    # process, which it checks between blocks, and it stops without its end mark.
    for parent, code in ((os.getpid(), 0), (1, 1)):
        out = subprocess.run(
            [sys.executable, "-m", "servediff.records.ahead", str(records[1]), str(1 << 20), str(parent)],
            capture_output=True,
            check=False,
        )
        assert out.returncode == code
        assert out.stdout.endswith(worker.END) == (code == 0)
