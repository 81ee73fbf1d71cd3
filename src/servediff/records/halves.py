"""A shadow segment's two records read at once in two halves: this process the first half of
each, a child process the second.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # 2 × 1,000,000 items

The proxy writes a request's two answers one after the other, so the two records of a segment
hold the same ids in the same order (``shadow.recorder``). Read one after the other, at a
million items a side, each was seconds of JSON decoding on one core, and every text of the first
was kept until the second was read to compare with it. Here each process reads its half of both
records in step, block by block, the same way a lean read decodes a block (``blocks``), and
compares the two texts of each id as soon as both are decoded: the texts are then let go,
except where an item is kept whole on either side. A text left out is read back from its record
when an item is made (``LeanItems.text_at``: the report reads a sample of the divergent ones).
The child writes its half's columns as one frame (``worker``).

This is a fast path only. Anything it does not take as it is (a blank, bad or cut line, ids
not the same on both sides, an id twice, the child failing) leaves the pair to the ordinary
read (``reader.read_run``), which reads the same and says what is wrong where something is;
what the two reads give is the same (``tests/test_halves.py``).
"""

from __future__ import annotations

import gc
import mmap
import os
import sys
import time
from array import array
from collections.abc import Iterator
from itertools import compress
from operator import ne
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec

from servediff.records.blocks import LineBlocks, decode_block
from servediff.records.lean import Block, LeanItems, block_of, put_times
from servediff.records.options import ReadOptions
from servediff.records.placed import Placed
from servediff.records.reader import Run, open_run, share_tokens, with_items_as_suite
from servediff.records.schema import SCHEMA, Header, Item, RecordError, lean_item, lean_line, whole_item
from servediff.records.text_at import TextAt
from servediff.records.worker import Child, Frames, exit_if_orphaned

_WINDOW = 64 << 20  # how far from where it is expected the second half's first id is looked for


class Irregular(Exception):
    """Something the fast path does not take: the ordinary read reads the pair."""


class Side(msgspec.Struct, array_like=True, gc=False):
    """One record's items in a half, as columns: its block's ids empty for the second record
    (they are the first's) and its texts empty (``texts``: the texts kept, by position), and
    where each item's line starts in the file."""

    block: Block
    texts: list[tuple[int, str]]
    offsets: bytes  # int64 each


class Half(msgspec.Struct, array_like=True, gc=False):
    """Both records' items in a half, and the positions in it where their texts differ."""

    a: Side
    b: Side
    differ: list[int]


class Begun:
    """A pair's read in halves under way: the child reading the second half started (``begin``),
    this process's half not yet read (``finish``)."""

    def __init__(
        self,
        runs: tuple[Run, Run],
        files: tuple[IO[bytes], IO[bytes]],
        sizes: tuple[int, int],
        split: tuple[int, int],
        child: _Child,
        options: ReadOptions,
    ) -> None:
        self.runs, self.files, self.sizes, self.split, self.child = runs, files, sizes, split, child
        self.options = options

    def finish(self) -> tuple[Run, Run] | None:
        """The two runs, or None where the fast path does not take them (the caller reads them
        the ordinary way). Closes what ``begin`` opened, either way."""
        try:
            (fa, fb), (ra, rb), split = self.files, self.runs, self.split
            began = time.monotonic()
            spans = ((ra.end, split[0]), (rb.end, split[1]))
            try:
                own = read_half((fa, fb), spans, self.options.block_bytes)
            except Irregular:
                return None
            theirs = self.child.half(self._patience(time.monotonic() - began))
        finally:
            self.close()
        if theirs is None:
            return None
        return _assemble(self.runs, own, theirs, self.sizes)

    def _patience(self, own_s: float) -> float:
        """How long to wait for the child once this process has read its half in ``own_s``: the
        two halves are the same work, so several times that, and never less than
        ``options.patience_s`` (the child may have shared the core, or started late)."""
        return max(self.options.patience_s, 10 * own_s)

    def close(self) -> None:
        """End the child if it is still running; close the records."""
        self.child.close()
        for f in self.files:
            f.close()


