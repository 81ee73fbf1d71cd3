"""A shadow segment's two records read at once in two halves: this process the first half of
each, a child process the second.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # 2 × 1,000,000 items

The proxy writes a request's two answers one after the other, so the two records of a segment
hold the same ids in the same order (``shadow.recorder``). Read one after the other, at a
million items a side, each was seconds of JSON decoding on one core, and every text of the first
was kept until the second was read to compare with it. Here each process reads its half of both
records in step, block by block, the same way a lean read decodes a block (``record``), and
compares the two texts of each id as soon as both are decoded: the texts are then let go,
except where an item is kept whole on either side. A text left out is read back from its record
when an item is made (``LeanItems.text_at``: the report reads a sample of the divergent ones).
The child writes its half's columns as one MessagePack message to an anonymous in-memory file.

This is a fast path only. Anything it does not take as it is (a blank, bad or cut line, ids
not the same on both sides, an id twice, the child failing) leaves the pair to the ordinary
read (``record.read_run``), which reads the same and says what is wrong where something is;
what the two reads give is the same (``tests/test_halves.py``).
"""

from __future__ import annotations

import gc
import mmap
import os
import subprocess
import sys
import time
from array import array
from collections.abc import Iterator, Sequence
from itertools import compress
from operator import ne
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec

from servediff.lean_items import Block, LeanItems, Placed, block_of, put_times
from servediff.readahead import Child, cores
from servediff.record import (
    Item,
    RecordError,
    Run,
    decode_block,
    lean_item,
    lean_line,
    open_run,
    read_header,
    share_tokens,
    whole_item,
    with_items_as_suite,
)

# Records smaller than this are read the ordinary way: a child's start (~0.3 s of imports)
# costs more than reading them.
PAIR_BYTES = 64 << 20
# The least time this process waits for the child once its own half is read (``_patience``).
PATIENCE_MIN_S = 60.0
# The part of the items read here. The child starts reading while this process imports the
# analysis (``begin_pairs``), and this one then takes the child's half in: at a million items a
# side, half each finished within 0.1-0.2 s of one another.
SHARE = 0.5
_BLOCK_BYTES = 1 << 20  # as a lean read's blocks
_WINDOW = 64 << 20  # how far from where it is expected the second half's first id is looked for
_LENGTH = 8  # the child's message: its length (8 bytes, little-endian), its MessagePack, END
END = b"servediff halves: end\n"


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


def pairs(paths: Sequence[Path]) -> list[tuple[Path, Path]]:
    """Each shadow segment's two records among ``paths`` that are worth reading in halves: the
    only two records of their segment, both at least ``PAIR_BYTES``."""
    if cores() < 2 or not hasattr(os, "memfd_create"):
        return []
    sizes = {}
    for p in paths:
        try:
            sizes[p] = p.stat().st_size
        except OSError:
            sizes[p] = 0  # the ordinary read says what is wrong
    if all(size < PAIR_BYTES for size in sizes.values()):
        return []
    by_segment: dict[str, list[Path]] = {}
    for p in paths:
        try:
            header = read_header(p)
        except RecordError:
            continue  # not a run record (a probe record), or one the ordinary read refuses
        if "shadow" in header.extra:
            by_segment.setdefault(header.suite.name, []).append(p)
    return [
        (where[0], where[1])
        for where in by_segment.values()
        if len(where) == 2 and where[0] != where[1] and all(sizes[p] >= PAIR_BYTES for p in where)
    ]


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
    ) -> None:
        self.runs, self.files, self.sizes, self.split, self.child = runs, files, sizes, split, child

    def finish(self) -> tuple[Run, Run] | None:
        """The two runs, or None where the fast path does not take them (the caller reads them
        the ordinary way). Closes what ``begin`` opened, either way."""
        try:
            (fa, fb), (ra, rb), split = self.files, self.runs, self.split
            began = time.monotonic()
            try:
                own = read_half(fa, (ra.end, split[0]), fb, (rb.end, split[1]), first=True)
            except Irregular:
                return None
            theirs = self.child.half(_patience(time.monotonic() - began))
        finally:
            self.close()
        if theirs is None:
            return None
        return _assemble(self.runs, own, theirs, self.sizes)

    def close(self) -> None:
        """End the child if it is still running; close the records."""
        self.child.close()
        for f in self.files:
            f.close()


