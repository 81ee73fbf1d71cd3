"""The least a Python client can do per request: the floor under servediff's HTTP engine.

    .venv/bin/python bench/client_floor.py --url http://127.0.0.1:8111 --concurrency 64

Run by bench/alternate.py beside servediff's client. The same requests (workload.py), encoded
before the clock starts; ``concurrency`` keep-alive connections on uvloop's protocol callbacks,
each response framed by its Content-Length alone and read with ``json.loads``; no validation,
no timeouts, no retries, nothing kept. What servediff's client spends above this is its own;
what this spends is the event loop's and the kernel's.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

from workload import MAX_TOKENS, client_args, messages


class _Floor(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.waiter: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        i = self.buf.lower().find(b"content-length:")
        length = int(self.buf[i + 15 : self.buf.find(b"\r\n", i)])
        if len(self.buf) >= end + 4 + length:
            body, self.buf = self.buf[end + 4 : end + 4 + length], b""
            self.waiter.set_result(body)


async def run(url: str, bodies: list[bytes], concurrency: int) -> int:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
    requests = [head.encode() + b"Content-Length: %d\r\n\r\n" % len(b) + b for b in bodies]
    pending = iter(requests)
    ok = 0
    loop = asyncio.get_running_loop()

    async def work() -> None:
        nonlocal ok
        _, proto = await loop.create_connection(_Floor, host, port)
        for request in pending:
            proto.waiter = loop.create_future()
            proto.transport.write(request)
            answer = json.loads(await proto.waiter)["choices"][0]["message"]["content"]
            ok += bool(answer)  # not in one statement: ``ok`` would be read before the await
        proto.transport.close()

    await asyncio.gather(*(work() for _ in range(concurrency)))
    return ok


def main() -> None:
    args = client_args(__doc__.splitlines()[0])
    bodies = [
        json.dumps({"model": "stub", "messages": messages(i), "max_tokens": MAX_TOKENS}).encode()
        for i in range(args.requests)
    ]
    import uvloop

    t0, c0 = time.perf_counter(), time.process_time()
    ok = uvloop.run(run(args.url, bodies, args.concurrency))
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"requests": args.requests, "ok": ok, "seconds": seconds, "cpu_s": cpu_s}))


if __name__ == "__main__":
    main()