def begin(paths: tuple[Path, Path], headers: tuple[Header, Header], options: ReadOptions) -> Begun | None:
    """A shadow segment's two records' read in halves (their headers read already), the child
    started; None where the fast path does not take them. ``options.halves_share``: the part of
    the items read here. The child starts reading while this process imports the analysis (``plan.Reading``),
    and this one then takes the child's half in: at a million items a side, half each finished
    within 0.1-0.2 s of one another."""
    path_a, path_b = paths
    try:
        fa = path_a.open("rb")
    except OSError:
        return None
    try:
        fb = path_b.open("rb")
    except OSError:
        fa.close()
        return None
    files = fa, fb
    sizes = os.fstat(fa.fileno()).st_size, os.fstat(fb.fileno()).st_size
    split = child = None
    try:
        runs = open_run(path_a, fa, headers[0]), open_run(path_b, fb, headers[1])
        if not (runs[0].unterminated or runs[1].unterminated):
            split = _split((fa, fb), (runs[0].end, runs[1].end), sizes, options.halves_share)
        if split is not None:
            child = _Child.start(paths, split, sizes, options.block_bytes)
    except RecordError:
        pass
    if split is None or child is None:
        fa.close()
        fb.close()
        return None
    return Begun(runs, files, sizes, split, child, options)


def _assemble(
    runs: tuple[Run, Run], own: _Pair, theirs: Half, sizes: tuple[int, int]
) -> tuple[Run, Run] | None:
    """The two runs from this process's half and the child's: this one's columns become the
    stores' (not copied), the child's are appended."""
    n = own.a.n
    ids = own.a.ids
    ids += theirs.a.block.ids
    if len(set(ids)) != len(ids):
        return None  # an id twice: the ordinary read keeps its last line
    stores = LeanItems(SCHEMA), LeanItems(SCHEMA)
    shared: dict[int, int] = {}
    for store, mine, side in zip(stores, (own.a, own.b), (theirs.a, theirs.b)):
        store.ids = ids  # one list for both: the same ids in the same order
        store.extend(mine.n_tokens, mine.times, mine.placed, mine.kept, mine.texts)
        store.extend(side.block.n_tokens, side.block.times, side.block.placed, side.block.kept, side.texts)
        mine.offsets.frombytes(side.offsets)
        for item in store.extras.values():
            if item.token_ids or item.tokens:
                share_tokens(item, shared)
    a, b = stores
    a.pair(b, own.differ + [n + k for k in theirs.differ])
    a.twinned = b.twinned = len(ids)
    for run, store, mine, size in zip(runs, stores, (own.a, own.b), sizes):
        store.text_at = TextAt(run.path, mine.offsets, ids, size)
        run.items, run.end = store, size
        with_items_as_suite(run)
    return runs


def read_half(
    files: tuple[IO[bytes], IO[bytes]],
    spans: tuple[tuple[int, int], tuple[int, int]],
    block_bytes: int,
    parent: int = 0,
) -> _Pair:
    """The items of each file in its byte range (``spans``), read in step. Here (no ``parent``)
    the ranges start at each record's first item, read whole as an ordinary read does; in the
    child, ``parent`` is the process it reads for (it stops when that is gone)."""
    sides = _Columns(keep_ids=True), _Columns(keep_ids=False)
    first = not parent
    reads = (
        _blocks(files[0], *spans[0], first, block_bytes),
        _blocks(files[1], *spans[1], first, block_bytes),
    )
    live = [True, True]
    done = 0
    differ: list[int] = []
    while live[0] or live[1]:
        k = 0 if (sides[0].n <= sides[1].n and live[0]) or not live[1] else 1
        got = next(reads[k], None)
        if got is None:
            live[k] = False
            continue
        if parent:
            exit_if_orphaned(parent)
        sides[k].add(*got)
        m = min(sides[0].n, sides[1].n)
        if m > done:
            differ += _match(sides[0], sides[1], done, m)
            done = m
    if sides[0].n != sides[1].n:
        raise Irregular("not as many items on both sides")
    return _Pair(sides[0], sides[1], differ)


