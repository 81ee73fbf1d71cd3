"""The one block reader: a record's item lines in blocks of complete lines, each decoded in one call.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # a million lines a side

``LineBlocks`` reads into one buffer reused from block to block, cuts at the last newline and
carries the rest to the next block: every lean path reads through it (this process's lean read,
the read-ahead child, both halves of a read in halves). ``decode_block`` decodes a block's lines
in one call, or says that they are not one item a line.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from typing import IO, Any, Protocol

import msgspec

from servediff.records.schema import Item


class BlockReader(Protocol):
    """What ``read_blocks`` hands a record's lines to: the reader (``records.reader``), or a
    read-ahead process's writer (``records.ahead``)."""

    whole: bool
    decoder: msgspec.json.Decoder[Item]  # the lean decoder of the schema read

    def lines(self, lines: Iterator[bytes]) -> bool: ...
    def block(self, size: int, got: list[Item]) -> None: ...


class LineBlocks:
    """The complete lines of ``f`` from where it stands, a block at a time: iterating gives, for
    each block, the end of its complete lines in ``buf`` (``buf[:cut]``); the rest of a line cut
    by the block's end is carried to the front of the next. ``limit``: read at most this many
    bytes. Once iterated, ``tail`` holds what followed the last newline (a line without its
    newline), if anything.

    One buffer, reused from block to block (a fresh megabyte each time was fresh pages from the
    kernel each time); a line longer than it makes it grow."""

    def __init__(self, f: IO[bytes], size: int, limit: int | None = None) -> None:
        self.f, self.buf, self.limit = f, bytearray(size), limit
        self.tail = b""

    def __iter__(self) -> Iterator[int]:
        f, buf, left = self.f, self.buf, self.limit
        filled = 0  # bytes in buf, a cut line carried at its front
        while True:
            if filled == len(buf):  # one line longer than the buffer: make room
                buf.extend(bytes(len(buf)))
            room = len(buf) - filled if left is None else min(len(buf) - filled, left)
            with memoryview(buf)[filled : filled + room] as free:
                got = f.readinto(free) if room else 0  # type: ignore[attr-defined]  # opened "rb"
            if not got:
                break
            filled += got
            if left is not None:
                left -= got
            cut = buf.rfind(b"\n", 0, filled) + 1
            if cut:
                yield cut
                buf[: filled - cut] = buf[cut:filled]
                filled -= cut
        self.tail = bytes(buf[:filled])


def read_blocks(reader: BlockReader, f: IO[bytes], block_bytes: int) -> None:
    """A lean read: blocks of complete lines, each decoded in one call (``decode_lines``).

    At a million lines a side, one decoder call per line and the per-line loop around it were
    about a third of reading. A block goes line by line instead (the same path as an ordinary
    read: its errors name the line) when it holds anything else than one item per line: a blank
    line, a bad one, or a line holding two objects; so does the first item (read whole) and a
    last line without its newline."""
    blocks = LineBlocks(f, block_bytes)
    buf = blocks.buf
    masks: list[Any] = []  # _line_ends' scratch, this read's own
    for cut in blocks:
        start = 0
        while reader.whole and start < cut:  # up to the first item, line by line: it is read whole
            end = buf.index(b"\n", start, cut) + 1
            reader.lines(iter((bytes(buf[start:end]),)))
            start = end
        if start < cut:
            items = decode_block(buf, start, cut, masks, reader.decoder)
            if items is None:
                if not reader.lines(iter(io.BytesIO(buf[start:cut]))):
                    return
            else:
                reader.block(cut - start, items)
    if blocks.tail:
        reader.lines(iter((blocks.tail,)))


def decode_block(
    buf: bytearray, start: int, end: int, masks: list[Any], decoder: msgspec.json.Decoder[Item]
) -> list[Item] | None:
    """The items of the complete lines ``buf[start:end]``, one per line, or None where that is
    not what they hold. ``decode_lines`` passes over blank lines and takes two objects on one
    line; a block where every newline follows a closing brace and each gave one item has
    neither (a line with trailing spaces or a carriage return goes line by line, and reads the
    same there)."""
    with memoryview(buf)[start:end] as block:
        try:
            got = decoder.decode_lines(block)
            # The fields the decoder skips are not checked by it: the block is, whole (0.04 s a
            # 700 MB side). Where it fails, the lines say which one.
            codecs.utf_8_decode(block, "strict", True)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
    lines, closed = _line_ends(buf, start, end, masks)
    return got if len(got) == lines == closed else None


def _line_ends(buf: bytearray, start: int, end: int, masks: list[Any]) -> tuple[int, int]:
    """(newlines, newlines right after a closing brace) in ``buf[start:end]``, counted by numpy:
    ``bytes.count`` scans a byte at a time, 0.4 s for the two counts over a 350 MB record.
    ``masks``: the read's two boolean masks, kept from block to block (fresh ones were fresh
    pages each time); made here on first use, and again when a block outgrows them."""
    import numpy as np  # a lean read is compare's, which has numpy loaded already

    n = end - start
    if not masks or len(masks[0]) < n:
        masks[:] = [np.empty(max(n, len(buf)), bool), np.empty(max(n, len(buf)), bool)]
    newline, after_brace = masks[0][:n], masks[1][:n]
    b = np.frombuffer(buf, np.uint8, n, start)
    np.equal(b, 10, out=newline)
    after_brace[0] = False
    np.equal(b[:-1], 125, out=after_brace[1:])
    after_brace &= newline
    return int(np.count_nonzero(newline)), int(np.count_nonzero(after_brace))
