"""A lean (shadow) record read in blocks, each block decoded as one JSON array: the same items,
columns, cut lines and errors as the ordinary line-by-line read of the same file.

The records are written by the shadow proxy's own recorder; the block size is made small so that
every case (a block of one line, a line longer than a block, a block that ends mid-file) is met
by a few hundred lines.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from servediff.records import LEAN, Item, ReadOptions, RecordError, Run, read_run
from servediff.records.columns import FIELDS, Columns
from servediff.records.lean import LeanItems
from servediff.types import Completion
from tests.helpers.records import write_shadow

ITEMS = 400
BLOCKS = (64, 700, 4096, 1 << 20)  # bytes: under a line, a few lines, many, the whole file


def write(out: Path, seed: int = 7) -> tuple[Path, Path]:
    """Chat requests answered alike or not, some sampled without a seed, some failed, some with
    the engine's timings, some texts beyond ASCII, one request sent twice (``#2``)."""
    rng = random.Random(seed)

    def requests() -> Iterator[tuple[dict[str, Any], Completion, Completion]]:
        for i in range(ITEMS):
            temperature = 0.7 if i % 37 == 0 else 0
            content = "q3" if i == 200 else f"q{i}"  # the 200th is the 3rd request again
            body = {
                "model": "m",
                "temperature": temperature,
                "messages": [{"role": "user", "content": content}],
            }
            text = " ".join(rng.choices(["a", "bé", "c€", "d", "\u2028", '"q"', "\\"], k=rng.randint(0, 40)))
            other = text if rng.random() < 0.6 else text + " then"
            timings = {"predicted_n": 9, "predicted_ms": 30.5} if i % 5 == 0 else None
            n_tokens = rng.choice([None, 9])
            primary = Completion(
                "", text=text, finish_reason="stop", latency_s=0.1 + rng.random(), n_tokens=n_tokens
            )
            # Some answers carry the candidate's token texts (--candidate-top-logprobs records them).
            tokens = other.split(" ") if i % 7 == 3 else None
            candidate = Completion(
                "",
                text=other,
                finish_reason="length",
                latency_s=0.2,
                n_tokens=9,
                engine_timings=timings,
                tokens=tokens,
                token_source="engine" if tokens else None,
            )
            if i % 41 == 2:
                candidate = Completion("", text="", latency_s=0.1, error="HTTP 500")
            elif other != text and i % 3 == 0:  # retokenized by the replay, as it does answers that differ
                primary.token_ids, candidate.token_ids = _ids(text), _ids(other)
                primary.token_source = candidate.token_source = "retokenized"
            yield body, primary, candidate

    return write_shadow(out, requests())


def _ids(text: str) -> list[int]:
    """Token ids as a tokenizer might give them: one per word, a word's id its hash."""
    return [1000 + sum(map(ord, w)) % 5000 for w in text.split(" ")]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write(tmp_path_factory.mktemp("blocks"))


def seen(item: Item) -> tuple[object, ...]:
    """What a lean item keeps: every field but the input, the text's hash, the finish reason and
    the token ids with their source, and the metadata compare reads."""
    fields = msgspec.structs.asdict(item)
    keep = {
        k: v
        for k, v in item.metadata.items()
        if k in ("comparable", "engine", "engine_timings", "first_token")
    }
    skipped = ("input", "sha256", "finish_reason", "token_ids", "token_source", "metadata")
    return (*(v for k, v in fields.items() if k not in skipped), keep)


def lean_pair(paths: tuple[Path, Path], options: ReadOptions = LEAN) -> tuple[Run, Run]:
    a = read_run(paths[0], options)
    return a, read_run(paths[1], options, beside=[a])


@pytest.mark.parametrize("size", BLOCKS)
def test_blocks_read_the_same_items_and_columns_as_lines(records: tuple[Path, Path], size: int) -> None:
    options = ReadOptions(block_bytes=size)
    lean = lean_pair(records, options)
    for run, path in zip(lean, records):
        whole = read_run(path)
        assert list(run.items) == list(whole.items)  # the request sent twice: its own id (#2)
        assert [seen(i) for i in run.items.values()] == [seen(i) for i in whole.items.values()]
        assert (run.end, run.torn, run.unterminated) == (whole.end, whole.torn, whole.unterminated)
        by_line = Columns()
        for item in whole.items.values():
            by_line.add(item)
        assert run.columns is not None and len(run.columns) == len(by_line) == ITEMS
        for name in FIELDS:
            got, want = run.columns.array(name).tolist(), by_line.array(name).tolist()
            assert got == pytest.approx(want, nan_ok=True)
    a, b = lean
    assert sum(a.items[i].text is b.items[i].text for i in a.items) > ITEMS // 2  # equal texts shared
    assert all(a.items[i] is not b.items[i] and a.items[i].id is b.items[i].id for i in a.items)


def edit(path: Path, out: Path, change: dict[int, bytes]) -> Path:
    """A copy of the record with some item lines (1 = the first after the header) replaced."""
    lines = path.read_bytes().splitlines(keepends=True)
    for n, line in change.items():
        lines[n] = line
    out.write_bytes(b"".join(lines))
    return out


