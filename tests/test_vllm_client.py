"""bench/vllm_client.py on the records of a real bench phase: one vLLM 0.24.0 server (Qwen2.5-Coder-0.5B,
one H100) driven alternately by ``vllm bench serve`` and ``servediff run`` at 64 and 256 in flight
(tests/data/vllm/bench.tar.xz, packed by scripts/gpu/vllm-study.sh, machine paths stripped).

The numbers the table shows are checked against what each tool wrote itself: vLLM's own
``output_throughput`` and servediff's items, so a reader that took the wrong field or span fails.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "tests" / "data" / "vllm" / "bench.tar.xz"


@pytest.fixture(scope="module")
def client() -> ModuleType:
    return load_script(ROOT / "bench" / "vllm_client.py")


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    with tarfile.open(RECORDS) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "bench"


def test_each_side_reads_what_its_tool_measured(client: ModuleType, folder: Path) -> None:
    notes: list[str] = []
    runs = client.sides(folder, notes)
    assert notes == []
    assert sorted((s.client, s.concurrency, s.round) for s in runs) == sorted(
        (c, n, r) for c in ("vllm", "servediff") for n in (64, 256) for r in (1, 2)
    )
    order = [line.split() for line in (folder / "order.txt").read_text().splitlines()]
    for side in runs:
        if side.client == "vllm":
            own = json.loads((folder / f"vllm.c{side.concurrency}.r{side.round}.json").read_text())
            assert own["max_concurrency"] == side.concurrency
            assert side.tokens_per_s == pytest.approx(own["output_throughput"], rel=1e-9)
            assert side.requests == own["completed"] == 1000
        else:
            lines = (folder / f"servediff.c{side.concurrency}.r{side.round}.jsonl").read_text().splitlines()
            header = json.loads(lines[0])
            assert header["label"] == f"servediff-c{side.concurrency}"
            items = [json.loads(line) for line in lines[1:]]
            assert side.requests == len(items) == 1000 and side.failed == 0
            assert side.output_tokens == sum(i["n_tokens"] for i in items)
            # first request sent (its answer's time less its latency) to last answer received
            first_sent = min(i["finished_at"] - i["latency_s"] for i in items)
            assert side.seconds == pytest.approx(max(i["finished_at"] for i in items) - first_sent, abs=1e-6)
        # the span each side measured lies inside the wall time the phase gave its process
        t0, t1 = next(
            (float(o[3]), float(o[4]))
            for o in order
            if (o[0], int(o[1]), int(o[2])) == (side.client, side.concurrency, side.round)
        )
        assert 0 < side.seconds < t1 - t0
    # the same prompts and lengths: the two sides' output tokens agree to within 1 %
    for n in (64, 256):
        for r in (1, 2):
            v, d = (
                next(s for s in runs if (s.client, s.concurrency, s.round) == (c, n, r))
                for c in ("vllm", "servediff")
            )
            assert d.output_tokens == pytest.approx(v.output_tokens, rel=0.01)


def test_the_table_gives_the_ratio_per_round_and_the_verdict(client: ModuleType, folder: Path) -> None:
    runs = client.sides(folder, [])
    rows = client.table(runs)
    body = [r for r in rows if r.startswith("| 64 ") or r.startswith("| 256 ")]
    assert len(body) == 4
    by = {(s.client, s.concurrency, s.round): s for s in runs}
    for row in body:
        cells = [c.strip() for c in row.strip("|").split("|")]
        n, r = int(cells[0]), int(cells[1])
        expected = by["servediff", n, r].tokens_per_s / by["vllm", n, r].tokens_per_s
        assert float(cells[5]) == pytest.approx(expected, abs=5e-4)
        assert cells[2] == ("vllm first" if r == 1 else "servediff first")
    verdicts = [r for r in rows if r.startswith("- ") and "target" in r]
    assert len(verdicts) == 2
    for line in verdicts:
        n = int(line.split()[1])
        lowest = min(by["servediff", n, r].tokens_per_s / by["vllm", n, r].tokens_per_s for r in (1, 2))
        assert line.endswith("met") and (("not met" in line) == (lowest < client.TARGET))


def test_a_run_that_did_not_finish_leaves_its_round_out(client: ModuleType, folder: Path) -> None:
    order = folder / "order.txt"
    lines = order.read_text().splitlines()
    stopped = [ln for ln in lines if ln.startswith("vllm 256 2 ")]
    assert len(stopped) == 1
    order.write_text("\n".join(ln[: ln.rindex(" ")] + " 124" if ln in stopped else ln for ln in lines) + "\n")
    notes: list[str] = []
    rows = client.table(client.sides(folder, notes))
    assert notes == ["- vllm at 256 in flight, round 2: exited 124, its round left out"]
    assert not any(r.startswith("| 256 | 2 ") for r in rows)
    assert any("256 in flight" in r and "median of 1 rounds" in r for r in rows)


def test_failed_requests_are_counted_not_timed(client: ModuleType, folder: Path) -> None:
    path = folder / "servediff.c64.r1.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[1])
    first["error"] = "engine error: HTTP 500"
    lines[1] = json.dumps(first)
    path.write_text("\n".join(lines) + "\n")
    side = client.read_servediff(path, 64, 1)
    assert (side.requests, side.failed) == (999, 1)
    rows = client.table(client.sides(folder, []))
    assert "- servediff at 64 in flight, round 1: 1 requests failed" in rows
