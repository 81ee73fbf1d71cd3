"""The read plan: each path's first line read once, and each record read the way that suits it.

    servediff compare primary-0001.jsonl candidate-0001.jsonl probes.jsonl

``Reading`` takes the paths an analysis is made from and ``ReadOptions``; it sniffs each file
once (a run record, with its header parsed; a probe record; anything else, left to the ordinary
read to name what is wrong), and picks each record's strategy: a large shadow segment's two
records read at once in halves by this process and a child (``halves``, begun at once so that
the child reads while this process imports the analysis), the next large shadow record parsed
ahead by a child while this one is read (``ahead``), a shadow record read lean, anything else
read whole (``reader``). ``finish`` gives the runs and the probe sets. The caller never picks a
strategy: what it gets is the same whichever is taken (the equivalence tests).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servediff.records.ahead import ReadAhead
from servediff.records.halves import Begun, begin
from servediff.records.options import LEAN, ReadOptions
from servediff.records.probes import PROBE_RECORD, ProbeSet, read_probes
from servediff.records.reader import Run, parse_header, read_run
from servediff.records.schema import SCHEMA, Header, RecordError
from servediff.records.worker import cores

Kind = Literal["run", "probe"]


@dataclass(frozen=True, slots=True)
class Sniffed:
    """A path as its first line shows it: a run record (its header, where it reads), or a probe
    record. ``size``: the file's bytes (0 where it cannot be read: its read says why)."""

    path: Path
    kind: Kind
    header: Header | None
    size: int

    @property
    def shadow(self) -> bool:
        return self.header is not None and "shadow" in self.header.extra


def sniff(path: Path) -> Sniffed:
    """``path``'s first line read and parsed, once."""
    try:
        with Path(path).open("rb") as f:
            first, size = f.readline(), os.fstat(f.fileno()).st_size
    except OSError:
        return Sniffed(path, "run", None, 0)
    if PROBE_RECORD.encode() in first:
        try:
            head = json.loads(first)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            head = None
        if isinstance(head, dict) and head.get("record") == PROBE_RECORD:
            return Sniffed(path, "probe", None, size)
    try:
        header: Header | None = parse_header(path, first)
    except RecordError:
        header = None  # the ordinary read says what is wrong
    return Sniffed(path, "run", header, size)


class Reading:
    """Records being read: begun when made (every path sniffed, the children that read pairs in
    halves started), finished by ``finish``. A context manager: no child outlives it."""

    def __init__(self, paths: Sequence[Path], options: ReadOptions = LEAN) -> None:
        self.options = options
        self.sniffed = [sniff(Path(p)) for p in paths]
        self.begun: dict[tuple[int, int], Begun] = {}
        try:
            for i, j in _halves(self.sniffed, options):
                a, b = self.sniffed[i], self.sniffed[j]
                assert a.header is not None and b.header is not None  # _halves takes only these
                pair = begin((a.path, b.path), (a.header, b.header), options)
                if pair is not None:
                    self.begun[(i, j)] = pair
        except BaseException:
            self.close()
            raise

    @property
    def halves(self) -> list[tuple[Path, Path]]:
        """The pairs being read in halves."""
        return [(self.sniffed[i].path, self.sniffed[j].path) for i, j in self.begun]

    def finish(self) -> tuple[list[Run], list[ProbeSet]]:
        """The run records read (in the order given) and the probe records."""
        read: dict[int, Run] = {}
        try:
            for (i, j), pair in self.begun.items():
                got = pair.finish()
                if got is not None:
                    read[i], read[j] = got
        finally:
            self.close()
        runs = [k for k, s in enumerate(self.sniffed) if s.kind == "run"]
        out: list[Run] = []
        # While a record is read here, the next one is parsed by a child process (a large shadow
        # record read lean), one at a time: a machine may have only two cores.
        ahead: ReadAhead | None = None
        try:
            for n, k in enumerate(runs):
                if k in read:
                    out.append(read[k])
                    continue
                current, ahead = ahead, None
                if n + 1 < len(runs) and runs[n + 1] not in read and self._ahead(self.sniffed[runs[n + 1]]):
                    nxt = self.sniffed[runs[n + 1]]
                    ahead = ReadAhead.start(nxt.path, nxt.size, self.options.block_bytes)
                try:
                    s = self.sniffed[k]
                    out.append(read_run(s.path, self.options, beside=out, ahead=current, header=s.header))
                finally:
                    if current is not None:
                        current.close()
        finally:
            if ahead is not None:
                ahead.close()
        return out, [read_probes(s.path) for s in self.sniffed if s.kind == "probe"]

    def _ahead(self, s: Sniffed) -> bool:
        """Worth parsing in a child: a shadow record read lean, large enough to pay for a child."""
        limit = self.options.ahead_bytes
        return (
            self.options.lean
            and s.shadow
            and limit is not None
            and s.size >= limit
            and _children(self.options)
        )

    def close(self) -> None:
        """End the children still reading; close the records."""
        for pair in self.begun.values():
            pair.close()

    def __enter__(self) -> Reading:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_runs(
    paths: Sequence[Path] | Reading, options: ReadOptions = LEAN
) -> tuple[list[Run], list[ProbeSet]]:
    """The run records and probe records among ``paths``, each read the way that suits it (or
    those of a ``Reading`` begun already, finished here: ``options`` were its own)."""
    with paths if isinstance(paths, Reading) else Reading(paths, options) as reading:
        return reading.finish()


def _children(options: ReadOptions) -> bool:
    """A child can read beside this process: an anonymous in-memory file for its output, a second
    core (with one, a child would only take turns with this process), and the record's schema."""
    return hasattr(os, "memfd_create") and cores() >= 2 and options.schema is SCHEMA


def _halves(sniffed: list[Sniffed], options: ReadOptions) -> list[tuple[int, int]]:
    """Each shadow segment's two records worth reading in halves: the only two records of their
    segment, both at least ``options.halves_bytes``."""
    limit = options.halves_bytes
    if not options.lean or limit is None or not _children(options):
        return []
    by_segment: dict[str, list[int]] = {}
    for k, s in enumerate(sniffed):
        if s.shadow:
            assert s.header is not None
            by_segment.setdefault(s.header.suite.name, []).append(k)
    return [
        (where[0], where[1])
        for where in by_segment.values()
        if len(where) == 2
        and sniffed[where[0]].path != sniffed[where[1]].path
        and all(sniffed[k].size >= limit for k in where)
    ]
