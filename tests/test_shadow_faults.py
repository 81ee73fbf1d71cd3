"""servediff shadow against fault-injecting stubs: a slow candidate (the queue fills and copies
are dropped, clients never wait), keys that must not cross sides, and records that rotate."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

from servediff.cli import main
from tests.helpers.stub_server import OK_BODY, Behaviour, Reply, Request, stub_server
from tests.test_shadow import Shadow

CLIENT = "Bearer client-key-0123456789"
CANDIDATE_KEY = "candidate-key-9876543210"
BODY = json.dumps({"model": "stub", "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]})


def post(base: str, body: str = BODY) -> tuple[bytes, str, str, float]:
    req = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", "Authorization": CLIENT},
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
        return raw, r.headers["Content-Type"], r.headers["Content-Length"], time.perf_counter() - t0


def recorder(seen: list[Request], delay: float = 0.0) -> Behaviour:
    def behaviour(r: Request) -> Reply:
        seen.append(r)
        return (200, OK_BODY, delay)

    return behaviour


def test_keys_stay_on_their_side_and_records_rotate(tmp_path: Path) -> None:
    primary_seen: list[Request] = []
    candidate_seen: list[Request] = []
    os.environ["SHADOW_TEST_KEY"] = CANDIDATE_KEY
    primary, candidate = stub_server(recorder(primary_seen)), stub_server(recorder(candidate_seen))
    with primary as (p_url, _), candidate as (c_url, _):
        out = tmp_path / "shadow"
        flags = ("--candidate-api-key-env", "SHADOW_TEST_KEY", "--rotate-mb", "0.002")
        shadow = Shadow(p_url, c_url, out, *flags)
        try:
            for n in range(8):
                body = BODY.replace("Hi", f"Hi {n}")
                assert post(shadow.url, body)[:3] == post(p_url, body)[:3]  # bytes and headers
            shadow.wait_mirrored(8)
        finally:
            counts = shadow.stop()
    del os.environ["SHADOW_TEST_KEY"]
    assert counts["mirrored"] == 8 and counts["segments"] > 1
    assert {r.authorization for r in primary_seen} == {CLIENT}
    assert {r.authorization for r in candidate_seen} == {f"Bearer {CANDIDATE_KEY}"}
    files = sorted(out.glob("*.jsonl"))
    assert len(files) == 2 * counts["segments"]
    text = "".join(f.read_text() for f in files)
    assert "client-key" not in text and CANDIDATE_KEY not in text
    primaries = sorted(str(f) for f in out.glob("primary-*.jsonl"))
    candidates = sorted(str(f) for f in out.glob("candidate-*.jsonl"))
    assert main(["compare", *primaries, *candidates, "--md", str(tmp_path / "r.md")]) == 0
    report = (tmp_path / "r.md").read_text()
    section = report[report.index("## Shadow traffic") :].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| shadow-")]
    assert len(rows) == counts["segments"] and "| shadow-0002 (session " in report
    assert sum(int(r[3]) for r in rows) == 8  # every mirrored request, in one segment's row


def test_a_slow_candidate_fills_the_queue_and_copies_are_dropped(tmp_path: Path) -> None:
    seen: list[Request] = []
    primary, candidate = stub_server(recorder([])), stub_server(recorder(seen, delay=1.0))
    with primary as (p_url, _), candidate as (c_url, _):
        shadow = Shadow(p_url, c_url, tmp_path / "shadow", "--queue", "1", "--workers", "1")
        try:
            waits = [post(shadow.url)[3] for _ in range(6)]
        finally:
            counts = shadow.stop()
    assert max(waits) < 0.5  # the candidate's second per request never reached the clients
    assert counts["requests"] == 6 and counts["dropped"] >= 3
    assert counts["mirrored"] + counts["dropped"] == 6


def test_a_folder_holding_a_session_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "shadow"
    out.mkdir()
    (out / "primary-0001.jsonl").write_text("kept\n")
    argv = ["shadow", "--primary", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9"]
    assert main([*argv, "--listen", "127.0.0.1:9", "--out", str(out)]) == 2
    assert [p.name for p in out.iterdir()] == ["primary-0001.jsonl"]
    assert (out / "primary-0001.jsonl").read_text() == "kept\n"