def _patience(own_s: float) -> float:
    """How long to wait for the child once this process has read its half in ``own_s``: the
    two halves are the same work, so several times that, and never less than a minute (the
    child may have shared the core, or started late)."""
    return max(PATIENCE_MIN_S, 10 * own_s)


def begin(path_a: Path, path_b: Path) -> Begun | None:
    """A shadow segment's two records' read in halves, the child started; None where the fast
    path does not take them."""
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
        runs = open_run(path_a, fa), open_run(path_b, fb)
        if not (runs[0].unterminated or runs[1].unterminated):
            split = _split(fa, runs[0].end, sizes[0], fb, runs[1].end, sizes[1])
        if split is not None:
            child = _Child.start(path_a, path_b, split, sizes)
    except RecordError:
        pass
    if split is None or child is None:
        fa.close()
        fb.close()
        return None
    return Begun(runs, files, sizes, split, child)


def begin_pairs(paths: Sequence[Path]) -> dict[tuple[Path, Path], Begun]:
    """``begin`` for each of ``pairs(paths)`` that it takes: started before anything else a
    compare does (its imports), the children read while this process gets ready."""
    out = {}
    for a, b in pairs(paths):
        begun = begin(a, b)
        if begun is not None:
            out[(a, b)] = begun
    return out


def read_pair(path_a: Path, path_b: Path) -> tuple[Run, Run] | None:
    """The two records of a shadow segment, read in halves; None where the fast path does not
    take them (the caller reads them the ordinary way)."""
    begun = begin(path_a, path_b)
    return None if begun is None else begun.finish()


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
    stores = LeanItems(lean_item()), LeanItems(lean_item())
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
        store.text_at = _TextAt(run.path, mine.offsets, ids, size)
        run.items, run.columns, run.end = store, store.columns(), size
        with_items_as_suite(run)
    return runs


def read_half(
    fa: IO[bytes], ra: tuple[int, int], fb: IO[bytes], rb: tuple[int, int], first: bool, parent: int = 0
) -> _Pair:
    """The items of ``fa`` in the byte range ``ra`` and of ``fb`` in ``rb``, read in step.
    ``first``: the ranges start at each record's first item, read whole as an ordinary read
    does. ``parent``: in the child, the process it reads for (it stops when that is gone)."""
    sides = _Columns(keep_ids=True), _Columns(keep_ids=False)
    reads = _blocks(fa, *ra, first), _blocks(fb, *rb, first)
    live = [True, True]
    done = 0
    differ: list[int] = []
    while live[0] or live[1]:
        k = 0 if (sides[0].n <= sides[1].n and live[0]) or not live[1] else 1
        got = next(reads[k], None)
        if got is None:
            live[k] = False
            continue
        if parent and os.getppid() != parent:
            os._exit(1)  # the reading process is gone: so is the point
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


def _blocks(f: IO[bytes], start: int, stop: int, first: bool) -> Iterator[tuple[Block, array[int]]]:
    """The item lines of ``f`` in ``start:stop``, as the columns of blocks of them (a lean
    read's, ``block_of``) and where each line starts. ``first``: the first line is the
    record's first item, read whole."""
    import numpy as np  # compare's, which has numpy loaded already

    make = lean_item()
    f.seek(start)
    if first:
        line = f.readline()
        try:
            item: Item = whole_item(line)
        except msgspec.DecodeError:
            raise Irregular("the first item line") from None
        if not line.endswith(b"\n") or start + len(line) > stop:
            raise Irregular("the first item line")
        yield block_of([item], make, plain=False), array("q", [start])
        start += len(line)
    buf, filled, at, left = bytearray(_BLOCK_BYTES), 0, start, stop - start
    masks: list[Any] = []
    while True:
        if filled == len(buf):  # one line longer than the buffer: make room
            buf.extend(bytes(len(buf)))
        with memoryview(buf)[filled : filled + min(len(buf) - filled, left)] as free:
            got = f.readinto(free) if len(free) else 0  # type: ignore[attr-defined]  # opened "rb"
        if not got:
            if filled:
                raise Irregular("a last line without its newline")
            return
        filled, left = filled + got, left - got
        cut = buf.rfind(b"\n", 0, filled) + 1
        if not cut:
            continue
        items = decode_block(buf, 0, cut, masks)
        if items is None:
            raise Irregular("a block that is not one item a line")
        # decode_block left the block's newlines in masks[0]: each line starts after one
        ends = np.flatnonzero(masks[0][:cut])
        starts = np.empty(len(ends), np.int64)
        starts[0] = at
        starts[1:] = ends[:-1] + (at + 1)
        offsets = array("q")
        offsets.frombytes(starts.tobytes())
        yield block_of(items, make, plain=True), offsets
        buf[: filled - cut] = buf[cut:filled]
        filled -= cut
        at += cut


