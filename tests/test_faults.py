"""A failing server: errors are recorded on their items, retried only where it can help."""

from __future__ import annotations

import json
import time
from email.utils import formatdate
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.engines.openai_http import HTTPEngine, HTTPOptions, retry_after_s
from servediff.engines.sse import parse_stream
from servediff.records import read_run
from servediff.suites import SuiteOptions, load_suite
from servediff.types import Completion, SamplingParams
from tests.helpers.stub_server import (
    FAULTS,
    OK_BODY,
    SSE,
    STREAM_FAULTS,
    always,
    chat_body,
    chunk,
    fail_then_ok,
    sse_body,
    stream_body,
    stub_server,
)


def gen(base_url: str, n: int = 2, **opts: object) -> list[Completion]:
    engine = HTTPEngine(HTTPOptions(base_url=base_url, backoff_s=0.01, **opts))  # type: ignore[arg-type]
    out: list[Completion] = []
    engine.generate(
        load_suite("prompts", SuiteOptions(limit=n)).samples, SamplingParams(max_tokens=8), out.append
    )
    return out


def test_500s_are_recorded_errors_and_exit_nonzero(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with stub_server(always(500, "boom")) as (url, sent):
        rc = main(
            [
                "run",
                "--engine",
                "http",
                "--base-url",
                url,
                "--limit",
                "2",
                "--retries",
                "2",
                "--out",
                str(out),
                "--no-progress",
                "--label",
                "broken",
            ]
        )
    assert rc == 2
    assert len(sent) == 2 * 3  # each item tried 1 + 2 retries
    run = read_run(out)
    assert len(run.items) == 2
    for item in run.items.values():
        assert item.error and "HTTP 500" in item.error and "after 3 attempts" in item.error
        assert item.text == ""  # never an empty text passed off as an answer


def test_503_then_ok_is_retried() -> None:
    with stub_server(fail_then_ok(2)) as (url, sent):
        (c,) = gen(url, n=1)
    assert c.error is None and c.text == "stub answer"
    assert sent == [503, 503, 200]


def test_429_is_retried_but_400_is_not() -> None:
    with stub_server(fail_then_ok(1, status=429)) as (url, _):
        (c,) = gen(url, n=1)
    assert c.error is None
    with stub_server(always(400, '{"error": "bad"}')) as (url, sent):
        (c,) = gen(url, n=1)
    assert c.error and "HTTP 400" in c.error and sent == [400]


def test_broken_json_is_an_error_not_text() -> None:
    with stub_server(always(200, '{"choices": [')) as (url, _):
        cs = gen(url)
    assert all(c.error and "not JSON" in c.error and c.text == "" for c in cs)
    with stub_server(always(200, '{"choices": []}')) as (url, _):
        cs = gen(url)
    assert all(c.error and "unexpected response shape" in c.error for c in cs)


def test_timeout_is_recorded() -> None:
    with stub_server(always(200, OK_BODY, delay=2.0)) as (url, _):
        (c,) = gen(url, n=1, timeout_s=0.3)
    assert c.error and "timeout" in c.error


def test_unreachable_server_exits_2(tmp_path: Path) -> None:
    rc = main(
        [
            "run",
            "--engine",
            "http",
            "--base-url",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--no-progress",
        ]
    )
    assert rc == 2


def test_api_key_is_sent_but_never_recorded(tmp_path: Path, monkeypatch: object) -> None:

    mp: pytest.MonkeyPatch = monkeypatch  # type: ignore[assignment]
    mp.setenv("SERVEDIFF_TEST_KEY", "sk-secret-123")
    out = tmp_path / "r.jsonl"
    with stub_server(always(200, OK_BODY)) as (url, _):
        assert (
            main(
                [
                    "run",
                    "--engine",
                    "http",
                    "--base-url",
                    url,
                    "--limit",
                    "1",
                    "--out",
                    str(out),
                    "--api-key-env",
                    "SERVEDIFF_TEST_KEY",
                    "--no-progress",
                ]
            )
            == 0
        )
    assert "sk-secret-123" not in out.read_text()


def test_a_null_answer_is_a_retried_error_never_an_empty_text() -> None:
    with stub_server(always(200, chat_body(None))) as (url, sent):
        (c,) = gen(url, n=1, max_retries=2)
    assert c.error and "no answer: message.content is null" in c.error and "after 3 attempts" in c.error
    assert c.text == "" and len(sent) == 3  # retried like a 5xx, then recorded as an error
    with stub_server(lambda r: (200, chat_body(None if r.index == 0 else "4"), 0.0)) as (url, sent):
        (c,) = gen(url, n=1)
    assert c.error is None and c.text == "4" and len(sent) == 2
    with stub_server(always(200, chat_body(""))) as (url, sent):
        (c,) = gen(url, n=1)
    assert c.error is None and c.text == "" and len(sent) == 1  # an empty string is an answer


def test_completions_null_text_and_missing_choices_are_errors() -> None:
    null_text = json.dumps({"choices": [{"index": 0, "text": None, "finish_reason": "stop"}]})
    for body, why in ((null_text, "no answer: text is null"), ('{"id": "x"}', "unexpected response shape")):
        with stub_server(always(200, body)) as (url, sent):
            (c,) = gen(url, n=1, max_retries=1)
        assert c.error and why in c.error and len(sent) == 2


def test_retry_after_is_honoured() -> None:
    for status in (429, 503):
        with stub_server(fail_then_ok(1, status, {"Retry-After": "1"})) as (url, sent):
            t0 = time.monotonic()
            (c,) = gen(url, n=1)
            waited = time.monotonic() - t0
        assert c.error is None and sent == [status, 200]
        assert waited >= 1.0  # the backoff alone is 0.01 s


def test_retry_after_beyond_the_budget_fails_at_once() -> None:
    with stub_server(always(503, "busy", headers={"Retry-After": "3600"})) as (url, sent):
        t0 = time.monotonic()
        (c,) = gen(url, n=1)
    assert time.monotonic() - t0 < 5 and sent == [503]
    assert c.error and "retry after 3600 s" in c.error


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_800_000_000.0
    assert retry_after_s("7", now) == 7.0
    assert retry_after_s(formatdate(now + 30, usegmt=True), now) == pytest.approx(30.0)
    assert retry_after_s(formatdate(now - 30, usegmt=True), now) == 0.0  # a date passed: no wait
    assert retry_after_s("soon", now) is None and retry_after_s(None, now) is None


# One malformed response fails its own item, never the run: (fault kind, streamed, error fragment).
MALFORMED = [
    ("choices a string", False, "unexpected response shape: choices:"),
    ("message a string", False, "unexpected response shape: choices.0.message:"),
    ("usage a string", False, "unexpected response shape: usage:"),
    ("logprobs a number", False, "unexpected response shape: choices.0.logprobs:"),
    ("event choices a string", True, "unexpected streamed event shape: choices:"),
    ("event delta a string", True, "unexpected streamed event shape: choices.0.delta:"),
    ("event not an object", True, "unexpected streamed event shape: Input should be an object"),
    ("event usage a string", True, "unexpected streamed event shape: usage:"),
    ("null deltas", True, "no answer: every streamed content was null"),
    ("null delta objects", True, "no answer: every streamed content was null"),
    ("stream cut off", True, "cut off"),
]


@pytest.mark.parametrize(("kind", "stream", "why"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_response_is_an_error_on_its_item_and_the_run_goes_on(
    kind: str, stream: bool, why: str, tmp_path: Path
) -> None:
    status, body, headers, _ = (STREAM_FAULTS if stream else FAULTS)[kind]
    ok = (200, stream_body("4") if stream else chat_body("4"), 0.0, SSE if stream else {})
    out = tmp_path / "r.jsonl"
    with stub_server(lambda r: (status, body, 0.0, headers) if r.index == 0 else ok) as (url, sent):
        argv = ["run", "--engine", "http", "--base-url", url, "--limit", "3", "--retries", "0",
                "--out", str(out), "--no-progress", *(["--stream"] if stream else [])]  # fmt: skip
        assert main(argv) == 2  # a recorded error, not a crash (exit 1) and not a clean run
    run = read_run(out)
    assert len(sent) == 3 and len(run.items) == 3
    failed = [i for i in run.items.values() if i.error]
    assert len(failed) == 1 and why in (failed[0].error or "") and failed[0].text == ""
    assert sorted(i.text for i in run.items.values() if not i.error) == ["4", "4"]


def test_a_stream_without_any_content_is_an_empty_answer_but_null_content_is_none() -> None:
    """llama-cpp-python streams an empty answer as a role-only event and an empty one with the
    finish reason, llama-server the same with "content": null beside the role: that is an answer
    (""). Content sent as null, every time, is no answer."""
    for first in ({"role": "assistant"}, {"role": "assistant", "content": None}):
        empty = sse_body([chunk(first), chunk({}, "stop")]).encode()
        assert parse_stream("a", empty, [], 0.0, 0.1).text == ""
    blank = sse_body([chunk({"role": "assistant", "content": ""}), chunk({"content": None}, "stop")]).encode()
    assert parse_stream("a", blank, [], 0.0, 0.1).text == ""  # "" was sent: an empty answer
    with pytest.raises(ValueError, match="every streamed content was null"):
        parse_stream("a", STREAM_FAULTS["null deltas"][1].encode(), [], 0.0, 0.1)


def test_null_deltas_are_retried_like_a_null_content() -> None:
    null = STREAM_FAULTS["null deltas"]
    with stub_server(always(200, null[1], headers=null[2])) as (url, sent):
        (c,) = gen(url, n=1, max_retries=2, stream=True)
    assert c.error and "every streamed content was null" in c.error and "after 3 attempts" in c.error
    assert c.text == "" and len(sent) == 3


@pytest.mark.parametrize("version", [0, -1])
def test_resuming_a_record_of_no_known_schema_is_refused(
    version: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.jsonl"
    with stub_server(always(200, OK_BODY)) as (url, sent):
        argv = ["run", "--engine", "http", "--base-url", url, "--limit", "2", "--out", str(out),
                "--no-progress"]  # fmt: skip
        assert main(argv) == 0
        lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
        lines[0] = json.dumps({**json.loads(lines[0]), "schema_version": version}) + "\n"
        out.write_text("".join(lines), encoding="utf-8")
        before, requests = out.read_bytes(), len(sent)
        capsys.readouterr()
        assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {out}:1: bad header: schema_version must be from 1 to 3, not {version}"
    assert out.read_bytes() == before and len(sent) == requests  # nothing sent, nothing written
