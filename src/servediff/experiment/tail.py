"""Follow the files a worker writes and replay them elsewhere, complete lines only.

    servediff experiment examples/ray-replicas.toml --executor ray   # worker → driver streaming

A run record grows by appended lines and has its header rewritten once (the verification is
known only after the run); a server log grows by lines. ``Tail.poll`` turns what changed since
the last poll into events: ``append`` (the new complete lines) or ``put`` (the whole file, when
its first line was rewritten or it shrank, e.g. a cut last line sealed off on resume).
``apply`` performs an event on the receiving side. A line still being written is never sent,
so whatever the receiver holds is a record that resumes cleanly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

Event = tuple[str, str, bytes]
MARK = 64  # bytes before the receiver's end that must be unchanged for an append


def _first_line(data: bytes) -> bytes:
    end = data.find(b"\n")
    return data if end < 0 else data[: end + 1]


@dataclass(frozen=True, slots=True)
class _Sent:
    """What the receiver holds of one file: its size, its first line, its last bytes, and the
    inode they were read from (a file replaced by a rename is a new inode: sent whole)."""

    size: int = 0
    first: bytes = b""
    last: bytes = b""
    inode: int | None = None


def _sent(data: bytes, inode: int | None) -> _Sent:
    return _Sent(len(data), _first_line(data), data[-MARK:], inode)


class Tail:
    """Files under ``root``, and what the receiver already holds of each (``known``)."""

    def __init__(self, root: Path, known: dict[str, bytes]) -> None:
        self.root = root
        self.sent = {rel: _sent(data, _inode(root / rel)) for rel, data in known.items()}

    def poll(self) -> Iterator[Event]:
        for path in sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix != ".tmp"):
            rel = str(path.relative_to(self.root))
            try:
                event = self._change(rel, path)
            except OSError:  # replaced between the listing and the read: next poll
                continue
            if event is not None:
                yield event

    def _change(self, rel: str, path: Path) -> Event | None:
        """What changed in one file. When it only grew (same inode, same first line, the same
        bytes where the receiver's copy ends) just the new complete lines are read and sent."""
        was = self.sent.get(rel, _Sent())
        with path.open("rb") as f:
            inode = os.fstat(f.fileno()).st_ino
            if was.size and inode == was.inode and f.readline() == was.first and f.seek(0, 2) >= was.size:
                f.seek(was.size - len(was.last))
                new = f.read()
                if new.startswith(was.last):
                    new = new[len(was.last) : new.rfind(b"\n") + 1]
                    if not new:
                        return None
                    self.sent[rel] = _Sent(was.size + len(new), was.first, (was.last + new)[-MARK:], inode)
                    return "append", rel, new
            f.seek(0)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        now = _sent(complete, inode)
        if not complete or now == was:
            return None
        self.sent[rel] = now
        return "put", rel, complete


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def apply(root: Path, kind: str, rel: str, data: bytes) -> None:
    """Perform one event under ``root``: append the lines, or replace the file atomically."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "append":
        with path.open("ab") as f:
            f.write(data)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
