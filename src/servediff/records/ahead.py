"""Parse the next shadow record in another process while this one reads the current.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # 2 × 1,000,000 items

Compare reads the two sides of a shadow segment one after the other, and at a million items a
side each read is seconds of JSON decoding on one core. While the primary is read, a child
process (``python -m servediff.records.ahead``) decodes the candidate's record the same way a lean
read does (``blocks.read_blocks``: blocks of lines, each decoded in one call and turned into
columns) and writes what each block gave as frames (``worker``). When this process comes to the
candidate it replays the frames into its reader: a block's columns are adopted as if decoded
here (``LeanItems.adopt``: ids and equal texts shared with the primary's), and any lines the
child did not take as a block (the first item, a blank or bad line, a cut last line) are read
here line by line, the ordinary read's path, so an error names its line as it would without the
child. What the candidate's read gives is the same either way (``tests/test_readahead.py``).

The child is an optimisation only: if it fails, is killed, or has not finished cleanly, the
record is read here from its file, as without it.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec

from servediff.records.blocks import read_blocks
from servediff.records.lean import Block, block_of
from servediff.records.schema import SCHEMA, lean_item
from servediff.records.worker import Child, Frames, cores, exit_if_orphaned, free_memory


class Lines(msgspec.Struct, tag="lines", array_like=True):
    """Lines for the reader to read one by one, as they are in the file."""

    raw: bytes


class Taken(msgspec.Struct, tag="block", array_like=True):
    """``size`` bytes of complete lines the block decoder took whole, as columns."""

    size: int
    block: Block


Frame = Lines | Taken


class Reader(Protocol):
    """What the frames are replayed into (``reader._Reader``)."""

    def lines(self, lines: Iterator[bytes]) -> bool: ...
    def adopt(self, size: int, block: Block) -> None: ...


class ReadAhead(Child):
    """A child process parsing one record (``start``); ``frames`` once it has finished."""

    @classmethod
    def start(cls, path: Path, size: int, block_bytes: int) -> ReadAhead | None:
        """A child parsing ``path`` (a shadow record of ``size`` bytes, read lean), or None where
        that is not possible (no anonymous in-memory file on this system, no process to start) or
        not wise (one core; too little memory)."""
        if cores() < 2:
            return None
        # The frames are about a third of the record (the input, the hashes and the skipped
        # fields are not in them), held in memory until read: not where memory is short.
        if size > free_memory() // 2:
            return None
        return cls.spawn("servediff.records.ahead", [str(path), str(block_bytes)])

    def frames(self) -> Iterator[Frame] | None:
        """The child's frames, once it has exited cleanly and written its end (the record read to
        its end); None otherwise, the caller then reading the file itself. Each call reads them
        from the start."""
        return self.messages(_decode)

    def replay(self, reader: Reader) -> bool:
        """What ``blocks.read_blocks`` would have done with ``reader``, from what it did in the
        child; False, with nothing done, where the child did not finish cleanly."""
        frames = self.frames()
        if frames is None:
            return False
        for frame in frames:
            if isinstance(frame, Taken):
                reader.adopt(frame.size, frame.block)
            elif not reader.lines(iter(io.BytesIO(frame.raw))):
                break  # a cut last line: the read ends there
        return True


_DECODER = msgspec.msgpack.Decoder(Frame)


def _decode(data: memoryview) -> Frame:
    frame = _DECODER.decode(data)
    if isinstance(frame, Taken) and frame.block.kept:
        # MessagePack gave each kept item as a map: the lean item it was.
        frame.block.kept = [(k, msgspec.convert(item, lean_item())) for k, item in frame.block.kept]
    return frame


class _Writer:
    """``blocks.read_blocks``' reader in the child: each block or run of lines it is given
    becomes a frame."""

    def __init__(self, frames: Frames, parent: int) -> None:
        self.frames, self.parent = frames, parent
        self.decoder = SCHEMA.lean_decoder
        self.whole = True  # as the reader's: the first item line goes line by line

    def lines(self, lines: Iterator[bytes]) -> bool:
        raw = b"".join(lines)
        if self.whole and not raw.isspace():
            self.whole = False  # the reader reads the first item whole, then the rest lean
        self.frames.write(Lines(raw))
        return True

    def block(self, size: int, got: list[Any]) -> None:
        exit_if_orphaned(self.parent)
        self.frames.write(Taken(size, block_of(got, SCHEMA, plain=True)))


def main(argv: list[str]) -> int:
    """``python -m servediff.records.ahead RECORD BLOCK_BYTES PARENT_PID``: the frames on
    standard output."""
    path, block_bytes, parent = Path(argv[0]), int(argv[1]), int(argv[2])
    frames = Frames()
    with path.open("rb") as f:
        f.readline()  # the header: read by the parent
        read_blocks(_Writer(frames, parent), f, block_bytes)
    frames.end()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
