"""How records are read: one options object, so that a test or a caller changes how, never what.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # ReadOptions() as below

What an analysis gets from a record is the same whatever these say (the equivalence tests read
the same records with several of them); they change only how fast, and with what memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.records.schema import SCHEMA, Schema


@dataclass(frozen=True, slots=True)
class ReadOptions:
    # A shadow record's items after the first read lean: only what an analysis reads
    # (``schema.LeanItem``), as columns (``lean.LeanItems``). An export, which writes every
    # field out, reads them whole; records of other kinds are read whole either way.
    lean: bool = True
    # Bytes read at a time by a lean read: ~3,000 lines of a shadow record.
    block_bytes: int = 1 << 20
    # Records smaller than this are not parsed ahead in a child process: a child's start
    # (~0.3 s of imports) costs more than decoding them. None: never ahead.
    ahead_bytes: int | None = 64 << 20
    # A shadow segment's two records, both at least this large, are read at once in halves by
    # this process and a child (``halves``). None: never in halves.
    halves_bytes: int | None = 64 << 20
    # The share of a record's items that this process reads in halves; the child reads the rest.
    halves_share: float = 0.5
    # The least time this process waits for a child once its own part is read (a stopped child
    # would hold compare forever; past it the records are read here, as without the child).
    patience_s: float = 60.0
    # What an item line holds (``schema.Schema``): the record's, or one with a field more (a
    # test). The children read the record's only: another is read here.
    schema: Schema = SCHEMA


LEAN = ReadOptions()  # how an analysis reads records
WHOLE = ReadOptions(lean=False)  # every field of every item: an export, or a record read by itself