@pytest.mark.parametrize("size", BLOCKS)
def test_blank_lines_a_cut_last_line_and_no_last_newline_read_as_line_by_line(
    records: tuple[Path, Path], tmp_path: Path, size: int
) -> None:
    options = ReadOptions(block_bytes=size)
    data = records[0].read_bytes()
    cases = {
        "blank": edit(records[0], tmp_path / "blank.jsonl", {1: b"\n", 150: b"   \n"}),
        "cut": tmp_path / "cut.jsonl",
        "unterminated": tmp_path / "unterminated.jsonl",
    }
    cases["cut"].write_bytes(data[:-25])
    cases["unterminated"].write_bytes(data[:-1])
    for path in cases.values():
        lean, whole = read_run(path, options=options), read_run(path)
        assert [seen(i) for i in lean.items.values()] == [seen(i) for i in whole.items.values()]
        assert (lean.end, lean.torn, lean.unterminated) == (whole.end, whole.torn, whole.unterminated)
    assert read_run(cases["cut"], options=options).torn == ITEMS + 1
    assert len(read_run(cases["blank"], options=options).items) == ITEMS - 2


@pytest.mark.parametrize("size", BLOCKS)
def test_a_bad_line_in_a_block_is_named_as_line_by_line(
    records: tuple[Path, Path], tmp_path: Path, size: int
) -> None:
    options = ReadOptions(block_bytes=size)
    lines = records[0].read_bytes().splitlines(keepends=True)
    two = lines[300].rstrip(b"\n") + b", " + lines[301]  # two objects on one line: not one item
    cases = {
        "two objects": {300: two},
        "bad field": {250: lines[250].replace(b'"latency_s": ', b'"latency_s": "slow", "x": ')},
        "not JSON": {333: b'{"id": "x", "text": \n'},
        "not UTF-8": {120: lines[120].replace(b'"text": "', b'"text": "\xff')},
        # In fields the lean decoder skips (the input, the hash, the finish reason, metadata
        # compare does not read): refused all the same, as the whole read refuses them.
        "not UTF-8 in the input": {90: lines[90].replace(b'"content": "', b'"content": "\xc3(')},
        "not UTF-8 in the hash": {91: lines[91].replace(b'"sha256": "', b'"sha256": "\xe2\x82')},
        "not UTF-8 in the finish reason": {
            92: lines[92].replace(b'"finish_reason": "', b'"finish_reason": "\xff')
        },
        "not UTF-8 in the parameters sent": {93: lines[93].replace(b'"sent": {', b'"sent": {"\xfe": 1, ')},
    }
    assert all(b"\n" in line for c in cases.values() for line in c.values())
    assert all(c[n] != lines[n] for c in cases.values() for n in c)  # each edit took
    for name, change in cases.items():
        path = edit(records[0], tmp_path / f"{name}.jsonl", change)
        with pytest.raises(RecordError) as whole:
            read_run(path)
        with pytest.raises(RecordError) as lean:
            read_run(path, options=options)
        assert str(lean.value) == str(whole.value), name
        assert f"{path}:{min(change) + 1}:" in str(lean.value), name


def test_an_id_read_twice_keeps_its_last_line_at_its_first_place(
    records: tuple[Path, Path], tmp_path: Path
) -> None:
    """A lean read keeps items as columns only while each id is read once; an id twice (a
    record appended to by hand, say) gives the whole read's items: the last line wins."""
    lines = records[0].read_bytes().splitlines(keepends=True)
    again = lines[40].replace(b'"latency_s": ', b'"latency_s": 9')  # the same id, another answer
    path = tmp_path / "twice.jsonl"
    path.write_bytes(b"".join([*lines[:300], again, *lines[300:]]))
    lean, whole = read_run(path, options=ReadOptions()), read_run(path)
    assert isinstance(lean.items, dict) and len(lean.items) == ITEMS
    assert list(lean.items) == list(whole.items)
    assert [seen(i) for i in lean.items.values()] == [seen(i) for i in whole.items.values()]
    twice = json.loads(lines[40])["id"]
    assert lean.items[twice].latency_s == whole.items[twice].latency_s >= 9
    assert lean.columns is not None and len(lean.columns) == ITEMS + 1  # a row per line, as read


def test_lean_items_read_as_a_mapping_of_the_whole_reads_items(records: tuple[Path, Path]) -> None:
    a, b = lean_pair(records)
    for run, path in zip((a, b), records):
        whole = read_run(path).items
        assert isinstance(run.items, LeanItems)
        assert len(run.items) == len(whole) and list(run.items.keys()) == list(whole)
        ids = list(whole)
        for item_id in (ids[0], ids[1], ids[150], ids[-1]):
            assert item_id in run.items and seen(run.items[item_id]) == seen(whole[item_id])
        assert "no such id" not in run.items and run.items.get("no such id") is None
        assert [seen(i) for i in run.items.values()] == [seen(i) for i in whole.values()]
        assert {k: seen(v) for k, v in run.items.items()} == {k: seen(v) for k, v in whole.items()}
    assert (
        isinstance(a.items, LeanItems)
        and a.items.placed
        and isinstance(b.items, LeanItems)
        and b.items.placed
    )
    kept = b.items.extras
    assert any(item.tokens for item in kept.values())  # token data is kept whole
    assert any(item.error for item in kept.values()) and any(item.metadata for item in kept.values())
