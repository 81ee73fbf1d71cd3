"""One declaration per item field: a field added to ``Item`` (a subclass, and its one entry in the
table of item fields) is written, read whole, read lean and exported, with nothing else changed.

The field is of the kind a new field is: "kept" (a lean read keeps an item that holds it whole,
and an item without it stays a plain row of the columns).
"""

from __future__ import annotations

import json
from pathlib import Path

from servediff.compare.study import build_study
from servediff.export import columns, rows
from servediff.records import Item, ReadOptions, SuiteInfo, item_line, make_header, read_run, sha256_text
from servediff.records.lean import column_store
from servediff.records.schema import ITEM_FIELDS, ItemField, Schema
from servediff.types import SamplingParams


class Tagged(Item):
    region: str | None = None  # where the request came from, say


TAGGED = Schema(Tagged, {**ITEM_FIELDS, "region": ItemField("kept", export=True)})
ITEMS = 300


def region(i: int) -> str | None:
    return "eu" if i % 7 == 3 else None


def write(path: Path) -> Path:
    suite = SuiteInfo(
        name="seg-1", version="1", source="shadow", data_sha256="", content_sha256="", item_ids=[]
    )
    header = make_header(
        label="primary",
        repeat=1,
        engine={"kind": "http"},
        sampling=SamplingParams(temperature=0.0, seed=0, max_tokens=16),
        suite=suite,
        concurrency=1,
        extra={"shadow": {"side": "primary"}},  # read lean, as a shadow record is
    )
    with path.open("w", encoding="utf-8") as f:
        f.write(header.model_dump_json() + "\n")
        for i in range(ITEMS):
            text = f"answer {i % 11}"
            item = Tagged(
                id=f"r{i}",
                input=[{"role": "user", "content": f"q{i}"}],
                text=text,
                sha256=sha256_text(text),
                n_tokens=3,
                latency_s=0.25,
                region=region(i),
            )
            f.write(item_line(item, TAGGED))
    return path


def test_a_field_declared_once_is_written_read_whole_read_lean_and_exported(tmp_path: Path) -> None:
    path = write(tmp_path / "primary-0001.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    written = [json.loads(line).get("region") for line in lines]
    assert written == [region(i) for i in range(ITEMS)]  # written where set, left out where not
    assert sum(r is not None for r in written) == ITEMS // 7 + (ITEMS % 7 > 3)

    whole = read_run(path, ReadOptions(lean=False, schema=TAGGED))
    got = [getattr(whole.items[f"r{i}"], "region", None) for i in range(ITEMS)]
    assert got == [region(i) for i in range(ITEMS)]

    for block_bytes in (200, 1 << 20):  # blocks of a line or two, and the whole file in one
        lean = read_run(path, ReadOptions(schema=TAGGED, block_bytes=block_bytes))
        store = column_store(lean.items)
        assert store is not None  # read lean: columns, the items holding the field kept whole
        assert sorted(store.extras) == [0, *(i for i in range(ITEMS) if region(i))]  # the first: whole
        got = [getattr(lean.items[f"r{i}"], "region", None) for i in range(ITEMS)]
        assert got == [region(i) for i in range(ITEMS)]

    table = rows(build_study([whole]), TAGGED)
    assert "region" in columns(TAGGED) and "region" not in columns()
    assert [r["region"] for r in table] == [region(i) for i in range(ITEMS)]
