"""servediff shadow as a hostile client, a broken server and an impatient operator use it: a body
nested 50,000 deep, a candidate that never answers, SIGTERM and SIGKILL mid-traffic, a client
that leaves early, a primary that cuts its body, and an error body that echoes the client's keys.

Whatever happens, every completion request the proxy received ends in exactly one count
(``requests = mirrored + dropped + unparsed + sampled_out + failed``), the session ends within
seconds of SIGTERM, and nothing of servediff outlives a SIGKILL of the proxy.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.stub_server import OK_BODY, always, stub_server
from tests.test_shadow import Shadow

BODY = json.dumps({"model": "stub", "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]})
NESTED = "[" * 50_000 + "]" * 50_000


def post(base: str, body: str = BODY, headers: dict[str, str] | None = None, query: str = "") -> int:
    req = urllib.request.Request(
        f"{base}/v1/chat/completions{query}",
        data=body.encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.read()  # a client that reads the error body: one that leaves first is a cut answer
        return int(e.code)


def balanced(counts: dict[str, int]) -> bool:
    ends = ("mirrored", "dropped", "unparsed", "sampled_out", "failed")
    return counts["requests"] == sum(counts[k] for k in ends)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, …)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def test_nested_body_and_hung_candidate_then_sigterm_ends_within_seconds(tmp_path: Path) -> None:
    """Before: the nested body killed the replay process (RecursionError), nothing after it was
    recorded or counted, and SIGTERM with a hung candidate took 120 s or never finished."""
    with (
        stub_server(always(200, OK_BODY)) as (p_url, _),
        stub_server(always(200, OK_BODY, 600.0)) as (c_url, _),
    ):
        out = tmp_path / "shadow"
        shadow = Shadow(p_url, c_url, out, "--queue", "4", "--workers", "2")
        try:
            assert post(shadow.url, NESTED) == 200  # the client is answered by the primary
            deadline = time.monotonic() + 20
            while shadow.counts()["unparsed"] < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert shadow.counts()["unparsed"] == 1  # counted, and the replay process lives on
            for n in range(12):  # two in flight on the hung candidate, a few queued, the rest dropped
                assert post(shadow.url, BODY.replace("Hi", f"Hi {n}")) == 200
        finally:
            t0 = time.monotonic()
            shadow.proc.send_signal(signal.SIGTERM)
            _, err = shadow.proc.communicate(timeout=60)
            took = time.monotonic() - t0
    assert shadow.proc.returncode == 0, err.decode()
    print(f"SIGTERM to exit with a hung candidate: {took:.1f} s")
    assert took < 10, f"SIGTERM took {took:.1f} s"
    counts = json.loads((out / "shadow.json").read_text())
    assert counts["requests"] == 13 and counts["unparsed"] == 1 and counts["dropped"] >= 1
    assert counts["unfinished"] >= 2 and counts["failed"] == counts["unfinished"], counts
    assert balanced(counts), counts
    assert b"Traceback" not in err


def test_sigkill_of_the_proxy_leaves_no_process_of_servediff(tmp_path: Path) -> None:
    """Before: the replay process (and multiprocessing's resource tracker) stayed while the
    candidate hung, up to its 600 s timeout."""
    with (
        stub_server(always(200, OK_BODY)) as (p_url, _),
        stub_server(always(200, OK_BODY, 600.0)) as (c_url, _),
    ):
        shadow = Shadow(p_url, c_url, tmp_path / "shadow", "--workers", "2")
        for n in range(4):
            post(shadow.url, BODY.replace("Hi", f"Hi {n}"))
        time.sleep(0.5)  # the copies reach the candidate, which never answers
        below = descendants(shadow.proc.pid)
        assert below, "the replay process is not running"
        shadow.proc.kill()
        shadow.proc.wait()
        t0 = time.monotonic()
        while any(alive(p) for p in below) and time.monotonic() < t0 + 5:
            time.sleep(0.1)
        print(f"{len(below)} processes below the proxy, gone {time.monotonic() - t0:.1f} s after its SIGKILL")
        left = [p for p in below if alive(p)]
        for p in left:  # the test never leaves them behind either
            os.kill(p, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(below)} processes outlived the proxy by 5 s"


def test_no_header_value_of_the_client_reaches_disk(tmp_path: Path) -> None:
    """Before: a 401 body echoing the client's headers was recorded with the ``api-key`` value
    (only the Bearer form was redacted)."""
    secrets = {
        "Authorization": "Bearer CANARY-BEARER-12345",
        "api-key": "CANARY-APIKEY-67890",
        "x-api-key": "CANARY-XAPIKEY-24680",
        "Cookie": "session=CANARY-COOKIE-13579; theme=dark",
        "X-Gateway-Auth": "CANARY-GATEWAY-11223",
    }
    query = "?key=CANARY-QUERY-44556"
    echo = '{"error": {"message": "bad key at {path}: {headers}"}}'
    with stub_server(always(401, echo)) as (p_url, _), stub_server(always(200, OK_BODY)) as (c_url, _):
        out = tmp_path / "shadow"
        shadow = Shadow(p_url, c_url, out)
        try:
            assert post(shadow.url, headers=secrets, query=query) == 401
            shadow.wait_mirrored(1, timeout=30)
        finally:
            counts = shadow.stop()
    assert counts["mirrored"] == 1 and counts["primary_errors"] == 1
    written = "".join(f.read_text() for f in out.rglob("*") if f.is_file())
    assert "HTTP 401" in written and "bad key" in written  # the error itself is kept
    assert "CANARY" not in written, [line for line in written.splitlines() if "CANARY" in line]


class RawPrimary(socketserver.ThreadingTCPServer):
    """A primary written on the socket: a body cut short of its Content-Length ("cut"), or a slow
    chunked stream that a client may leave ("slow"); a model list for the identity call."""

    daemon_threads = True
    allow_reuse_address = True


class RawHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(65536)
            if not data:
                return
            head += data
        headers, _, body = head.partition(b"\r\n\r\n")
        length = int(
            next(
                (h.split(b":")[1] for h in headers.split(b"\r\n") if h.lower().startswith(b"content-length")),
                b"0",
            )
        )
        while len(body) < length:
            body += self.request.recv(65536)
        if headers.startswith(b"GET"):
            page = b'{"data": [{"id": "stub"}]}'
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(page), page)
            )
        elif b"cut" in body:
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n"
            )
            self.wfile.write(OK_BODY.encode()[:60])
        else:  # slow
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            for _ in range(20):
                try:
                    self.wfile.write(b"6\r\ndata: \r\n")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.1)
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@contextmanager
def raw_primary() -> Iterator[str]:
    server = RawPrimary(("127.0.0.1", 0), RawHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_cut_answer_or_a_client_that_leaves_is_counted_without_a_traceback(tmp_path: Path) -> None:
    """Before: aiohttp printed "Error handling request" with a traceback for each, and neither
    request was counted anywhere."""
    with raw_primary() as p_url, stub_server(always(200, OK_BODY)) as (c_url, _):
        out = tmp_path / "shadow"
        shadow = Shadow(p_url, c_url, out)
        try:
            with pytest.raises(http.client.IncompleteRead):  # the client sees the cut as it was
                post(shadow.url, BODY.replace("Hi", "cut"))
            for _ in range(3):  # a client that reads the first bytes of a stream and leaves
                with socket.create_connection(("127.0.0.1", shadow.port), timeout=10) as s:
                    body = BODY.replace("Hi", "slow").encode()
                    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                    s.sendall(head.encode() + b"Content-Type: application/json\r\n\r\n" + body)
                    assert s.recv(64).startswith(b"HTTP/1.1 200")
            time.sleep(3)  # the primary's stream runs on; the proxy meets the closed client
            counts = shadow.counts()
        finally:
            shadow.proc.send_signal(signal.SIGTERM)
            _, err = shadow.proc.communicate(timeout=60)
    final = json.loads((out / "shadow.json").read_text())
    assert counts["requests"] == 4 and counts["relay_failed"] == 4, counts
    assert final["failed"] == 4 and balanced(final), final
    text = err.decode()
    assert "Traceback" not in text and "Error handling request" not in text, text
    assert text.count("not mirrored") == 4
