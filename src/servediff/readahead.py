"""Parse the next shadow record in another process while this one reads the current.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # 2 × 1,000,000 items

Compare reads the two sides of a shadow segment one after the other, and at a million items a
side each read is seconds of JSON decoding on one core. While the primary is read, a child
process (``python -m servediff.readahead``) decodes the candidate's record the same way a lean
read does (``record.read_blocks``: blocks of lines, each decoded in one call and turned into
columns) and writes what each block gave as MessagePack frames to an anonymous in-memory file.
When this process comes to the candidate it replays the frames into its reader: a block's
columns are adopted as if decoded here (``LeanItems.adopt``: ids and equal texts shared with the
primary's), and any lines the child did not take as a block (the first item, a blank or bad
line, a cut last line) are read here line by line, the ordinary read's path, so an error names
its line as it would without the child. What the candidate's read gives is the same either way
(``tests/test_readahead.py``).

The child is an optimisation only: if it fails, is killed, or has not finished cleanly, the
record is read here from its file, as without it. It exits when this process does (it checks
its parent between blocks), and this process ends it when the read is abandoned.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

import msgspec

from servediff.lean_items import Block, block_of
from servediff.record import is_shadow_record, lean_item, read_blocks

# Records smaller than this are read here: a child's start (~0.3 s of imports) costs more than
# decoding them.
READ_AHEAD_BYTES = 64 << 20
_LENGTH = 8  # each frame: its length (8 bytes, little-endian), then its MessagePack


class Lines(msgspec.Struct, tag="lines", array_like=True):
    """Lines for the reader to read one by one, as they are in the file."""

    raw: bytes


class Taken(msgspec.Struct, tag="block", array_like=True):
    """``size`` bytes of complete lines the block decoder took whole, as columns."""

    size: int
    block: Block


Frame = Lines | Taken
# After the last frame: how many frames there are (8 bytes, little-endian), then this mark. A
# child that stopped early (killed, out of memory) wrote neither.
END = b"servediff read-ahead: end\n"


class Reader(Protocol):
    """What the frames are replayed into (``record._Reader``)."""

    def lines(self, lines: Iterator[bytes]) -> bool: ...
    def adopt(self, size: int, block: Block) -> None: ...


_C = TypeVar("_C", bound="Child")


class Child:
    """A child process writing to an anonymous in-memory file (its standard output), read once
    it has exited: a read-ahead (``ReadAhead``), or a read in halves (``servediff.halves``)."""

    def __init__(self, proc: subprocess.Popen[bytes], out: int) -> None:
        self._proc, self._out = proc, out

    @classmethod
    def spawn(cls: type[_C], name: str, argv: list[str]) -> _C | None:
        """``argv`` started, its output to a new in-memory file named ``name``; None where there
        is no such file on this system, or no process to start."""
        try:
            out = os.memfd_create(name)
        except (AttributeError, OSError):
            return None
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)
        except OSError:
            os.close(out)
            return None
        return cls(proc, out)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def close(self) -> None:
        """End the child if it is still running, and let its output go."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._out >= 0:
            os.close(self._out)
            self._out = -1

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadAhead(Child):
    """A child process parsing one record (``start``); ``frames`` once it has finished."""

    @classmethod
    def start(cls, path: Path) -> ReadAhead | None:
        """A child parsing ``path``, or None where that is not worth it (a small file, not a
        shadow record: only those are read lean) or not possible (no anonymous in-memory file
        on this system, no process to start)."""
        try:
            size = path.stat().st_size
            if size < READ_AHEAD_BYTES or not hasattr(os, "memfd_create") or cores() < 2:
                return None
            if not is_shadow_record(path):
                return None
            # The frames are about a third of the record (the input, the hashes and the skipped
            # fields are not in them), held in memory until read: not where memory is short.
            if size > _free_memory() // 2:
                return None
        except OSError:
            return None
        argv = [sys.executable, "-m", "servediff.readahead", str(path), str(os.getpid())]
        return cls.spawn("servediff-readahead", argv)

    def frames(self) -> Iterator[Frame] | None:
        """The child's frames, once it has exited cleanly and written its end mark (the record
        read to its end); None otherwise, the caller then reading the file itself. Each call
        reads them from the start."""
        if self._proc.wait() != 0:
            return None
        f = os.fdopen(os.dup(self._out), "rb")
        try:
            f.seek(-(_LENGTH + len(END)), os.SEEK_END)
            tail = f.read()
        except OSError:  # shorter than the end mark
            tail = b""
        if not tail.endswith(END):
            f.close()
            return None
        f.seek(0)
        return _frames(f, int.from_bytes(tail[:_LENGTH], "little"))

    def replay(self, reader: Reader) -> bool:
        """What ``record.read_blocks`` would have done with ``reader``, from what it did in the
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


def cores() -> int:
    """The CPUs this process may run on: with one, a child would only take turns with it."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _free_memory() -> int:
    """Bytes of memory free now (0 where that cannot be told)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 0


_DECODER = msgspec.msgpack.Decoder(Frame)


def _frames(f: IO[bytes], n: int) -> Iterator[Frame]:
    """The ``n`` frames before the end, each read into one reused buffer."""
    buf = bytearray(1 << 20)
    with f:
        for _ in range(n):
            size = int.from_bytes(f.read(_LENGTH), "little")
            if size > len(buf):
                buf = bytearray(size)
            with memoryview(buf)[:size] as view:
                f.readinto(view)  # type: ignore[attr-defined]  # opened "rb"
                frame = _DECODER.decode(view)
            if isinstance(frame, Taken) and frame.block.kept:
                # MessagePack gave each kept item as a map: the lean item it was.
                kept = [(k, msgspec.convert(item, lean_item())) for k, item in frame.block.kept]
                frame.block.kept = kept
            yield frame


class _Writer:
    """``record.read_blocks``' reader in the child: each block or run of lines it is given
    becomes a frame on ``out``."""

    def __init__(self, out: IO[bytes], parent: int) -> None:
        self.out, self.parent, self.n = out, parent, 0
        self.make = lean_item()
        self.whole = True  # as the reader's: the first item line goes line by line
        self._encode = msgspec.msgpack.Encoder().encode

    def _write(self, frame: Frame) -> None:
        data = self._encode(frame)
        self.out.write(len(data).to_bytes(_LENGTH, "little"))
        self.out.write(data)
        self.n += 1

    def lines(self, lines: Iterator[bytes]) -> bool:
        raw = b"".join(lines)
        if self.whole and not raw.isspace():
            self.whole = False  # the reader reads the first item whole, then the rest lean
        self._write(Lines(raw))
        return True

    def block(self, size: int, got: list[Any]) -> None:
        if os.getppid() != self.parent:  # the reading process is gone: so is the point
            os._exit(1)
        self._write(Taken(size, block_of(got, self.make, plain=True)))

    def end(self) -> None:
        self.out.write(self.n.to_bytes(_LENGTH, "little") + END)
        self.out.flush()


def main(argv: list[str]) -> int:
    """``python -m servediff.readahead RECORD PARENT_PID``: the frames on standard output."""
    path, parent = Path(argv[0]), int(argv[1])
    out = sys.stdout.buffer
    writer = _Writer(out, parent)
    with path.open("rb") as f:
        f.readline()  # the header: read by the parent
        read_blocks(writer, f)
    writer.end()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