def _match(a: _Columns, b: _Columns, start: int, stop: int) -> list[int]:
    """Where the texts of the items ``start:stop`` differ, both sides read that far; their ids
    and texts are then let go (the first side's ids kept), but the texts where an item is kept
    whole on either side."""
    ia, ta = a.pending(stop)
    ib, tb = b.pending(stop)
    if ia != ib:
        raise Irregular("the two records' ids are not in the same order")
    for k in sorted({*a.kept_at(stop), *b.kept_at(stop)}):
        a.texts.append((k, ta[k - start]))
        b.texts.append((k, tb[k - start]))
    return list(compress(range(start, stop), map(ne, ta, tb)))


class _Pair(NamedTuple):
    """A half as read: both records' columns, and where their texts differ."""

    a: _Columns
    b: _Columns
    differ: list[int]

    def half(self) -> Half:
        """As the child writes it."""
        return Half(self.a.side(), self.b.side(), self.differ)


class _Columns:
    """One record's items in a half as they are read: columns, and the ids and texts not yet
    compared with the other side's."""

    def __init__(self, keep_ids: bool) -> None:
        self.ids: list[str] = []  # kept for one side only: the two are the same
        self.n_tokens: list[int | None] = []
        self.times = [array("d") for _ in range(4)]  # latency, finished, TTFT, ITL
        self.placed = Placed()
        self.kept: list[tuple[int, Any]] = []
        self.offsets = array("q")
        self.texts: list[tuple[int, str]] = []  # (position, text) where kept
        self._keep_ids = keep_ids
        self._ids: list[str] = []  # the ids and texts of the items from ``_from`` on
        self._texts: list[str] = []
        self._from = 0
        self._kept_from = 0  # the first of ``kept`` not yet past a compare

    @property
    def n(self) -> int:
        """Items read so far."""
        return len(self.n_tokens)

    def add(self, block: Block, offsets: array[int]) -> None:
        at = self.n
        if self._keep_ids:
            self.ids += block.ids
        self._ids += block.ids
        self._texts += block.texts  # type: ignore[arg-type]  # a block read here holds each text
        self.n_tokens += block.n_tokens
        for column, values in zip(self.times, block.times):
            put_times(column, at, values)
        self.placed.add(at, block.placed)
        if block.kept:
            self.kept += [(at + k, v) for k, v in block.kept]
        self.offsets += offsets

    def pending(self, stop: int) -> tuple[list[str], list[str]]:
        """The ids and texts of the items up to ``stop`` not yet handed out, let go here."""
        cut = stop - self._from
        ids, texts = self._ids[:cut], self._texts[:cut]
        del self._ids[:cut], self._texts[:cut]
        self._from = stop
        return ids, texts

    def kept_at(self, stop: int) -> list[int]:
        """The positions of the items kept whole before ``stop`` not yet asked for."""
        out = []
        kept = self.kept
        while self._kept_from < len(kept) and kept[self._kept_from][0] < stop:
            out.append(kept[self._kept_from][0])
            self._kept_from += 1
        return out

    def side(self) -> Side:
        block = Block(
            ids=self.ids,
            texts=[],
            n_tokens=self.n_tokens,
            times=[t.tobytes() for t in self.times],
            placed=self.placed.firsts(),
            kept=self.kept,
        )
        return Side(block, self.texts, self.offsets.tobytes())


def _blocks(
    f: IO[bytes], start: int, stop: int, first: bool, block_bytes: int
) -> Iterator[tuple[Block, array[int]]]:
    """The item lines of ``f`` in ``start:stop``, as the columns of blocks of them (a lean
    read's, ``block_of``) and where each line starts. ``first``: the first line is the
    record's first item, read whole."""
    import numpy as np  # compare's, which has numpy loaded already

    f.seek(start)
    if first:
        line = f.readline()
        try:
            item: Item = whole_item(line)
        except msgspec.DecodeError:
            raise Irregular("the first item line") from None
        if not line.endswith(b"\n") or start + len(line) > stop:
            raise Irregular("the first item line")
        yield block_of([item], SCHEMA, plain=False), array("q", [start])
        start += len(line)
    blocks = LineBlocks(f, block_bytes, stop - start)
    buf, at = blocks.buf, start
    masks: list[Any] = []
    for cut in blocks:
        items = decode_block(buf, 0, cut, masks, SCHEMA.lean_decoder)
        if items is None:
            raise Irregular("a block that is not one item a line")
        # decode_block left the block's newlines in masks[0]: each line starts after one
        ends = np.flatnonzero(masks[0][:cut])
        starts = np.empty(len(ends), np.int64)
        starts[0] = at
        starts[1:] = ends[:-1] + (at + 1)
        offsets = array("q")
        offsets.frombytes(starts.tobytes())
        yield block_of(items, SCHEMA, plain=True), offsets
        at += cut
    if blocks.tail:
        raise Irregular("a last line without its newline")


