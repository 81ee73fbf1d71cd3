"""The one protocol between a reading process and the child processes that read for it.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # a read-ahead, or a read in halves

A child (``python -m servediff.records.ahead`` or ``…halves``, its last argument the reading
process's id) writes MessagePack frames to its standard output, an anonymous in-memory file: each
frame its length (8 bytes, little-endian) then its bytes; after the last, how many frames there
are (8 bytes) and ``END``. A child that stopped early (killed, out of memory, its reader gone)
wrote neither, and its output is not used: the record is then read as without it. A child checks
between blocks that the process it reads for is still there (``exit_if_orphaned``), and the
reading process ends it when the read is abandoned (``Child.close``).
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec

_LENGTH = 8
END = b"servediff worker: end\n"

_C = TypeVar("_C", bound="Child")
T = TypeVar("T")


class Child:
    """A child process writing frames to an anonymous in-memory file, read once it has exited."""

    def __init__(self, proc: subprocess.Popen[bytes], out: int) -> None:
        self._proc, self._out = proc, out

    @classmethod
    def spawn(cls: type[_C], module: str, args: list[str]) -> _C | None:
        """``python -m module *args PARENT_PID`` started, its output to a new in-memory file;
        None where there is no such file on this system, or no process to start."""
        try:
            out = os.memfd_create(module)
        except (AttributeError, OSError):
            return None
        argv = [sys.executable, "-m", module, *args, str(os.getpid())]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)
        except OSError:
            os.close(out)
            return None
        return cls(proc, out)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def messages(
        self, decode: Callable[[memoryview], T], timeout_s: float | None = None
    ) -> Iterator[T] | None:
        """The child's frames, each decoded where the child wrote it (a copy would be as many pages
        again to touch), once it has exited cleanly and written its end; None otherwise, also
        where it has not exited within ``timeout_s`` (``close`` then ends it)."""
        try:
            if self._proc.wait(timeout_s) != 0:
                return None
        except subprocess.TimeoutExpired:
            return None
        mm = mmap.mmap(self._out, 0, access=mmap.ACCESS_READ) if os.fstat(self._out).st_size else None
        if mm is None or len(mm) < _LENGTH + len(END) or mm[-len(END) :] != END:
            if mm is not None:
                mm.close()
            return None
        return _decoded(mm, int.from_bytes(mm[-len(END) - _LENGTH : -len(END)], "little"), decode)

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


def _decoded(mm: mmap.mmap, n: int, decode: Callable[[memoryview], T]) -> Iterator[T]:
    with mm, memoryview(mm) as view:
        at = 0
        for _ in range(n):
            size = int.from_bytes(view[at : at + _LENGTH], "little")
            with view[at + _LENGTH : at + _LENGTH + size] as frame:
                yield decode(frame)
            at += _LENGTH + size


class Frames:
    """The child's side: frames to standard output, then their count and the end mark."""

    def __init__(self) -> None:
        self.out, self.n = sys.stdout.buffer, 0
        self._encode = msgspec.msgpack.Encoder().encode

    def write(self, message: Any) -> None:
        data = self._encode(message)
        self.out.write(len(data).to_bytes(_LENGTH, "little"))
        self.out.write(data)
        self.n += 1

    def end(self) -> None:
        self.out.write(self.n.to_bytes(_LENGTH, "little") + END)
        self.out.flush()


def exit_if_orphaned(parent: int) -> None:
    """In a child: the process it reads for is gone, and so is the point of reading."""
    if os.getppid() != parent:
        os._exit(1)


def cores() -> int:
    """The CPUs this process may run on: with one, a child would only take turns with it."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def free_memory() -> int:
    """Bytes of memory free now (0 where that cannot be told)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 0
