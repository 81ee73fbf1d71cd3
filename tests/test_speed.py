"""Speed on real engines: streaming changes no completion, servediff's tokens/s agrees with the
engine's own clock, warm-up is left out and counted.

``python -m llama_cpp.server`` returns no timing fields in its responses (no ``timings``, and no
``usage`` when streaming); it prints llama.cpp's perf counters to its log after every request
("total time = … ms"). That log is the engine's own measurement, so it is what the records are
checked against. The embedded engine reads the same counters directly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.compare import speed
from servediff.compare.loader import load
from servediff.engines.knobs import LlamaKnobs
from servediff.records import Run, read_run
from servediff.report.assembly import build
from servediff.types import Completion, Sample, SamplingParams
from tests.conftest import LlamaServer

TOTAL = re.compile(r"llama_perf_context_print:\s+total time =\s+([\d.]+) ms")
RAW = [
    {"id": "story", "prompt": "Once upon a time, in a small village,"},
    {"id": "list", "prompt": "Three facts about the moon:\n1."},
    {"id": "code", "prompt": "def fibonacci(n):"},
]


def run(server: LlamaServer, out: Path, suite: str, *extra: str, limit: int = 3, tokens: int = 48) -> Run:
    argv = ["run", "--engine", "http", "--base-url", server.base_url, "--suite", suite, "--limit", str(limit)]
    argv += ["--max-tokens", str(tokens), "--label", out.stem, "--out", str(out), "--no-progress", *extra]
    assert main(argv) == 0
    return read_run(out)


@pytest.fixture(scope="module")
def raw_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("raw") / "raw.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in RAW), encoding="utf-8")
    return path


@pytest.mark.parametrize("form", ["chat", "raw"])
def test_streaming_on_and_off_give_the_same_completions(
    llama_server: LlamaServer, tmp_path: Path, raw_suite: Path, form: str
) -> None:
    suite = "prompts" if form == "chat" else str(raw_suite)
    plain = run(llama_server, tmp_path / "plain.jsonl", suite)
    streamed = run(llama_server, tmp_path / "streamed.jsonl", suite, "--stream")
    assert streamed.header.engine["options"]["stream"] is True  # the record says so
    assert "stream" not in plain.header.engine["options"]
    assert plain.items.keys() == streamed.items.keys() and len(plain.items) == 3
    for item_id, a in plain.items.items():
        b = streamed.items[item_id]
        assert a.error is None and b.error is None
        assert (b.text, b.sha256, b.finish_reason) == (a.text, a.sha256, a.finish_reason)
        assert b.n_tokens == a.n_tokens and b.token_ids == a.token_ids
        assert a.ttft_s is None and a.itl_s is None  # measured only when streamed
        assert b.ttft_s is not None and 0 < b.ttft_s < b.latency_s
        assert b.itl_s is not None and 0 < b.itl_s < b.latency_s


@pytest.fixture(scope="module")
def timed(llama_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[float]]:
    """A sequential run, and the server's own total time (ms) of each of its requests."""
    before = llama_server.log.stat().st_size
    record = run(
        llama_server, tmp_path_factory.mktemp("timed") / "stock.jsonl", "prompts", limit=4, tokens=64
    )
    with llama_server.log.open("rb") as f:
        f.seek(before)
        totals = [float(m) for m in TOTAL.findall(f.read().decode("utf-8", "replace"))]
    return record, totals


def test_tokens_per_second_agrees_with_the_servers_own_timings(timed: tuple[Run, list[float]]) -> None:
    record, totals = timed
    assert len(totals) == len(record.items) == 4  # one perf report per generation request
    tokens = sum(it.n_tokens or 0 for it in record.items.values())
    engine = tokens / (sum(totals) / 1000)
    rates = speed.rates(speed.run_items(record, warmup=0))
    assert rates is not None
    ours = rates[0].value
    assert ours == pytest.approx(engine, rel=0.05), (ours, engine)
    assert ours <= engine  # the client's wall time holds the server's time and the transport


