"""Run records: what crosses from a record file into servediff, and nothing else.

    servediff run --config stock --out runs/a1.jsonl --label stock    # writes one (make_item, item_line)
    servediff compare runs/*.jsonl                                    # reads them (read_runs)

One JSONL file per (configuration, suite, repeat): a header line (``Header``), then one line per
finished item (``Item``). What an analysis receives is a ``Run``: its header, and its items by id
as a mapping (a dict, or for a shadow record read lean the same items kept as columns:
``lean.LeanItems``; both give ``Item`` values, field for field the same). A file that cannot be
read as a record is a ``RecordError`` naming the file, the line and the field.

How records are read is ``ReadOptions``; ``read_runs`` (or a ``Reading`` begun early) reads each
path's first line once and picks each record's strategy itself (``plan``). Inside the package:
``schema`` (each field declared once), ``writer``, ``reader`` (one decoder), ``blocks`` (one block
reader), ``lean`` and ``placed`` (the column store), ``ahead`` and ``halves`` (the children, over
one protocol: ``worker``), ``probes`` (the probe records read beside the runs).
"""

from __future__ import annotations

from servediff.records.options import LEAN, WHOLE, ReadOptions
from servediff.records.plan import Reading, read_runs
from servediff.records.reader import Run, read_header, read_run
from servediff.records.schema import (
    SCHEMA_VERSION,
    Header,
    Item,
    RecordError,
    SamplingInfo,
    SuiteInfo,
    TornHeader,
)
from servediff.records.writer import (
    annotate,
    item_line,
    make_header,
    make_item,
    new_run_id,
    seal,
    sha256_text,
)

__all__ = [
    "LEAN",
    "SCHEMA_VERSION",
    "WHOLE",
    "Header",
    "Item",
    "ReadOptions",
    "Reading",
    "RecordError",
    "Run",
    "SamplingInfo",
    "SuiteInfo",
    "TornHeader",
    "annotate",
    "item_line",
    "make_header",
    "make_item",
    "new_run_id",
    "read_header",
    "read_run",
    "read_runs",
    "seal",
    "sha256_text",
]
