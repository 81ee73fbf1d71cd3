"""Property: a record cut at ANY byte resumes to the same final record.

A writer can be killed after any byte it wrote. Whatever prefix of a valid record is left, the
reader and the resume step (``runner.pending_ids``: read, seal, skip the finished ids) followed by
writing the items still to do must give back every item exactly once: none lost, none doubled.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servediff.records import Header, RecordError, item_line, make_header, make_item, read_run
from servediff.runner import pending_ids
from servediff.types import Completion, SamplingParams
from tests.helpers.records import suite_info

# Text with multi-byte characters (2-, 3- and 4-byte UTF-8) so that cuts land inside them.
TEXT = st.text(alphabet=st.sampled_from('ab \n"\\é€ありが😀'), max_size=12)
ITEMS = st.lists(st.tuples(TEXT, st.booleans()), min_size=1, max_size=5)


def header_for(n: int) -> Header:
    return make_header(
        label="stock",
        repeat=1,
        engine={"kind": "llamacpp", "model": "m.gguf"},
        sampling=SamplingParams(max_tokens=8),
        suite=suite_info("prompts", [f"i{k}" for k in range(n)]),
        concurrency=1,
    )


HEADERS = {n: header_for(n) for n in range(1, 6)}  # made once: make_header asks git for a revision


def lines_of(items: list[tuple[str, bool]], retry: bool) -> dict[str, str]:
    """One line per item; an errored item is recorded as such (its retry succeeds)."""
    out = {}
    for k, (text, errored) in enumerate(items):
        failed = errored and not retry
        c = Completion(item_id=f"i{k}", text="" if failed else text, error="engine down" if failed else None)
        out[c.item_id] = item_line(make_item(c, [{"role": "user", "content": text}], None, {}))
    return out


def resume(path: Path, header: Header, todo: dict[str, str]) -> None:
    """What ``runner.execute`` does around the engine: resume, then append each unfinished item."""
    finished = pending_ids(path, header)
    with path.open("a", encoding="utf-8") as f:
        if finished is None:
            f.write(header.model_dump_json() + "\n")
        for item_id, line in todo.items():
            if finished is None or item_id not in finished:
                f.write(line)


@settings(max_examples=300, deadline=None)
@given(items=ITEMS, cut=st.floats(min_value=0, max_value=1))
def test_any_prefix_resumes_to_the_same_final_record(items: list[tuple[str, bool]], cut: float) -> None:
    header = HEADERS[len(items)]
    first = header.model_dump_json() + "\n" + "".join(lines_of(items, retry=False).values())
    data = first.encode("utf-8")
    retried = lines_of(items, retry=True)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "run.jsonl"
        path.write_bytes(data[: round(cut * len(data))])
        resume(path, header, retried)
        final = read_run(path)
        rows = [json.loads(line) for line in path.read_bytes().splitlines()[1:]]
        written = Counter(row["id"] for row in rows if row["error"] is None)
    assert final.header == header
    assert final.torn is None and not final.unterminated
    assert {i: item.text for i, item in final.items.items()} == {
        f"i{k}": text for k, (text, _) in enumerate(items)
    }
    assert set(final.done_ids()) == set(retried)  # none lost
    assert all(n == 1 for n in written.values())  # none finished twice


@settings(max_examples=100, deadline=None)
@given(items=ITEMS, cut=st.floats(min_value=0, max_value=1))
def test_a_prefix_reads_as_its_complete_lines(items: list[tuple[str, bool]], cut: float) -> None:
    """Reading (as compare does) a cut record gives exactly the items whose lines are whole."""
    header = HEADERS[len(items)]
    body = lines_of(items, retry=False)
    data = (header.model_dump_json() + "\n" + "".join(body.values())).encode("utf-8")
    n = round(cut * len(data))
    header_len = len(header.model_dump_json()) + 1
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "run.jsonl"
        path.write_bytes(data[:n])
        if n < header_len - 1:  # fewer bytes than the header's JSON: there is no run to read
            with pytest.raises(RecordError, match=r"header line is cut off|empty file"):
                read_run(path)
            return
        run = read_run(path)
    whole, offset = [], header_len
    for item_id, line in body.items():
        offset += len(line.encode("utf-8"))
        if offset - 1 <= n:  # the line's JSON is all there (its newline may not be)
            whole.append(item_id)
    assert list(run.items) == whole
    assert (run.torn is not None) == (n > run.end)  # a cut line is reported, never a whole one
