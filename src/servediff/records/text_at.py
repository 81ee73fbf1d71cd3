"""A text left out of a lean store's columns, read back from its record's line when an item is made.

    servediff compare primary-0001.jsonl candidate-0001.jsonl --json    # 600,000 texts read back

A read in halves lets a text go once both sides' texts were compared (``halves``); the report
reads a sample of the divergent ones back from the record.
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import msgspec

from servediff.records.schema import RecordError, lean_line


class TextAt:
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
