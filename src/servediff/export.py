"""Run records as one flat table, one row per (item, configuration run), for pandas and friends.

    servediff export runs/*.jsonl --csv items.csv --parquet items.parquet

Each row carries the record's fields (text, hash, tokens, finish reason, latency, error, answer,
gold, correct, subject) and where the completion stands against the suite's reference run (the
first repeat of the first configuration): identical or not, and the first differing character
and token. Parquet needs pyarrow (``pip install 'servediff[parquet]'``).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servediff.compare.divergence import find_divergence
from servediff.compare.quality import subject
from servediff.compare.study import Study
from servediff.records import Item, Run
from servediff.records.schema import SCHEMA, Schema

# Around the item's own fields (those ``ITEM_FIELDS`` marks for export, in its order).
_BEFORE = ("suite", "label", "repeat", "item_id")
_AFTER = ("subject", "reference", "identical_to_reference", "first_diff_char", "first_diff_token", "record")


def columns(schema: Schema = SCHEMA) -> tuple[str, ...]:
    """The table's columns, in order."""
    return (*_BEFORE, *schema.exported, *_AFTER)


COLUMNS = columns()


class ExportError(ValueError):
    """An export that cannot be written (for example Parquet without pyarrow)."""


def _against(item: Item, ref: Item | None) -> tuple[bool | None, int | None, int | None]:
    if ref is None or item.error or ref.error:
        return None, None, None
    d = find_divergence(item.id, ref, item)
    return (True, None, None) if d is None else (False, d.char_index, d.token_index)


def row(run: Run, item_id: str, ref: Run, schema: Schema = SCHEMA) -> dict[str, Any]:
    item = run.items.get(item_id)
    if item is None:  # not finished in this run: a row that says so, rather than a silent gap
        return {"suite": run.header.suite.name, "label": run.label, "repeat": run.header.repeat,
                "item_id": item_id, "error": "missing from the record", "record": str(run.path)}  # fmt: skip
    same, char, token = _against(item, ref.items.get(item_id))
    return {
        "suite": run.header.suite.name,
        "label": run.label,
        "repeat": run.header.repeat,
        "item_id": item_id,
        **{name: getattr(item, name) for name in schema.exported},
        "subject": subject(item),
        "reference": f"{ref.label}#{ref.header.repeat}",
        "identical_to_reference": same,
        "first_diff_char": char,
        "first_diff_token": token,
        "record": str(run.path),
    }


def rows(study: Study, schema: Schema = SCHEMA) -> list[dict[str, Any]]:
    out = []
    for suite in study.suites:
        configs = [c for c in study.configurations if c.suite == suite]
        ref = configs[0].runs[0]
        for c in configs:
            for run in c.runs:
                out += [row(run, i, ref, schema) for i in run.header.suite.item_ids]
    names = columns(schema)
    return [{k: r.get(k) for k in names} for r in out]


def write_csv(table: Sequence[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]) if table else COLUMNS)
        w.writeheader()
        w.writerows(table)


def write_parquet(table: Sequence[dict[str, Any]], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ExportError(
            "Parquet export needs pyarrow: pip install 'servediff[parquet]' (or use --csv)"
        ) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    ints = ("repeat", "n_tokens", "first_diff_char", "first_diff_token")
    types = {**{c: pa.int64() for c in ints}, "latency_s": pa.float64(), "correct": pa.bool_(),
             "identical_to_reference": pa.bool_()}  # fmt: skip
    names = list(table[0]) if table else COLUMNS
    schema = pa.schema([(c, types.get(c, pa.string())) for c in names])
    pq.write_table(pa.Table.from_pylist(list(table), schema=schema), str(path))
