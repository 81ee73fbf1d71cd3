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

from collections.abc import Iterator
from pathlib import Path

Event = tuple[str, str, bytes]


def _first_line(data: bytes) -> bytes:
    end = data.find(b"\n")
    return data if end < 0 else data[: end + 1]


class Tail:
    """Files under ``root``, and what the receiver already holds of each (``known``)."""

    def __init__(self, root: Path, known: dict[str, bytes]) -> None:
        self.root = root
        self.sent = {rel: (len(data), _first_line(data)) for rel, data in known.items()}

    def poll(self) -> Iterator[Event]:
        for path in sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix != ".tmp"):
            rel = str(path.relative_to(self.root))
            try:
                data = path.read_bytes()
            except OSError:  # replaced between the listing and the read: next poll
                continue
            complete = data[: data.rfind(b"\n") + 1]
            size, first = self.sent.get(rel, (0, b""))
            if not complete or (size == len(complete) and first == _first_line(complete)):
                continue
            if size and first == _first_line(complete) and len(complete) > size:
                yield "append", rel, complete[size:]
            else:
                yield "put", rel, complete
            self.sent[rel] = (len(complete), _first_line(complete))


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