def _split(fa: IO[bytes], ha: int, sa: int, fb: IO[bytes], hb: int, sb: int) -> tuple[int, int] | None:
    """Where the child's half starts in each record: the line that starts after ``SHARE`` of
    the first record's items, and the line of the same id in the second (looked for where the
    same share of its bytes ends). None where there is none."""
    fa.seek(ha + int((sa - ha) * SHARE))
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


class _TextAt:
    """A text left out of the columns, read back from its record's line: the lines of a read in
    halves follow one another, so line ``i`` ends where line ``i + 1`` starts (the last, at
    ``end``). The record stays open once read from (``--json`` reads 600,000 texts back at a
    million items)."""

    def __init__(self, path: Path, offsets: array[int], ids: list[str], end: int) -> None:
        self.path, self.offsets, self.ids, self.end = path, offsets, ids, end
        self._fd = -1

    def __call__(self, i: int) -> str:
        start = self.offsets[i]
        stop = self.offsets[i + 1] if i + 1 < len(self.offsets) else self.end
        try:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            line = os.pread(self._fd, stop - start, start)
        except OSError as exc:
            raise RecordError(f"{self.path}: {exc.strerror or exc}") from exc
        try:
            item = lean_line(line)
        except msgspec.DecodeError:
            item = None
        if item is None or item.id != self.ids[i]:
            raise RecordError(
                f"{self.path}: changed while compare read it (item {self.ids[i]} is not where it was)"
            )
        return item.text

    def __del__(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)


class _Child(Child):
    """The process reading the second half."""

    @classmethod
    def start(
        cls, path_a: Path, path_b: Path, split: tuple[int, int], sizes: tuple[int, int]
    ) -> _Child | None:
        argv = [sys.executable, "-m", "servediff.halves", str(path_a), str(path_b)]
        argv += [str(split[0]), str(sizes[0]), str(split[1]), str(sizes[1]), str(os.getpid())]
        return cls.spawn("servediff-halves", argv)

    def half(self, timeout_s: float | None = None) -> Half | None:
        """The child's half, once it has exited cleanly having written all of it; else None,
        also where it has not exited within ``timeout_s`` (a stopped child would hold compare
        forever: the caller reads the pair the ordinary way, and ``close`` ends the child)."""
        try:
            if self._proc.wait(timeout_s) != 0:
                return None
        except subprocess.TimeoutExpired:
            return None
        # Decoded where the child wrote it: a copy would be as many pages again to touch.
        with mmap.mmap(self._out, 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            size = int.from_bytes(view[:_LENGTH], "little")
            if len(view) != _LENGTH + size + len(END) or view[_LENGTH + size :] != END:
                return None
            half = _DECODER.decode(view[_LENGTH : _LENGTH + size])
        for side in (half.a, half.b):  # MessagePack gave each kept item as a map
            side.block.kept = [(k, msgspec.convert(item, lean_item())) for k, item in side.block.kept]
        return half


_DECODER = msgspec.msgpack.Decoder(Half)


def main(argv: list[str]) -> int:
    """``python -m servediff.halves A B START_A STOP_A START_B STOP_B PARENT_PID``: the half's
    columns on standard output; exit 3 where the fast path does not take the half."""
    a, b = Path(argv[0]), Path(argv[1])
    start_a, stop_a, start_b, stop_b, parent = map(int, argv[2:7])
    # Nothing read here is part of a reference cycle, yet with 100,000s of new objects the
    # cyclic GC would run full collections over and over (as in record.read_run).
    gc.disable()
    with a.open("rb") as fa, b.open("rb") as fb:
        try:
            half = read_half(fa, (start_a, stop_a), fb, (start_b, stop_b), first=False, parent=parent)
        except Irregular:
            return 3
    data = msgspec.msgpack.encode(half.half())
    out = sys.stdout.buffer
    out.write(len(data).to_bytes(_LENGTH, "little"))
    out.write(data)
    out.write(END)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