def test_warmup_is_left_out_and_counted(timed: tuple[Run, list[float]]) -> None:
    record, _ = timed
    kept = speed.run_items(record, warmup=1)
    assert kept.warmup == 1 and len(kept) == 3
    first = min(record.items.values(), key=lambda it: (it.finished_at or 0) - it.latency_s)
    assert first.id not in set(kept.keys)  # the first request sent, not any other
    report = build(*load([record.path], warmup=1))
    (view,) = report.speed
    assert (view.items, view.warmup, view.errors) == (3, 1, 0)
    rest = [it for it in record.items.values() if it is not first]
    expected = sum(it.n_tokens or 0 for it in rest) / sum(it.latency_s for it in rest)
    assert view.tokens_per_s is not None
    assert view.tokens_per_s.value == pytest.approx(expected, rel=0.02)  # in-flight ≈ 1 here
    assert view.tokens_per_s.low <= view.tokens_per_s.value <= view.tokens_per_s.high
    none_left_out = build(*load([record.path], warmup=0)).speed[0]
    assert (none_left_out.items, none_left_out.warmup) == (4, 0)


def test_embedded_engine_records_its_own_counters() -> None:
    from servediff.engines.llamacpp import LlamaCppEngine

    got: list[Completion] = []
    with LlamaCppEngine(LlamaKnobs(threads=1)) as engine:
        samples = [Sample("a", prompt="Once upon a time"), Sample("b", prompt="The capital of France is")]
        engine.generate(samples, SamplingParams(max_tokens=12), got.append)
    for c in got:
        t = c.engine_timings
        assert c.error is None and t is not None and t["source"] == "llama_perf_context"
        # llama.cpp decodes every generated token but the first (which comes from the prompt's
        # logits), plus the end-of-generation token when the model stops on its own.
        assert c.n_tokens is not None and t["eval_n"] in (c.n_tokens - 1, c.n_tokens)
        assert c.ttft_s is not None and c.itl_s is not None and 0 < c.ttft_s < c.latency_s
        assert (t["prompt_eval_ms"] + t["eval_ms"]) / 1000 <= c.latency_s


def test_in_flight_is_over_each_stretch_of_work() -> None:
    import numpy as np

    def items(start: list[float], latency: list[float]) -> speed.Items:
        n = len(start)
        nan = np.full(n, np.nan)
        return speed.Items(
            keys=[str(i) for i in range(n)], tokens=np.ones(n), latency=np.array(latency), ttft=nan,
            itl=nan, start=np.array(start), warmup=0, errors=0, in_flight=None,
        )  # fmt: skip

    # Two requests one after the other, then an hour's gap (killed, then resumed), then two more.
    run = items([0.0, 1.0, 3600.0, 3601.0], [1.0, 1.0, 1.0, 1.0])
    assert speed.in_flight(run, 1) == pytest.approx(4 / 3602)  # timed over the gap
    # The first stretch's record was lost with the kill: the items before the first start known.
    assert speed.in_flight(run, 1, [3600.0]) == pytest.approx(1.0)
    assert speed.in_flight(run, 1, [0.0, 3600.0]) == pytest.approx(1.0)
    # A stretch's start is taken just before its first request, to the millisecond.
    assert speed.in_flight(run, 1, [0.0004, 3600.0004]) == pytest.approx(1.0)
    # Items out of their sending order (pooled from elsewhere) give the same wall.
    shuffled = items([3601.0, 0.0, 3600.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    assert speed.in_flight(shuffled, 1, [0.0, 3600.0]) == pytest.approx(1.0)
    # Two in flight throughout one stretch: 2, whatever the breaks say of other times.
    both = items([0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    assert speed.in_flight(both, 2, [-5.0, 100.0]) == pytest.approx(2.0)