def _split(
    files: tuple[IO[bytes], IO[bytes]], heads: tuple[int, int], sizes: tuple[int, int], share: float
) -> tuple[int, int] | None:
    """Where the child's half starts in each record: the line that starts after ``share`` of
    the first record's items, and the line of the same id in the second (looked for where the
    same share of its bytes ends). None where there is none."""
    (fa, fb), (ha, hb), (sa, sb) = files, heads, sizes
    fa.seek(ha + int((sa - ha) * share))
    fa.readline()  # the rest of the line the share ends in
    split_a = fa.tell()
    line = fa.readline()
    if not line.endswith(b"\n"):
        return None
    try:
        item_id = lean_line(line).id
    except msgspec.DecodeError:
        return None
    needle = msgspec.json.encode(item_id)  # as the id is written: quoted, escaped
    guess = hb + int((sb - hb) * (split_a - ha) / max(sa - ha, 1))
    with mmap.mmap(fb.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        lo, hi = max(hb, guess - _WINDOW), min(sb, guess + _WINDOW)
        at = mm.find(needle, lo, hi)
        while at >= 0:
            start = mm.rfind(b"\n", 0, at) + 1
            end = mm.find(b"\n", at)
            if start >= hb and end >= 0:
                try:
                    if lean_line(mm[start : end + 1]).id == item_id:
                        return split_a, start
                except msgspec.DecodeError:
                    pass
            at = mm.find(needle, at + 1, hi)
    return None


class _Child(Child):
    """The process reading the second half."""

    @classmethod
    def start(
        cls, paths: tuple[Path, Path], split: tuple[int, int], sizes: tuple[int, int], block_bytes: int
    ) -> _Child | None:
        spans = (split[0], sizes[0], split[1], sizes[1], block_bytes)
        return cls.spawn("servediff.records.halves", [*map(str, paths), *map(str, spans)])

    def half(self, timeout_s: float | None = None) -> Half | None:
        """The child's half, once it has exited cleanly having written all of it; else None,
        also where it has not exited within ``timeout_s`` (a stopped child would hold compare
        forever: the caller reads the pair the ordinary way, and ``close`` ends the child)."""
        half = next(self.messages(_DECODER.decode, timeout_s) or iter(()), None)
        if half is None:
            return None
        for side in (half.a, half.b):  # MessagePack gave each kept item as a map
            side.block.kept = [(k, msgspec.convert(item, lean_item())) for k, item in side.block.kept]
        return half


_DECODER = msgspec.msgpack.Decoder(Half)


def main(argv: list[str]) -> int:
    """``python -m servediff.records.halves A B START_A STOP_A START_B STOP_B BLOCK_BYTES
    PARENT_PID``: the half's columns as one frame on standard output; exit 3 where the fast path
    does not take the half."""
    a, b = Path(argv[0]), Path(argv[1])
    start_a, stop_a, start_b, stop_b, block_bytes, parent = map(int, argv[2:8])
    # Nothing read here is part of a reference cycle, yet with 100,000s of new objects the
    # cyclic GC would run full collections over and over (as in reader.read_run).
    gc.disable()
    with a.open("rb") as fa, b.open("rb") as fb:
        try:
            half = read_half((fa, fb), ((start_a, stop_a), (start_b, stop_b)), block_bytes, parent)
        except Irregular:
            return 3
    frames = Frames()
    frames.write(half.half())
    frames.end()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
